import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// `haul get`'s and `haul upload`'s output, compared with files in `Golden/`, as
/// swift-argument-parser compares its help texts: a change in what users see or what scripts
/// parse shows as a failing test with both texts. What varies from run to run (the test server's
/// port, the temporary directory, speeds, durations, ETAs) is replaced by a placeholder first.
///
/// Re-record after an intended change: `HAUL_RECORD_GOLDEN=1 swift test --filter GoldenOutputTests`
/// (then read the diff of `Tests/HaulCLITests/Golden/` before committing it).
@Suite("Golden output: haul get and haul upload, human and --json", .fewAtOnce)
struct GoldenOutputTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")
    static let recording = ProcessInfo.processInfo.environment["HAUL_RECORD_GOLDEN"] == "1"

    /// `text` with what varies between runs replaced: the server's origin, the directory, speeds,
    /// durations and ETAs; and of each transfer's progress reports only the last kept, where it
    /// came (how many come, and whether one repeats at 100%, depends on how the bytes arrive).
    static func normalized(_ text: String, server: TestServer, directory: TemporaryDirectory) -> String {
        var t = text.replacingOccurrences(of: "http://127.0.0.1:\(server.port)", with: "http://SERVER")
        t = t.replacingOccurrences(of: directory.path, with: "DIR")
        let patterns: [(String, String)] = [
            (#"[0-9.]+ ([KMGT]i)?B/s"#, "SPEED/s"),  // human speeds
            (#""speed":[0-9.e+-]+"#, #""speed":SPEED"#),  // --json speeds
            (#","eta":[^,}]*"#, ""),  // --json ETAs, present only while a speed is known
            (#"in [0-9.]+ s\b"#, "in T s"),  // "saved F (4.9 KiB in 0.0 s)"
            (#"ETA [0-9:-]+"#, "ETA T"),
            (#""seconds":[0-9.e+-]+"#, #""seconds":T"#),
        ]
        for (pattern, replacement) in patterns {
            t = t.replacingOccurrences(of: pattern, with: replacement, options: .regularExpression)
        }
        let lines = t.split(separator: "\n", omittingEmptySubsequences: false)
        // Which transfer a progress line is of: its --json id (none for one download), or the
        // name at the end of a human line.
        func progressKey(_ line: Substring) -> String? {
            if line.hasPrefix(#"{"event":"progress""#) {
                return line.firstMatch(of: /"id":([0-9]+)/).map { "json \($0.1)" } ?? "json"
            }
            if line.wholeMatch(of: /\s*[0-9]{1,3}% .*/) != nil {
                return "human " + (line.split(separator: " ").last ?? "")
            }
            return nil
        }
        var last: [String: Int] = [:]
        for (i, line) in lines.enumerated() { if let key = progressKey(line) { last[key] = i } }
        return lines.enumerated().filter { i, line in progressKey(line).map { last[$0] == i } ?? true }
            .map(\.element).joined(separator: "\n")
    }

    /// Compares `actual` with `Golden/<name>.txt`, or writes it there when recording.
    static func expectGolden(_ name: String, _ actual: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let file = directory.appendingPathComponent(name + ".txt")
        if recording {
            guard ProcessInfo.processInfo.environment["CI"] == nil else {
                Issue.record(
                    "HAUL_RECORD_GOLDEN is refused under CI: record on a workstation", sourceLocation: sourceLocation)
                return
            }
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                try actual.write(to: file, atomically: true, encoding: .utf8)
            } catch {
                Issue.record("cannot record \(file.path): \(error)", sourceLocation: sourceLocation)
            }
            return
        }
        guard let expected = try? String(contentsOf: file, encoding: .utf8) else {
            Issue.record(
                "no golden file \(file.path); record it with HAUL_RECORD_GOLDEN=1", sourceLocation: sourceLocation)
            return
        }
        #expect(actual == expected, "golden \(name).txt differs", sourceLocation: sourceLocation)
    }

    /// Runs `haul args` (`SERVER` in an argument becomes the server's origin, `DIR` the
    /// directory) and returns its exit status, stdout and stderr as one normalized text.
    func run(_ args: [String], server: TestServer, dir: TemporaryDirectory) async throws -> String {
        let origin = "http://127.0.0.1:\(server.port)"
        let real = args.map {
            $0.replacingOccurrences(of: "SERVER", with: origin).replacingOccurrences(of: "DIR", with: dir.path)
        }
        let r = try await CLI.run(real)
        let text =
            "$ haul \(args.joined(separator: " "))\nexit \(r.status)\n--- stdout\n\(r.stdout)--- stderr\n\(r.stderr)"
        return Self.normalized(text, server: server, directory: dir)
    }

    @Test func getOneFileHuman() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var out = try await run(["get", "-d", "DIR", "SERVER/one.bin?size=5000"], server: server, dir: dir)
        out += try await run(["get", "-d", "DIR", "SERVER/one.bin?size=5000"], server: server, dir: dir)
        Self.expectGolden("get-human", out)
    }

    @Test func getOneFileJSON() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var out = try await run(["get", "--json", "-d", "DIR", "SERVER/one.bin?size=5000"], server: server, dir: dir)
        out += try await run(["get", "--json", "-d", "DIR", "SERVER/one.bin?size=5000"], server: server, dir: dir)
        Self.expectGolden("get-json", out)
    }

    @Test func getErrors() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var out = try await run(["get", "-d", "DIR", "SERVER/gone.bin?status=404"], server: server, dir: dir)
        out += try await run(["get", "--json", "-d", "DIR", "SERVER/gone.bin?status=404"], server: server, dir: dir)
        out += try await run(["get", "-d", "DIR"], server: server, dir: dir)
        out += try await run(["get", "--bogus", "SERVER/x"], server: server, dir: dir)
        // A list that is a regular file is parsed before the command's task runs (HaulCLI.main).
        try Data("http://h/a.bin\n  colour=red\n".utf8).write(to: URL(fileURLWithPath: dir.file("list.txt")))
        out += try await run(["get", "-q", "-j", "2", "-d", "DIR", "-i", "DIR/list.txt"], server: server, dir: dir)
        out += try await run(["get", "-q", "-j", "2", "-d", "DIR", "-i", "DIR/none.txt"], server: server, dir: dir)
        Self.expectGolden("get-errors", out)
    }

    /// Several at once: the lines of different downloads interleave as they come, so each
    /// stream is compared sorted.
    @Test func getSeveralJSON() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let args = ["get", "--json", "-j", "2", "-d", "DIR", "SERVER/a.bin?size=3000", "SERVER/b.bin?size=4000"]
        let text = try await run(args, server: server, dir: dir)
        let parts = text.components(separatedBy: "--- stderr\n")
        let head = parts[0].components(separatedBy: "--- stdout\n")
        let stdout = head[1].split(separator: "\n").sorted().joined(separator: "\n")
        Self.expectGolden("get-several-json", head[0] + "--- stdout (sorted)\n" + stdout + "\n--- stderr\n" + parts[1])
    }

    @Test func getToStandardOutput() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        Self.expectGolden(
            "get-stdout", try await run(["get", "-o", "-", "SERVER/t.txt?body=hello"], server: server, dir: dir))
    }

    @Test func uploadHumanAndJSON() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        try Data(TestContent.bytes(count: 3000)).write(to: URL(fileURLWithPath: dir.file("up.bin")))
        var out = try await run(["upload", "-T", "DIR/up.bin", "SERVER/raw?upload=raw"], server: server, dir: dir)
        out += try await run(
            [
                "upload", "--json", "-o", "DIR/reply.json", "SERVER/form?upload=multipart", "-F", "title=x", "-F",
                "file=@DIR/up.bin",
            ],
            server: server, dir: dir)
        out += try await run(
            ["upload", "--json", "SERVER/form?upload=multipart", "-F", "a=b"], server: server, dir: dir)
        Self.expectGolden("upload", out)
    }
}
