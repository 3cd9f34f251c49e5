import HaulTestTraits
import Testing

@testable import HaulCLI

/// The output's number formats, without `String(format:)` (Foundation proper).
@Suite("Number formats of the output", .fewAtOnce)
struct FormatTests {
    @Test func fixedDecimalsRoundAsPrintfDoes() {
        #expect(Format.fixed(1.0, 1) == "1.0")
        #expect(Format.fixed(0.25, 1) == "0.2")  // an exact tie goes to even, as %.1f
        #expect(Format.fixed(2.999, 2) == "3.00")
        #expect(Format.fixed(1023.96, 1) == "1024.0")
        #expect(Format.fixed(0.0005, 3) == "0.000")
        #expect(Format.fixed(0.0015, 3) == "0.002")
        #expect(Format.fixed(-1.25, 1) == "-1.2")
        #expect(Format.fixed(-0.01, 1) == "0.0")
        #expect(Format.fixed(42, 0) == "42")
        #expect(Format.fixed(.nan, 1) == "nan")
        #expect(Format.fixed(-.infinity, 1) == "-inf")
        #expect(Format.fixed(1e300, 1) == "1e+300")
    }

    @Test func paddingAndHex() {
        #expect(Format.zeroPadded(7, 2) == "07")
        #expect(Format.zeroPadded(123, 2) == "123")
        #expect(Format.zeroPadded(-5, 3) == "-005")
        #expect(Format.rightAligned("5", 3) == "  5")
        #expect(Format.rightAligned("100", 3) == "100")
        #expect(Format.leftAligned("eth0", 6) == "eth0  ")
        #expect(Format.leftAligned("enp0s31f6-long", 6) == "enp0s3")
        #expect(Format.hex(0x1b, 4) == "001b")
        #expect(Format.hex(0x7, 2, uppercase: true) == "07" && Format.hex(0x9f, 2, uppercase: true) == "9F")
    }

    @Test func durationsAndSizes() {
        #expect(Output.duration(5) == "0:05")
        #expect(Output.duration(3725) == "1:02:05")
        #expect(Output.bytes(1536) == "1.5 KiB")
        #expect(Output.bytes(999) == "999 B")
    }
}
