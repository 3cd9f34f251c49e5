import Foundation
import Haul
import HaulTestSupport
import Testing

@Suite("One-shot data and streaming bodies")
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

        let failing = Recorder()
        await testSession().stream(from: server.url("/del2?size=500000&drop=1000"), delegate: failing).value
        #expect(failing.error?.code == .network && !failing.finished)
    }
}
