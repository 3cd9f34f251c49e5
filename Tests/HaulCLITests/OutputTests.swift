import Foundation
import HaulTestTraits
import Testing

@testable import HaulCLI
@testable import HaulCore

@Suite("Terminal output", .fewAtOnce)
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

extension OutputTests {
    /// `-j 16` on a 10-row terminal: the block of 17 lines scrolled the screen at each redraw
    /// (the cursor cannot go up past the top), and was drawn again lower each time.
    @Test func aBlockTallerThanTheTerminalCountsTheRest() {
        let lines = (1...16).map { "download \($0)" } + ["total"]
        let fitted = Output.fittedBlock(lines, rows: 10)
        #expect(fitted.count == 9)
        #expect(fitted.prefix(7) == lines.prefix(7))
        #expect(fitted[7] == "… and 9 more")
        #expect(fitted.last == "total")
        #expect(Output.fittedBlock(lines, rows: 40) == lines)
        #expect(Output.fittedBlock(lines, rows: 1) == ["… and 16 more", "total"])
    }
}

extension OutputTests {
    /// A note during a `-j` display ("saved …") went below the block, and the next redraw moved
    /// up by the block's height into it (drawing over it); the final clear then erased the last
    /// notes. A note now takes the block off first; the next redraw starts below the note.
    @Test func aNoteDuringTheBlockIsNotDrawnOverOrErased() {
        let written = Locked("")
        let output = Output(mode: .human, isTerminal: true) { text, fd in
            if fd == 2 { written.withLock { $0 += text } }
        }
        output.progressBlock(["#1 a.bin", "total"])
        written.set("")
        output.note("saved a.bin")
        #expect(written.get() == "\u{1B}[2A\u{1B}[Jhaul: saved a.bin\n")
        written.set("")
        output.progressBlock(["total"])
        #expect(!written.get().contains("\u{1B}[2A"), "the redraw does not climb into the note")
        #expect(written.get().hasPrefix("\r\u{1B}[2K"))
        written.set("")
        output.clearBlock()
        #expect(written.get() == "\u{1B}[1A\u{1B}[J", "the final clear takes only the block")
    }
}

extension OutputTests {
    @Test func theBarShowsWhatIsDoneWithAHeadAtItsEdge() {
        #expect(Output.bar(0.5, width: 12) == "[====>     ]")
        #expect(Output.bar(0, width: 12) == "[          ]")
        #expect(Output.bar(1, width: 12) == "[==========]")
        #expect(Output.bar(0.999, width: 12) == "[========> ]")
    }

    /// On a wide terminal a known size gets a bar after the percentage, and the line still fits;
    /// a narrow one (or an unknown size) gets the figures alone, as before.
    @Test func aWideTerminalDrawsABarAndANarrowOneDoesNot() {
        let quarter = TransferProgress(completedBytes: 1 << 20, totalBytes: 4 << 20)
        let wide = Output.terminalLine(quarter, name: "f.iso", spinner: 0, width: 120)
        let bar = Output.bar(0.25, width: Output.maximumBar)
        #expect(wide == "| " + Output.progressLine(quarter, name: "f.iso", spinner: 0, bar: bar), "\(wide)")
        #expect(Output.displayWidth(wide) <= 119)
        // 80 columns: the bar takes what the figures and the name leave.
        let eighty = Output.terminalLine(quarter, name: "f.iso", spinner: 0, width: 80)
        #expect(eighty.contains("[") && Output.displayWidth(eighty) <= 79, "\(eighty)")
        // A long name keeps 24 columns beside a bar, then loses its middle.
        let long = Output.terminalLine(quarter, name: String(repeating: "n", count: 200), spinner: 0, width: 100)
        #expect(long.contains("[====") && long.contains("…") && Output.displayWidth(long) == 99, "\(long)")
        let narrow = Output.terminalLine(quarter, name: "f.iso", spinner: 0, width: 50)
        #expect(!narrow.contains("["), "\(narrow)")
        let unknown = TransferProgress(completedBytes: 1 << 20, totalBytes: nil)
        #expect(!Output.terminalLine(unknown, name: "f.iso", spinner: 0, width: 200).contains("["))
    }
}

extension OutputTests {
    /// A URL's last segment is percent-decoded: `%1B` in a list's URL is an ESC, and it reached
    /// the terminal in the progress line and the `-j` block before the server's name replaced
    /// it (the server's names are cleaned by `SafeFileName`, a URL's fallback was not). A right-
    /// to-left override showed `evil\u{202E}fdp.exe` as `evilexe.pdf`.
    @Test func aNameOnTheProgressLineOrInTheBlockCannotDriveTheTerminal() {
        let written = Locked("")
        let output = Output(mode: .human, isTerminal: true) { text, fd in
            if fd == 2 { written.withLock { $0 += text } }
        }
        // What is drawn is fitted to the terminal running the tests (80 x 24 when stderr is not
        // one): the expected lines are fitted the same way.
        let (width, rows) = Output.terminalSize()
        let name = "a\u{1B}]0\u{07}\u{202E}fdp"
        output.progress(progress, name: name)
        #expect(!written.get().contains("\u{07}") && !written.get().contains("\u{202E}"), "\(written.get())")
        #expect(Output.printable(name) == "a\\x1B]0\\x07\\u{202E}fdp")
        #expect(
            written.get().hasSuffix(
                Output.terminalLine(progress, name: Output.printable(name), spinner: 0, width: width)),
            "\(written.get())")
        output.clearLine()
        written.set("")
        let lines = ["#1 x\u{1B}[2Jy", "waiting for network  #2 \u{9B}31m", "total"]
        output.progressBlock(lines)
        let block = written.get()
        #expect(!block.contains("\u{1B}[2J") && !block.contains("\u{9B}"), "\(block)")
        for line in Output.fittedBlock(lines.map(Output.printable), rows: rows) {
            #expect(block.contains("\r\u{1B}[2K" + Output.fitted(line, width: width) + "\n"), "\(block)")
        }
        #expect(lines.map(Output.printable).prefix(2) == ["#1 x\\x1B[2Jy", "waiting for network  #2 \\x9B31m"])
    }

    @Test func printableEscapesControlsAndBidiControlsOnly() {
        #expect(Output.printable("plain näme 漢字 👩‍💻.txt") == "plain näme 漢字 👩‍💻.txt")
        #expect(Output.printable("a\nb\u{7F}c\u{85}") == "a\\x0Ab\\x7Fc\\x85")
        #expect(
            Output.printable("\u{200E}\u{200F}\u{061C}\u{202A}\u{2069}")
                == "\\u{200E}\\u{200F}\\u{061C}\\u{202A}\\u{2069}")
        #expect(Output.printable("a\u{2028}b") == "a\u{2028}b", "a line separator is no control: it stays")
    }
}
