import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCLI

@Suite("Command-line options, parsed as getopt does", .fewAtOnce)
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

@Suite("-i LIST: URLs one per line, aria2 style", .fewAtOnce)
struct InputListTests {
    @Test(arguments: ["\n", "\r\n"])
    func linesEndWithLFOrCRLF(ending: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let lines = ["# list", "http://h/a.bin", "  out=renamed.bin", "", "http://h/b.bin", "\tdir=sub"]
        let path = dir.file("list.txt")
        #expect(FileManager.default.createFile(atPath: path, contents: Data(lines.joined(separator: ending).utf8)))
        let entries = try GetCommand.readList(path)
        #expect(entries.map(\.raw) == ["http://h/a.bin", "http://h/b.bin"])
        #expect(entries.map(\.options.out) == ["renamed.bin", nil])
        #expect(entries.map(\.options.dir) == [nil, "sub"])
    }

    /// The list is split by scalars, not Characters (a thousand-line list cost milliseconds),
    /// where Character.isNewline splits it: the same lines, CR LF one break, a combining mark
    /// after a newline on the next line, invalid UTF-8 repaired as before.
    @Test(arguments: [
        "a\nb", "a\r\nb\r\n", "a\rb\n\rc", "\r\r\n\n", "x\u{0B}y\u{0C}z", "n\u{85}l\u{2028}s\u{2029}p",
        "e\u{301}\n\u{301}f", "\n", "", "no newline", "é\r\n\u{2028}\u{2028}end\r",
    ])
    func linesSplitAsCharactersWould(text: String) {
        let expected = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        #expect(GetCommand.lines(text) == expected)
        let invalid = String(decoding: Array(text.utf8) + [0xFF, 0x0A, 0xC3] + Array(text.utf8), as: UTF8.self)
        let repaired = invalid.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        #expect(GetCommand.lines(invalid) == repaired)
    }

    /// Notepad and other Windows editors start a UTF-8 file with a byte order mark; it was
    /// read as part of the first URL ("invalid URL '\u{FEFF}http://…'").
    @Test func aByteOrderMarkBeforeTheFirstURLIsNotPartOfIt() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("bom.txt")
        let list = Data([0xEF, 0xBB, 0xBF]) + Data("http://h/a.bin\r\n out=x.bin\r\nhttp://h/b.bin\r\n".utf8)
        #expect(FileManager.default.createFile(atPath: path, contents: list))
        let entries = try GetCommand.readList(path)
        #expect(entries.map(\.raw) == ["http://h/a.bin", "http://h/b.bin"])
        #expect(entries.map(\.options.out) == ["x.bin", nil])
    }

    @Test func aChecksumLineAppliesToTheURLAbove() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let sum = String(repeating: "ab", count: 32)
        let path = dir.file("sums.txt")
        let md5 = String(repeating: "0f", count: 16)
        let list = "http://h/a.bin\n  checksum=sha-256=\(sum.uppercased())\n  checksum=MD5=\(md5)\nhttp://h/b.bin\n"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(list.utf8)))
        let entries = try GetCommand.readList(path)
        #expect(entries.map { $0.options.checksums.map(\.description) } == [["sha-256=\(sum)", "md5=\(md5)"], []])
        let bad = dir.file("bad.txt")
        #expect(FileManager.default.createFile(atPath: bad, contents: Data("http://h/a\n checksum=md5=abc\n".utf8)))
        let error = #expect(throws: UsageError.self) { try GetCommand.readList(bad) }
        #expect(error?.message == "\(bad):2: checksum=: md5 checksum needs 32 hex digits, not 'abc'")
    }

    @Test func aMistakeNamesItsLineWhateverTheLineEndings() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("bad.txt")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("http://h/a\r\n\r\n  colour=red\r\n".utf8)))
        let error = #expect(throws: UsageError.self) { try GetCommand.readList(path) }
        #expect(error?.message.hasPrefix("\(path):3: unknown option 'colour'") == true, "\(error?.message ?? "")")
    }

    /// `haul get -i LIST` parses its arguments and list on the main thread while libcurl loads,
    /// only where reading the list cannot wait: a regular file, not standard input or a pipe.
    @Test func aListThatIsARegularFileIsParsedBeforeTheCommandRuns() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let list = dir.file("urls.txt")
        #expect(FileManager.default.createFile(atPath: list, contents: Data("http://h/a.bin\nhttp://h/b.bin\n".utf8)))
        let parsed = try #require(GetCommand.parsedEarly(["get", "-q", "-j", "2", "-d", dir.path, "-i", list]))
        #expect(try parsed.get().urls.map(\.absoluteString) == ["http://h/a.bin", "http://h/b.bin"])
        let bad = dir.file("bad.txt")
        #expect(FileManager.default.createFile(atPath: bad, contents: Data("http://h/a\n  colour=red\n".utf8)))
        let refused = try #require(GetCommand.parsedEarly(["get", "--input-file=\(bad)"]))
        #expect(throws: UsageError.self) { try refused.get() }
        let fifo = dir.file("fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(GetCommand.parsedEarly(["get", "-i", fifo]) == nil)
        #expect(GetCommand.parsedEarly(["get", "-i", "-"]) == nil)
        #expect(GetCommand.parsedEarly(["get", "-i", dir.file("missing.txt")]) == nil)
        #expect(GetCommand.parsedEarly(["get", "--background", "-i", list]) == nil)
        #expect(GetCommand.parsedEarly(["get", "-i", list, "--help"]) == nil)
        #expect(GetCommand.parsedEarly(["get", "http://h/a.bin"]) == nil)
        #expect(GetCommand.parsedEarly(["upload", "-i", list]) == nil)
        #expect(GetCommand.parsedEarly(["get", "--bogus", "-i", list]) == nil)
    }
}
