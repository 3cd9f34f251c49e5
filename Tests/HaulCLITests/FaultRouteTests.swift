import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// Every fault route of the test server, through the spawned `haul get`.
@Suite("haul get against every fault route", .serialized, .fewAtOnce)
struct FaultRouteTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var query: String
        var exit: Int32
        /// Expected file content: (size, version), or nil when no file may exist.
        var content: (size: Int, version: Int)?
        var gzip = false
        var testDescription: String { query }
    }

    static let cases: [Case] = [
        Case(query: "size=1000000", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&ranges=0&drop=300000&drops=1", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&etag=0&lm=0&drop=300000&drops=1", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&etag=0&drop=300000&drops=1", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&weak=1&drop=300000&drops=1", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&change=1&drop=300000&drops=1", exit: 0, content: (1_000_000, 1)),
        Case(query: "size=1000000&change=1&ifrange=0&drop=300000&drops=1", exit: 0, content: (1_000_000, 1)),
        Case(query: "size=1000000&drop=200000&drops=3", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=300000&rate=600000", exit: 0, content: (300_000, 0)),
        Case(query: "size=100000&lie=1000", exit: 3, content: nil),
        Case(query: "size=654321&chunked=1", exit: 0, content: (654_321, 0)),
        Case(query: "size=100000&gzip=1", exit: 0, content: (100_000, 0), gzip: true),
        Case(query: "size=1000&status=503,200&retryAfter=1", exit: 0, content: (1000, 0)),
        Case(query: "size=1000&status=429,500,502,200", exit: 0, content: (1000, 0)),
        Case(query: "size=1000&status=429,500,502,504,200", exit: 4, content: nil),
        Case(query: "status=403", exit: 4, content: nil),
        Case(query: "status=416", exit: 4, content: nil),
        Case(query: "size=1000&redirect=3", exit: 0, content: (1000, 0)),
        Case(query: "loop=1", exit: 3, content: nil),
        Case(query: "size=1000000&stall=400000&stalls=1", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&stall=400000", exit: 0, content: (1_000_000, 0)),
        Case(query: "size=1000000&stall=0", exit: 3, content: nil),
    ]

    @Test(arguments: cases)
    func route(_ c: Case) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("out.bin")
        let r = try await CLI.run([
            // One connection: these are the single-connection engine's faults (segmented
            // downloads have their own tests).
            "get", "-q", "-x", "1", "--retries", "3", "--retry-delay", "0.05", "--timeout", "1", "-o", dest,
            server.url("/route?\(c.query)").absoluteString,
        ])
        #expect(r.status == c.exit, "\(r.stderr)")
        if let (size, version) = c.content {
            var expected = TestContent.bytes(version: version, count: size)
            if c.gzip { expected = TestContent.gzip(expected) }
            expectFile(dest, equals: expected)
            #expect(dir.contents() == ["out.bin"])
        } else {
            #expect(!FileManager.default.fileExists(atPath: dest))
            #expect(r.stderr.hasPrefix("haul: error: ") && r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
        }
    }

    @Test(.enabled(if: SelfSignedHTTPSServer.available, "needs openssl, timeout and python3"))
    func selfSignedTLSExitsWith7() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": TestContent.bytes(count: 1000)])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let r = try await CLI.run(["get", "-d", dir.path, server.url("/f.bin").absoluteString])
        #expect(r.status == 7)
        #expect(r.stderr.contains("certificate"))
        #expect(dir.contents().isEmpty)
        let ok = try await CLI.run([
            "get", "-q", "--cacert", server.certificate, "-d", dir.path, server.url("/f.bin").absoluteString,
        ])
        #expect(ok.status == 0, "\(ok.stderr)")
        expectFile(dir.file("f.bin"), equals: TestContent.bytes(count: 1000))
    }
}
