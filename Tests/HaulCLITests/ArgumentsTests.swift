import Testing

@testable import HaulCLI

@Suite("Command-line options, parsed as getopt does")
struct ArgumentsTests {
    static let options: [Arguments.Option] = [
        .init("-o", "--output", value: true),
        .init("-x", "--connections", value: true),
        .init("-q", "--quiet"),
        .init("-c", "--continue"),
    ]

    @Test(arguments: [
        (["-x", "16"], ["--connections": ["16"]]),
        (["-x16"], ["--connections": ["16"]]),
        (["--connections=16"], ["--connections": ["16"]]),
        (["-qx16"], ["--quiet": [""], "--connections": ["16"]]),
        (["-qc"], ["--quiet": [""], "--continue": [""]]),
        (["-qo", "out.bin"], ["--quiet": [""], "--output": ["out.bin"]]),
        (["-oq"], ["--output": ["q"]]),
        (["-x2", "-x", "3"], ["--connections": ["2", "3"]]),
    ])
    func shortOptionsMayRunTogetherAndTakeTheirValueAttached(args: [String], expected: [String: [String]]) throws {
        let (values, positionals) = try Arguments.parse(args + ["http://h/x"], options: Self.options)
        #expect(values == expected)
        #expect(positionals == ["http://h/x"])
    }

    @Test(arguments: [
        (["-qz"], "unknown option -z in -qz"),
        (["-zq"], "unknown option -z in -zq"),
        (["-qx"], "-x needs a value"),
        (["--quiet=yes"], "--quiet takes no value"),
        (["-y"], "unknown option -y"),
    ])
    func mistakesNameTheOption(args: [String], message: String) {
        #expect(throws: UsageError.self) { try Arguments.parse(args, options: Self.options) }
        do {
            _ = try Arguments.parse(args, options: Self.options)
        } catch {
            #expect(error.message.hasPrefix(message), "\(error.message)")
        }
    }

    @Test func aDashAloneAndWordsAfterDoubleDashArePositional() throws {
        let (values, positionals) = try Arguments.parse(["-q", "-", "--", "-x16"], options: Self.options)
        #expect(values == ["--quiet": [""]])
        #expect(positionals == ["-", "-x16"])
    }
}
