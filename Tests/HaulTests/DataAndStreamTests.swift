import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@Suite("One-shot data and streaming bodies", .fewAtOnce)
struct DataAndStreamTests {
    @Test func dataFromURLFollowsRedirectsAndReturnsTheBody() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (data, response) = try await testSession().data(from: server.url("/d?size=100000&redirect=2"))
        #expect(TestContent.difference(Array(data), TestContent.bytes(count: 100_000)) == nil)
        #expect(response.statusCode == 200 && response.expectedContentLength == 100_000)
        #expect(response.url.query?.contains("redirect=0") == true)
    }

    @Test func dataReturnsErrorStatusesWithTheirBody() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (data, response) = try await testSession().data(from: server.url("/missing?status=404"))
        #expect(response.statusCode == 404 && data.isEmpty)
    }

    @Test func dataIsCappedBeforeAndWhileReading() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let session = testSession()
        let announced = await #expect(throws: HaulError.self) {
            try await session.data(from: server.url("/big?size=67108864"), maxBytes: 1_000_000)
        }
        #expect(announced?.code == .responseTooLarge)
        #expect(server.bytesSent(path: "/big") < 67_108_864 / 2, "the body is not read")
        let chunked = await #expect(throws: HaulError.self) {
            try await session.data(from: server.url("/chunky?size=5000000&chunked=1"), maxBytes: 1_000_000)
        }
        #expect(chunked?.code == .responseTooLarge)
    }

    @Test func dataDecodesGzipAndRetriesADroppedConnection() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (gz, _) = try await testSession().data(from: server.url("/gz?size=200000&gzip=1"))
        #expect(TestContent.difference(Array(gz), TestContent.bytes(count: 200_000)) == nil)
        let (dropped, _) = try await testSession().data(from: server.url("/drop?size=300000&drop=100000&drops=1"))
        #expect(TestContent.difference(Array(dropped), TestContent.bytes(count: 300_000)) == nil)
        #expect(server.requests(path: "/drop").count == 2)
    }

    @Test func completionHandlerForm() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let result = await withCheckedContinuation { c in
            testSession().data(from: server.url("/ch?size=1000")) { c.resume(returning: $0) }
        }
        #expect(TestContent.difference(result.value.map { Array($0.0) } ?? [], TestContent.bytes(count: 1000)) == nil)
    }

    @Test func slowConsumerPausesTheTransfer() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (response, body) = try await testSession().bytes(from: server.url("/slow?size=67108864"), window: 256 << 10)
        #expect(response.statusCode == 200)
        var consumed = 0
        var iterator = body.makeAsyncIterator()
        let started = Date()
        while Date().timeIntervalSince(started) < 1, let chunk = try await iterator.next() {
            consumed += chunk.count
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        // Without flow control curl would have read all 64 MiB by now; with it the server is
        // held to what the consumer took, the window and the kernel's socket buffers.
        let sent = server.bytesSent(path: "/slow")
        #expect(sent < consumed + 24_000_000, "server sent \(sent), consumer took \(consumed)")
        body.cancel()
    }

    @Test func streamedBodyIsExact() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (_, body) = try await testSession().bytes(from: server.url("/s?size=3000000&seed=4"))
        var collected = Data()
        for try await chunk in body { collected.append(chunk) }
        #expect(TestContent.difference(Array(collected), TestContent.bytes(seed: 4, count: 3_000_000)) == nil)
    }

    final class Recorder: DataStreamDelegate, @unchecked Sendable {
        let lock = NSLock()
        var status = 0
        var data = Data()
        var finished = false
        var error: HaulError?
        func stream(didReceive response: HTTPResponse) { lock.withLock { status = response.statusCode } }
        func stream(didReceive data: Data) { lock.withLock { self.data.append(data) } }
        func streamDidFinish() { lock.withLock { finished = true } }
        func stream(didFailWith error: HaulError) { lock.withLock { self.error = error } }
    }

    @Test func delegateReceivesResponseChunksAndFinish() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let recorder = Recorder()
        await testSession().stream(from: server.url("/del?size=500000"), delegate: recorder).value
        #expect(recorder.status == 200 && recorder.finished && recorder.error == nil)
        #expect(TestContent.difference(Array(recorder.data), TestContent.bytes(count: 500_000)) == nil)

        // Without a validator a dropped stream cannot be continued safely: it fails.
        let failing = Recorder()
        await testSession().stream(from: server.url("/del2?size=500000&drop=1000&etag=0&lm=0"), delegate: failing)
            .value
        #expect(failing.error?.code == .network && !failing.finished)
    }

    /// Opens `target` on `server` and reads the whole stream (see ``drain(_:)``).
    func drained(_ server: TestServer, _ target: String) async throws -> (bytes: [UInt8], error: HaulError?) {
        let (_, body) = try await testSession().bytes(from: server.url(target))
        return await drain(body)
    }

    /// Reads a whole stream; returns the bytes and the error that ended it, if any.
    func drain(_ body: ByteStream) async -> (bytes: [UInt8], error: HaulError?) {
        var collected: [UInt8] = []
        do {
            for try await chunk in body { collected += chunk }
            return (collected, nil)
        } catch {
            return (collected, error as? HaulError)
        }
    }

    @Test func aDroppedStreamContinuesFromTheNextByteWithIfRange() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (bytes, error) = try await drained(server, "/r?size=3000000&drop=1000000&drops=2")
        #expect(error == nil)
        #expect(TestContent.difference(bytes, TestContent.bytes(count: 3_000_000)) == nil)
        let requests = server.requests(path: "/r")
        #expect(requests.map(\.rangeStart) == [nil, 1_000_000, 2_000_000], "\(requests.map(\.range))")
        #expect(requests.dropFirst().allSatisfy { $0.ifRange != nil }, "each continuation names the version")
    }

    @Test func aStreamNeverSplicesAFileThatChangedOnTheServer() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (bytes, error) = try await drained(server, "/c?size=3000000&drop=1000000&drops=1&change=1")
        #expect(error?.code == .serverChangedFile, "\(String(describing: error))")
        #expect(bytes.count == 1_000_000)
        #expect(
            TestContent.difference(bytes, TestContent.bytes(version: 0, count: 1_000_000)) == nil, "first version only")
    }

    @Test func aServerThatIgnoresRangesSendsTheSameFileAgainAndTheStreamSkipsWhatItHad() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (bytes, error) = try await drained(server, "/n?size=3000000&drop=1000000&drops=1&ranges=0")
        #expect(error == nil)
        #expect(TestContent.difference(bytes, TestContent.bytes(count: 3_000_000)) == nil)
        #expect(server.requests(path: "/n").count == 2)
    }

    @Test func aCompressedStreamIsNotContinuedMidway() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        // Ranges count encoded bytes; the decoder's state cannot be rebuilt from the middle.
        let (_, error) = try await drained(server, "/g?size=3000000&gzip=1&drop=100000&drops=1")
        #expect(error?.code == .network)
        #expect(server.requests(path: "/g").count == 1)
    }

    @Test func aBodyAskedForAsStoredIsPassedOnEncodedAndContinued() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var request = HaulRequest(url: server.url("/raw?size=3000000&gzip=1&drop=1000000&drops=1"))
        request.decodesContent = false
        let (response, body) = try await testSession().bytes(for: request)
        #expect(response.value(forHeader: "Content-Encoding") == "gzip")
        let (bytes, error) = await drain(body)
        #expect(error == nil)
        #expect(TestContent.difference(bytes, TestContent.gzip(TestContent.bytes(count: 3_000_000))) == nil)
        let requests = server.requests(path: "/raw")
        #expect(requests.map(\.rangeStart) == [nil, 1_000_000])
        #expect(requests.allSatisfy { $0.header("Accept-Encoding") == "identity" })
    }

    @Test func cancellingDuringTheWaitBeforeContinuingEndsTheStreamAtOnce() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let session = testSession {
            $0.retry.initialDelay = 120
            $0.retry.maxDelay = 120
        }
        let (_, body) = try await session.bytes(from: server.url("/w?size=3000000&drop=1000000&drops=1"))
        let started = Date()
        let reader = Task { await drain(body) }
        // Wait until the drop has happened (the first answer has been sent), then cancel.
        let deadline = Date().addingTimeInterval(10)
        while server.bytesSent(path: "/w") < 1_000_000 && Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        body.cancel()
        let (bytes, error) = await reader.value
        #expect(error?.code == .cancelled)
        #expect(bytes.count == 1_000_000)
        #expect(Date().timeIntervalSince(started) < 60, "not held for the 120 s backoff")
        #expect(server.requests(path: "/w").count == 1)
    }
}
