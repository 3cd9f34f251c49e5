import Foundation
import HaulCore
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import Haul

/// `HaulConfiguration.timeout.resource`: the whole transfer, retries included.
@Suite("Resource timeout", .fewAtOnce)
struct ResourceTimeoutTests {
    /// A download that cannot finish in time stops with .timeout and keeps its partial and
    /// record, as a cancelled one does.
    @Test(arguments: [1, 4])
    func aDownloadPastItStopsAndKeepsItsPartial(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // 4 MB at 200 kB/s: 20 s, against a limit of 1 s.
        let url = server.url("/slow.bin?size=4000000&rate=200000")
        let dest = dir.url.appendingPathComponent("slow.bin")
        var options = DownloadOptions()
        options.connections = connections
        let started = Date()
        let (result, _) = await run(testSession { $0.timeout.resource = 1 }, url, to: .file(dest), options: options)
        let error = try #require(result.error)
        #expect(error.code == .timeout, "\(error)")
        #expect(error.message.contains("did not finish within 1 s"), "\(error.message)")
        #expect(Date().timeIntervalSince(started) < 15, "it stopped, not ran to its end")
        // The partial and its record are there, for the next run to continue (as after a cancel).
        #expect(FileManager.default.fileExists(atPath: dest.path + ".part"))
        #expect(String(decoding: bytes(at: dest.path + ".haul"), as: UTF8.self).contains("slow.bin"))
        #expect(!FileManager.default.fileExists(atPath: dest.path))
    }

    @Test func dataAndUploadsHaveItToo() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.timeout.resource = 1 }
        do {
            _ = try await session.data(from: server.url("/d.bin?size=4000000&rate=200000"))
            Issue.record("finished")
        } catch { #expect(error.code == .timeout && error.message.contains("fetch of"), "\(error)") }
        let file = dir.url.appendingPathComponent("up.bin")
        try Data(TestContent.bytes(count: 4_000_000)).write(to: file)
        do {
            _ = try await session.upload(fileAt: file, to: server.url("/slowput?upload=raw&rate=200000"))
            Issue.record("finished")
        } catch { #expect(error.code == .timeout && error.message.contains("upload to"), "\(error)") }
        // Within it, nothing changes.
        let (data, _) = try await session.data(from: server.url("/small.bin?size=1000"))
        #expect(Array(data) == TestContent.bytes(count: 1000))
    }

    /// A cancel of the caller stays a cancel even when the work takes past the deadline to stop.
    @Test func aCancelThatEndsAfterTheDeadlineIsStillACancel() async throws {
        let session = testSession { $0.timeout.resource = 0.3 }
        let task = Task { () async throws(HaulError) -> Int in
            try await session.withinResourceTimeout("work") { () throws(HaulError) -> Int in
                // Slow to stop: it ends a second after it is cancelled, well past the deadline.
                while !Task.isCancelled { try? await Task.sleep(nanoseconds: 10_000_000) }
                let stop = Date().addingTimeInterval(1)
                while Date() < stop { try? await Task.sleep(nanoseconds: 10_000_000) }
                throw HaulError(.cancelled, "cancelled")
            }
        }
        try await Task.sleep(nanoseconds: 50_000_000)
        task.cancel()
        let result = await task.result
        if case .failure(let error) = result { #expect((error as? HaulError)?.code == .cancelled, "\(error)") }
    }

    /// The message says what kept failing while the time ran out.
    @Test func theMessageNamesTheLastFailure() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession {
            $0.timeout.resource = 1
            $0.retry.maxRetries = 1000
        }
        let (result, _) = await run(session, server.url("/busy.bin?status=503"), to: .directory(dir.url))
        let error = try #require(result.error)
        #expect(error.code == .timeout, "\(error)")
        #expect(error.message.contains("(last failure: HTTP 503"), "\(error.message)")
    }

    /// A cancel of the caller is a cancel, not a timeout.
    @Test func aCancelIsStillACancel() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.timeout.resource = 60 }
        let task = Task { () async throws(HaulError) -> DownloadResult in
            try await session.download(from: server.url("/c.bin?size=4000000&rate=200000"), to: .directory(dir.url))
        }
        _ = await eventually { !server.requests(path: "/c.bin").isEmpty }
        task.cancel()
        let result = await task.result
        #expect((try? result.get()) == nil)
        if case .failure(let error) = result { #expect((error as? HaulError)?.code == .cancelled, "\(error)") }
    }
}
