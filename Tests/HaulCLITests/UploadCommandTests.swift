import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("haul upload, run as a process", .serialized, .fewAtOnce)
struct UploadCommandTests {
    func sha(_ bytes: [UInt8]) -> String { HaulCore.SHA256.hexDigest(of: bytes) }

    @Test func curlStyleFormFieldsAndFiles() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let data = TestContent.bytes(seed: 3, count: 100_000)
        #expect(FileManager.default.createFile(atPath: dir.file("a.bin"), contents: Data(data)))
        #expect(FileManager.default.createFile(atPath: dir.file("note.txt"), contents: Data("from a file".utf8)))
        let r = try await CLI.run([
            "upload", "-q", server.url("/form?upload=multipart").absoluteString, "-F", "title=hello",
            "-F", "file=@\(dir.file("a.bin"));type=application/x-test;filename=renamed.bin", "-F",
            "text=<\(dir.file("note.txt"))",
        ])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("\"parts\":3"))
        let parts = try #require(server.uploads.first).parts
        #expect(parts.map(\.name) == ["title", "file", "text"])
        #expect(parts[1].filename == "renamed.bin" && parts[1].contentType == "application/x-test")
        #expect(parts[1].sha256 == sha(data))
        #expect(parts[2].size == 11)
    }

    @Test func rawPutAndResponseToAFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let data = TestContent.bytes(seed: 4, count: 700_000)
        #expect(FileManager.default.createFile(atPath: dir.file("b.bin"), contents: Data(data)))
        let r = try await CLI.run([
            "upload", "-q", "-T", dir.file("b.bin"), "-o", dir.file("reply.json"),
            server.url("/raw?upload=raw").absoluteString,
        ])
        #expect(r.status == 0 && r.stdout.isEmpty, "\(r.stderr)")
        #expect(server.requests(path: "/raw").first?.method == "PUT")
        #expect(server.uploads.first?.sha256 == sha(data))
        #expect(String(decoding: contents(dir.file("reply.json")), as: UTF8.self).contains("\"size\":700000"))
    }

    /// `-T -` reads standard input to its end and sends it chunked (its length is unknown), as
    /// curl does; so does a FIFO or any other non-regular file.
    @Test func standardInputIsSentChunked() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let data = TestContent.bytes(seed: 5, count: 300_000)
        #expect(FileManager.default.createFile(atPath: dir.file("in.bin"), contents: Data(data)))
        let url = server.url("/stdin?upload=raw").absoluteString
        let p = try ChildProcess(
            "sh", ["-c", "cat \"$1\" | \"$2\" upload -q -T - \"$3\"", "sh", dir.file("in.bin"), CLI.binary.path, url])
        let r = await CLI.finish(p, timeout: 30)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.uploads.first?.sha256 == sha(data))
        #expect(server.uploads.first?.size == 300_000)
        let request = try #require(server.requests(path: "/stdin").first)
        #expect(request.method == "PUT")
        #expect(request.headers.first { $0.name.lowercased() == "transfer-encoding" }?.value == "chunked")
    }

    /// A dropped PUT from standard input is not retried (the bytes read are gone): exit 3 with
    /// the network's error, not a retry that ends in a usage error.
    @Test func aDroppedUploadFromStandardInputFailsWithTheNetworkError() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("in.bin"), contents: Data(count: 2_000_000)))
        let url = server.url("/stdindrop?upload=raw&drop=100000").absoluteString
        let p = try ChildProcess(
            "sh",
            [
                "-c", "cat \"$1\" | \"$2\" upload -q --retry-delay 0.05 -T - \"$3\"", "sh", dir.file("in.bin"),
                CLI.binary.path, url,
            ])
        let r = await CLI.finish(p, timeout: 30)
        #expect(r.status == 3, "\(r.stderr)")
        #expect(r.stderr.hasSuffix("; not retried: a stream cannot be sent again\n"), "\(r.stderr)")
        #expect(!r.stderr.contains("already read") && !r.stderr.contains("retry 1"), "\(r.stderr)")
        #expect(server.requests(path: "/stdindrop").count == 1)
    }

    @Test func aFIFOIsReadToItsEndAsAFormFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let data = TestContent.bytes(seed: 6, count: 200_000)
        #expect(FileManager.default.createFile(atPath: dir.file("src.bin"), contents: Data(data)))
        let fifo = dir.file("pipe")
        #expect(mkfifo(fifo, 0o600) == 0)
        // The writer is a process of its own, bounded by its timeout.
        let writer = try ChildProcess("sh", ["-c", "cat \"$1\" > \"$2\"", "sh", dir.file("src.bin"), fifo])
        let r = try await CLI.run(
            ["upload", "-q", server.url("/fifo?upload=multipart").absoluteString, "-F", "file=@\(fifo)"], timeout: 30)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(await writer.finish(timeout: 10) == 0)
        let part = try #require(server.uploads.first?.parts.first)
        #expect(part.filename == "pipe" && part.size == 200_000 && part.sha256 == sha(data))
    }

    @Test(arguments: [["-T"], ["-F"]])
    func aDirectoryIsRefusedByName(option: [String]) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let spec = option == ["-T"] ? dir.path : "file=@\(dir.path)"
        let r = try await CLI.run(["upload", "-q", server.url("/dir?upload=raw").absoluteString] + option + [spec])
        #expect(r.status != 0)
        #expect(r.stderr.hasSuffix("\(dir.path) is a directory\n"), "\(r.stderr)")
        #expect(server.requests.isEmpty)
    }

    @Test func httpErrorExitsWith4AndNamesTheStatus() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("c.bin"), contents: Data(count: 100)))
        let url = server.url("/limit?upload=raw&status=413").absoluteString
        let r = try await CLI.run(["upload", "-q", "-T", dir.file("c.bin"), url])
        #expect(r.status == 4)
        #expect(r.stderr.hasSuffix("haul: error: HTTP 413 Content Too Large from \(url)\n"), "\(r.stderr)")
    }

    @Test func droppedPostExitsWith3WithoutARetry() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("d.bin"), contents: Data(count: 2_000_000)))
        let r = try await CLI.run([
            "upload", "-q", "--retry-delay", "0.05", server.url("/p?upload=multipart&drop=100000").absoluteString, "-F",
            "f=@\(dir.file("d.bin"))",
        ])
        #expect(r.status == 3)
        #expect(r.stderr.contains("not retried"), "\(r.stderr)")
        #expect(server.requests(path: "/p").count == 1)
    }

    @Test(arguments: [
        (["upload", "http://h/x"], "either -F"),
        (["upload", "http://h/x", "-F", "novalue"], "name=value"),
        (["upload", "http://h/x", "-F", "f=@/nonexistent/file"], "/nonexistent/file"),
        (["upload", "ftp://h/x", "-T", "/etc/hostname"], "http"),
        (["upload", "example.com/up", "-T", "/etc/hostname"], "did you mean https://example.com/up?"),
    ])
    func usageErrors(args: [String], mentions: String) async throws {
        let r = try await CLI.run(args)
        #expect(r.status == 2)
        #expect(r.stderr.hasPrefix("haul: error: ") && r.stderr.contains(mentions), "\(r.stderr)")
    }

    @Test func uploadingOneGiBKeepsPeakMemoryUnder64MiB() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let size: Int64 = 1 << 30
        let path = dir.file("big.bin")
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: UInt64(size))  // sparse: quick to make, read back as zeros
        try handle.close()
        let p = try CLI.start(["upload", "-q", "-T", path, server.url("/big?upload=count").absoluteString])
        var peakKiB = 0
        let deadline = Date().addingTimeInterval(120)
        while p.isRunning && Date() < deadline {
            if let status = try? String(contentsOfFile: "/proc/\(p.pid)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
                let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
            {
                peakKiB = max(peakKiB, kib)
            }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        let r = await CLI.finish(p, timeout: 1)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.uploads.first?.size == Int(size))
        #expect(peakKiB > 0 && peakKiB < 64 * 1024, "peak RSS \(peakKiB) KiB")
    }
}
