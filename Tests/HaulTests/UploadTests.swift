import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import Haul
@testable import HaulCore

@Suite("Uploads: multipart and raw bodies streamed from disk", .fewAtOnce)
struct UploadTests {
    func sha(_ bytes: [UInt8]) -> String { HaulCore.SHA256.hexDigest(of: bytes) }

    /// A part's content type is one header line: what follows a CR, LF or NUL in it is dropped
    /// (it went into the body as a header of its own, `X-Injected: 1` here).
    @Test func aContentTypeWithALineBreakStaysOneLine() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        var form = MultipartForm()
        form.addFile(name: "f", data: Data("x".utf8), filename: "f.txt", contentType: "text/plain\r\nX-Injected: 1")
        _ = try await testSession().upload(form, to: server.url("/ct?upload=multipart"))
        let report = try #require(server.uploads.first)
        #expect(report.parts.map(\.contentType) == ["text/plain"])
        let body = form.segments.compactMap {
            if case .bytes(let b) = $0 { String(decoding: b, as: UTF8.self) } else { nil }
        }
        #expect(!body.joined().contains("X-Injected"))
    }

    @Test func multipartPartsArriveByteExact() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let binary = TestContent.bytes(seed: 9, count: 300_000)
        #expect(FileManager.default.createFile(atPath: dir.file("photo.png"), contents: Data(binary)))
        #expect(FileManager.default.createFile(atPath: dir.file("empty.txt"), contents: Data()))
        var form = MultipartForm()
        form.addField(name: "title", value: "Holiday ☀️")
        try form.addFile(name: "photo", fileURL: dir.url.appendingPathComponent("photo.png"))
        try form.addFile(name: "empty", fileURL: dir.url.appendingPathComponent("empty.txt"))
        form.addFile(name: "note \"quoted\"", data: Data("hi\r\nthere".utf8), filename: "naïve \"café\".txt")
        let progress = Box<[TransferProgress]>([])
        let reply = try await testSession().upload(form, to: server.url("/up?upload=multipart")) { event in
            if case .progress(let p) = event { progress.set(progress.get() + [p]) }
        }
        #expect(reply.response.statusCode == 200)
        let report = try #require(server.uploads.first)
        #expect(report.size == Int(form.contentLength ?? -1))
        #expect(report.parts.map(\.name) == ["title", "photo", "empty", "note %22quoted%22"])
        #expect(report.parts.map(\.filename) == [nil, "photo.png", "empty.txt", "naïve %22café%22.txt"])
        #expect(report.parts.map(\.contentType) == [nil, "image/png", "text/plain", "text/plain"])
        #expect(report.parts.map(\.size) == [Array("Holiday ☀️".utf8).count, 300_000, 0, 9])
        #expect(report.parts[1].sha256 == sha(binary))
        #expect(report.parts[2].sha256 == sha([]))
        #expect(report.parts[3].sha256 == sha(Array("hi\r\nthere".utf8)))
        let values = progress.get().map(\.completedBytes)
        #expect(values == values.sorted())
        #expect(values.last == form.contentLength)
        #expect(progress.get().last?.fraction == 1)
    }

    @Test func boundaryNeverOccursInAnInMemoryPart() {
        var form = MultipartForm()
        let first = form.boundary
        form.addFile(name: "trap", data: Data("xx--\(first)yy".utf8), filename: "t.bin")
        #expect(form.boundary != first)
        // At the very end, after more dashes: still found.
        let second = form.boundary
        form.addField(name: "tail", value: "---\(second)")
        #expect(form.boundary != second && form.boundary != first)
        let third = form.boundary
        form.addField(name: "near", value: "-\(third)-")  // one dash: not the marker
        #expect(form.boundary == third)
    }

    @Test func rawPutStreamsTheFileAndRetriesADroppedConnection() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let content = TestContent.bytes(seed: 5, count: 2_000_000)
        #expect(FileManager.default.createFile(atPath: dir.file("blob.bin"), contents: Data(content)))
        let events = Box(0)
        let reply = try await testSession().upload(
            fileAt: dir.url.appendingPathComponent("blob.bin"), to: server.url("/put?upload=raw&drop=500000&drops=1")
        ) { event in
            if case .retrying = event { events.set(events.get() + 1) }
        }
        #expect(reply.response.statusCode == 200)
        #expect(events.get() == 1)
        #expect(server.requests(path: "/put").map(\.method) == ["PUT", "PUT"])
        #expect(server.uploads.first?.sha256 == sha(content))
        #expect(String(decoding: reply.body, as: UTF8.self).contains("\"size\":2000000"))
    }

    /// An upload to a server that reads slowly is not a stall while the server keeps reading,
    /// even with an idle timeout shorter than the pauses between curl's reads of the body (the
    /// socket's buffers hold seconds of it).
    @Test(
        .skippedUnderThreadSanitizer(
            "a starved in-process server reads nothing for seconds: no timeout tells that from a stall"))
    func aSlowlyReadUploadIsNotTakenForAStall() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let content = TestContent.bytes(seed: 6, count: 3_000_000)
        #expect(FileManager.default.createFile(atPath: dir.file("slow.bin"), contents: Data(content)))
        // Read for about 6 s, twice the idle timeout (a 1 s timeout on a loaded machine took the
        // process's own pauses for stalls).
        let reply = try await testSession { $0.timeout.idle = 3 }.upload(
            fileAt: dir.url.appendingPathComponent("slow.bin"), to: server.url("/slowput?upload=raw&rate=500000"))
        #expect(reply.response.statusCode == 200)
        #expect(server.requests(path: "/slowput").count == 1, "no retry")
        #expect(server.uploads.first?.sha256 == sha(content))
    }

    @Test func droppedPostFailsClearlyAndIsNotRetried() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("f.bin"), contents: Data(count: 1_000_000)))
        var form = MultipartForm()
        try form.addFile(name: "f", fileURL: dir.url.appendingPathComponent("f.bin"))
        let error = await #expect(throws: HaulError.self) {
            try await testSession().upload(form, to: server.url("/post?upload=multipart&drop=200000"))
        }
        #expect(error?.message.contains("not retried") == true, "\(String(describing: error))")
        #expect(server.requests(path: "/post").count == 1)
    }

    @Test func tooLargeIsReturnedWithItsStatus() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("big.bin"), contents: Data(count: 3_000_000)))
        let reply = try await testSession().upload(
            fileAt: dir.url.appendingPathComponent("big.bin"), to: server.url("/limited?upload=raw&status=413"),
            method: .post)
        #expect(reply.response.statusCode == 413)
    }

    @Test func streamPartOfUnknownLengthIsSentChunked() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let content = TestContent.bytes(seed: 8, count: 250_000)
        var form = MultipartForm()
        form.addField(name: "kind", value: "stream")
        form.addFile(name: "blob", stream: InputStream(data: Data(content)), filename: "blob.bin")
        #expect(form.contentLength == nil)
        let reply = try await testSession().upload(form, to: server.url("/chunked?upload=multipart"))
        #expect(reply.response.statusCode == 200)
        #expect(server.requests(path: "/chunked").first?.header("Transfer-Encoding") == "chunked")
        let parts = try #require(server.uploads.first).parts
        #expect(parts.map(\.name) == ["kind", "blob"])
        #expect(parts[1].size == 250_000 && parts[1].sha256 == sha(content))
    }

    final class Recorder: UploadDelegate, @unchecked Sendable {
        let lock = NSLock()
        var last: TransferProgress?
        func upload(didReceive event: UploadEvent) {
            if case .progress(let p) = event { lock.withLock { last = p } }
        }
    }

    @Test func delegateStyleAndCancellation() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("d.bin"), contents: Data(count: 300_000)))
        let recorder = Recorder()
        let reply = try await testSession().upload(
            fileAt: dir.url.appendingPathComponent("d.bin"), to: server.url("/d?upload=raw"), delegate: recorder)
        #expect(reply.response.statusCode == 200)
        #expect(recorder.lock.withLock { recorder.last?.completedBytes } == 300_000)

        #expect(FileManager.default.createFile(atPath: dir.file("slow.bin"), contents: Data(count: 5_000_000)))
        let session = testSession()
        let task = Task {
            try await session.upload(
                fileAt: dir.url.appendingPathComponent("slow.bin"), to: server.url("/slow?upload=raw&rate=500000"))
        }
        try await Task.sleep(nanoseconds: 300_000_000)
        task.cancel()
        let error = await #expect(throws: HaulError.self) { try await task.value }
        #expect(error?.code == .cancelled)
        #expect(server.uploads.isEmpty || server.uploads.allSatisfy { $0.path != "/slow" })
    }

    @Test func missingFileIsAClearError() async throws {
        var form = MultipartForm()
        #expect(throws: HaulError.self) {
            try form.addFile(name: "f", fileURL: URL(fileURLWithPath: "/nonexistent/haul-file"))
        }
    }

    /// A server that says it did not act on the request (a 503 or 429 with a Retry-After, a
    /// 408) is asked again, whatever the method, after its Retry-After; one that may have (500,
    /// a bare 503) only for a PUT; and past the retries its answer comes back as it is.
    @Test func aBusyAnswerIsSentAgainAfterItsRetryAfter() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let content = TestContent.bytes(seed: 7, count: 100_000)
        let file = dir.url.appendingPathComponent("b.bin")
        #expect(FileManager.default.createFile(atPath: file.path, contents: Data(content)))
        let session = testSession()
        let retries = Box(0)
        var form = MultipartForm()
        form.addFile(name: "f", data: Data(content), filename: "b.bin")
        let posted = try await session.upload(
            form, to: server.url("/busy?upload=multipart&status=503,200&retryAfter=0")
        ) { event in
            if case .retrying = event { retries.set(retries.get() + 1) }
        }
        #expect(posted.response.statusCode == 200 && retries.get() == 1)
        #expect(server.requests(path: "/busy").count == 2)
        let put = try await session.upload(fileAt: file, to: server.url("/err?upload=raw&status=500,200"))
        #expect(put.response.statusCode == 200 && server.requests(path: "/err").count == 2)
        let postedOnce = try await session.upload(form, to: server.url("/once?upload=multipart&status=500,200"))
        #expect(postedOnce.response.statusCode == 500, "a POST the server may have acted on is not sent again")
        #expect(server.requests(path: "/once").count == 1)
        let bare = try await session.upload(form, to: server.url("/bare?upload=multipart&status=503,200"))
        #expect(bare.response.statusCode == 503, "a bare 503 (a proxy's) may come after the body was taken")
        #expect(server.requests(path: "/bare").count == 1)
        let busy = try await session.upload(fileAt: file, to: server.url("/full?upload=raw&status=429&retryAfter=0"))
        #expect(busy.response.statusCode == 429, "past the retries the answer is returned")
        #expect(server.requests(path: "/full").count == 6, "the first try and five retries")
    }
}
