import Foundation
import HaulTestSupport
import Testing

@testable import HaulCore

@Suite("haul upload, run as a process", .serialized)
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
