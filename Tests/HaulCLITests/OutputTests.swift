import Foundation
import Testing

@testable import HaulCLI
@testable import HaulCore

@Suite("Terminal output")
struct OutputTests {
    let progress = TransferProgress(completedBytes: 1 << 20, totalBytes: 4 << 20)

    /// A line wider than the terminal wrapped, and `\r` redrew only its last row: each update
    /// left a line behind (and a `-j` block climbed the screen). Lines fit in width - 1 now, the
    /// name losing its middle first.
    @Test func aLongNameLosesItsMiddleToFitTheTerminal() {
        let name = String(repeating: "a", count: 150) + "-end.iso"
        let line = Output.progressLine(progress, name: name, spinner: nil)
        #expect(Output.displayWidth(line) > 80)
        let fitted = Output.fitted(line, width: 80)
        #expect(Output.displayWidth(fitted) == 79)
        #expect(fitted.hasPrefix(line.prefix(20)))
        #expect(fitted.contains("…") && fitted.hasSuffix("-end.iso"), "\(fitted)")
    }

    @Test func wideCharactersCountTwoColumns() {
        let name = String(repeating: "漢", count: 60) + ".txt"
        let fitted = Output.fitted(Output.progressLine(progress, name: name, spinner: nil), width: 60)
        #expect(Output.displayWidth(fitted) <= 59)
        #expect(fitted.hasSuffix(".txt"))
        #expect(Output.displayWidth("漢字") == 4)
    }

    @Test func aLineThatFitsIsLeftAloneAndATinyTerminalCutsTheFigures() {
        let line = Output.progressLine(progress, name: "f.bin", spinner: nil)
        #expect(Output.fitted(line, width: 200) == line)
        let tiny = Output.fitted(line, width: 12)
        #expect(tiny == String(line.prefix(11)))
    }
}
