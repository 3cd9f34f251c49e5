import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// Every program in Examples/ runs against the test server and does what it says (but
/// Examples/Snippets, the articles' code, which is compiled and checked by DocCSnippetTests).
@Suite("Examples", .serialized, .fewAtOnce)
struct ExampleTests {
    /// Runs an example with its XDG directories (the HTTP cache, lists) in a directory of its own.
    func run(_ name: String, _ args: [String]) async throws -> CLIRun {
        let xdg = try TemporaryDirectory()
        defer { xdg.remove() }
        let environment = ["XDG_CACHE_HOME": xdg.file("cache"), "XDG_STATE_HOME": xdg.file("state")]
        return try await CLI.run(args, environment: environment, executable: CLI.program(name))
    }

    @Test func oneShot() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await run(
            "OneShotExample", [server.url("/one?size=100000&gzip=1").absoluteString, dir.file("out")])
        #expect(r.status == 0 && r.stdout == "HTTP 200, 100000 bytes\n", "\(r.stdout)\(r.stderr)")
        expectFile(dir.file("out"), equals: TestContent.bytes(count: 100_000))
    }

    @Test func streaming() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await run("StreamingExample", [server.url("/s?size=3000000").absoluteString, dir.file("out")])
        #expect(r.status == 0 && r.stdout.hasPrefix("HTTP 200, 3000000 bytes in "), "\(r.stdout)\(r.stderr)")
        expectFile(dir.file("out"), equals: TestContent.bytes(count: 3_000_000))
    }

    @Test func downloadFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await run(
            "DownloadFileExample", [server.url("/f.bin?size=2000000&drop=500000&drops=1").absoluteString, dir.path])
        #expect(r.status == 0 && r.stdout.hasSuffix("saved f.bin, 2000000 bytes\n"), "\(r.stdout)\(r.stderr)")
        #expect(r.stdout.contains("retry 1"))
        expectFile(dir.file("f.bin"), equals: TestContent.bytes(count: 2_000_000))
    }

    @Test func taskControl() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // The first answer stops after 500 KB (`stall`), so the suspend always comes first.
        let r = try await run(
            "TaskControlExample",
            [server.url("/t.bin?size=2000000&stall=500000&stalls=1").absoluteString, dir.file("t.bin")])
        #expect(r.status == 0 && r.stdout.contains("state suspended") && r.stdout.contains("finished: 2000000 bytes"))
        expectFile(dir.file("t.bin"), equals: TestContent.bytes(count: 2_000_000))
        #expect(server.requests(path: "/t.bin").count == 2)
        #expect((server.requests(path: "/t.bin").last?.rangeStart ?? 0) > 0)
    }

    @Test func manager() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let urls = (1...4).map { server.url("/m\($0).bin?size=200000&rate=1000000&seed=\($0)").absoluteString }
        let r = try await run("ManagerExample", [dir.path] + urls)
        #expect(r.status == 0 && r.stdout.hasSuffix("all done: 800000 bytes, 4 files\n"), "\(r.stdout)\(r.stderr)")
        #expect(server.maxConcurrentRequests() <= 2)
        for i in 1...4 { expectFile(dir.file("m\(i).bin"), equals: TestContent.bytes(seed: i, count: 200_000)) }
    }

    @Test func resumeDataInAFreshProcess() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // The first two answers stop after 1 MB, so the cancel always finds the download
        // unfinished. On a busy machine the cancel may come before the second request is made:
        // then the resume meets the second stall, and resumes again from where that left it.
        let url = server.url("/w.bin?size=3000000&stall=1000000&stalls=2").absoluteString
        let start = try await run("ResumeWalkthrough", ["start", url, dir.file("w.bin"), dir.file("resume.json")])
        #expect(start.status == 0 && start.stdout.contains("saved resume data"), "\(start.stdout)\(start.stderr)")
        let saved = try #require(
            start.stdout.split(separator: "\n").last.flatMap { Int($0.split(separator: " ")[3]) })
        #expect(saved > 0)
        let requestsBeforeResume = server.requests(path: "/w.bin").count
        let resumed = try await run("ResumeWalkthrough", ["resume", dir.file("resume.json")])
        #expect(resumed.status == 0 && resumed.stdout.contains("finished 3000000 bytes"), "\(resumed.stdout)")
        expectFile(dir.file("w.bin"), equals: TestContent.bytes(count: 3_000_000))
        // The fresh process's first request asks for the bytes after those the resume data names.
        let resumeRequests = server.requests(path: "/w.bin").dropFirst(requestsBeforeResume)
        #expect(resumeRequests.first?.rangeStart == saved)
    }
}
