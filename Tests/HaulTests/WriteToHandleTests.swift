import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `HaulSession.download(_:to:named:options:events:)`: a body written into an open handle in
/// order (what `haul get -o -` runs on).
@Suite("A body written to a file handle", .fewAtOnce)
struct WriteToHandleTests {
    /// An empty file `out` in `dir`, open for writing.
    func output(in dir: TemporaryDirectory) throws -> (path: String, handle: FileHandle) {
        let path = dir.file("out")
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        return (path, try #require(FileHandle(forWritingAtPath: path)))
    }

    @Test func theBodyIsWrittenInOrderAcrossADropAndProgressIsReported() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (path, handle) = try output(in: dir)
        defer { try? handle.close() }
        let reports = Locked(0)
        let written = try await testSession().download(
            HaulRequest(url: server.url("/h.bin?size=3000000&drop=1000000&drops=1")), to: handle, named: "out"
        ) { event in
            if case .progress = event { reports.withLock { $0 += 1 } }
        }
        #expect(written == 3_000_000)
        expectFile(path, equals: TestContent.bytes(count: 3_000_000))
        #expect(server.requests(path: "/h.bin").count == 2, "the drop was continued")
        #expect(reports.get() > 0)
    }

    @Test func anErrorStatusWritesNothingAndAWrongChecksumIsReported() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (path, handle) = try output(in: dir)
        defer { try? handle.close() }
        let session = testSession()
        let missing = await #expect(throws: HaulError.self) {
            try await session.download(HaulRequest(url: server.url("/gone?status=404")), to: handle, named: "out")
        }
        #expect(missing?.code == .httpStatus)
        #expect(FileManager.default.contents(atPath: path)?.isEmpty == true)
        var options = DownloadOptions()
        options.checksums = [try Checksum("sha-256=" + String(repeating: "0", count: 64))]
        let wrong = await #expect(throws: HaulError.self) {
            try await session.download(
                HaulRequest(url: server.url("/c.bin?size=5000")), to: handle, named: "out", options: options)
        }
        #expect(wrong?.code == .checksumMismatch && wrong?.message.contains("written to out") == true)
    }

    /// A server's Repr-Digest is of the whole file as sent: checked on a whole answer (a wrong
    /// one fails), not on a range the caller asked for, nor on a body decoded from gzip.
    @Test func aServersDigestIsCheckedOnlyOnTheWholeFileAsSent() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (_, handle) = try output(in: dir)
        defer { try? handle.close() }
        let session = testSession()
        let wrong = await #expect(throws: HaulError.self) {
            try await session.download(
                HaulRequest(url: server.url("/d.bin?size=5000&digest=repr&digestof=1")), to: handle, named: "out")
        }
        #expect(wrong?.code == .checksumMismatch && wrong?.message.contains("Repr-Digest") == true)
        _ = try await session.download(
            HaulRequest(url: server.url("/d.bin?size=5000&digest=repr")), to: handle, named: "out")
        _ = try await session.download(
            HaulRequest(url: server.url("/d.bin?size=5000&digest=repr"), headers: ["Range": "bytes=10-"]), to: handle,
            named: "out")
        _ = try await session.download(
            HaulRequest(url: server.url("/g.bin?size=5000&gzip=1&digest=repr")), to: handle, named: "out")
    }
}
