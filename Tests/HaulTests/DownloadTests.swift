import Foundation
import Haul
import HaulFoundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Download to a file, end to end on the test server", .fewAtOnce)
struct DownloadTests {
    @Test func plainDownloadIsExactAndLeavesNoSidecars() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("out.bin")
        let (result, log) = await run(testSession(), server.url("/plain.bin?size=5000000"), to: .file(dest))
        #expect(result.value?.bytes == 5_000_000)
        expectFile(dest.path, equals: TestContent.bytes(count: 5_000_000))
        #expect(dir.contents() == ["out.bin"])
        let fractions = log.progress.compactMap(\.fraction)
        #expect(fractions.last == 1)
        #expect(zip(log.progress, log.progress.dropFirst()).allSatisfy { $0.completedBytes <= $1.completedBytes })
    }

    /// A `204 No Content` is an empty file, as curl saves it: it failed as "unexpected HTTP 204"
    /// (exit 3, a network error in the CLI).
    @Test(arguments: [1, 4])
    func noContentSavesAnEmptyFile(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        let (result, _) = await run(
            testSession(), server.url("/empty.txt?status=204"), to: .directory(dir.url), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        #expect(result.value?.bytes == 0)
        #expect(dir.contents() == ["empty.txt"])
        expectFile(dir.file("empty.txt"), equals: [])
    }

    /// A status that is neither a file nor a redirect nor an error (a 304 to a plain GET, a 300)
    /// is an HTTP status the download cannot use: `.httpStatus`, exit 4 in the CLI. It was an
    /// invalid answer, exit 3 with the network errors.
    @Test(arguments: [300, 304])
    func anUnusableStatusIsAnHTTPStatusError(status: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (result, _) = await run(
            testSession(), server.url("/odd.bin?status=\(status)"), to: .directory(dir.url))
        let error = try #require(result.error)
        #expect(error.code == .httpStatus, "\(error)")
        #expect(error.httpStatus == status)
        let reason = status == 304 ? "Not Modified" : "Multiple Choices"
        #expect(error.message.hasPrefix("HTTP \(status) \(reason) from "), "\(error.message)")
        #expect(dir.contents().isEmpty)
    }

    @Test func checksReachabilityFailsAnUnresolvableHostAtOnceWithoutRetries() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var options = DownloadOptions()
        options.checksReachability = true
        let retries = Locked(0)
        let error = await #expect(throws: HaulError.self) {
            try await HaulSession().download(
                from: URL(string: "http://999.1.1.1:9/x.bin")!, to: .directory(dir.url), options: options
            ) { if case .retrying = $0 { retries.withLock { $0 += 1 } } }
        }
        #expect(error?.code == .unreachableHost)
        #expect(retries.get() == 0)
        #expect(dir.contents().isEmpty)
    }

    @Test func droppedConnectionResumesFromTheBytesOnDisk() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("d.bin")
        let (result, log) = await run(
            testSession(), server.url("/drop.bin?size=4000000&drop=1500000&drops=2"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 4_000_000))
        let reqs = server.requests(path: "/drop.bin")
        #expect(reqs.map(\.rangeStart) == [nil, 1_500_000, 3_000_000])
        #expect(reqs.dropFirst().allSatisfy { $0.ifRange == "\"s1-v0-4000000\"" })
        #expect(log.retries.count == 2, "\(log.retries.map { $0.1.message }) \(reqs.map(\.range))")
    }

    @Test(arguments: [HaulConfiguration.Transport.curl, .urlSession])
    func bothTransportsResumeAndRestartCorrectlyThroughTheEngine(transport: HaulConfiguration.Transport) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.transport = transport }
        let resumed = dir.url.appendingPathComponent("resumed.bin")
        let (r1, _) = await run(session, server.url("/t-drop?size=2000000&drop=700000&drops=1"), to: .file(resumed))
        #expect(r1.error == nil)
        expectFile(resumed.path, equals: TestContent.bytes(count: 2_000_000))
        #expect(server.requests(path: "/t-drop").map(\.rangeStart) == [nil, 700_000])
        let changed = dir.url.appendingPathComponent("changed.bin")
        let (r2, _) = await run(
            session, server.url("/t-change?size=2000000&change=1&drop=700000&drops=1"), to: .file(changed))
        #expect(r2.error == nil)
        expectFile(changed.path, equals: TestContent.bytes(version: 1, count: 2_000_000))
    }

    @Test func serverIgnoringRangeNeverYieldsADuplicatedFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("nr.bin")
        let (result, log) = await run(
            testSession(), server.url("/norange.bin?size=3000000&ranges=0&drop=1000000&drops=1"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(server.requests(path: "/norange.bin").count == 2)
        #expect(log.restarts.count == 1)
    }

    @Test func fileChangedBetweenAttemptsIsNeverSpliced() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("ch.bin")
        // The first response drops mid-body; then the file changes. If-Range makes the server
        // send the whole new version (200).
        let (result, _) = await run(
            testSession(), server.url("/change.bin?size=3000000&change=1&drop=1000000&drops=1"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(version: 1, count: 3_000_000))
        let reqs = server.requests(path: "/change.bin")
        #expect(reqs.count == 2 && reqs[1].rangeStart == 1_000_000)
    }

    @Test func serverIgnoringIfRangeIsCaughtByTheETagAndRestarts() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("ifr.bin")
        let (result, log) = await run(
            testSession(), server.url("/ifr.bin?size=3000000&change=1&ifrange=0&drop=1000000&drops=1"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(version: 1, count: 3_000_000))
        #expect(log.restarts.contains { $0.contains("ETag") })
        #expect(server.requests(path: "/ifr.bin").map(\.rangeStart) == [nil, 1_000_000, nil])
    }

    /// The same server, answering the range without an ETag: the bytes cannot be told to be of
    /// the first version, so the download starts over rather than splice (it once took them).
    @Test(arguments: [1, 4])
    func a206WithoutTheETagRestartsRatherThanSplice(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("noconf.bin")
        var options = DownloadOptions()
        options.connections = connections
        let url = server.url("/noconf.bin?size=3000000&change=1&ifrange=0&etag206=0&drop=1000000&drops=1")
        let (result, log) = await run(testSession(), url, to: .file(dest), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(version: 1, count: 3_000_000))
        #expect(log.restarts.contains { $0.contains("ETag") } || connections > 1, "\(log.restarts)")
    }

    @Test func fileChangingOnEveryRequestFailsWithServerChangedFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("flap.bin")
        let (result, _) = await run(
            testSession(), server.url("/flap.bin?size=300000&change=always&ifrange=0&drop=100000"), to: .file(dest))
        #expect(result.error?.code == .serverChangedFile)
        #expect(!fileExists(dest.path))
        // The last version's bytes go too: the next run would only start over from them.
        #expect(!fileExists(dest.path + ".part") && !fileExists(dest.path + ".haul"))
    }

    @Test func partialWithoutValidatorsResumesWhenTheLengthMatches() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("nv.bin")
        let (result, _) = await run(
            testSession(), server.url("/noval.bin?size=2000000&etag=0&lm=0&drop=700000&drops=1"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 2_000_000))
        let reqs = server.requests(path: "/noval.bin")
        // Without a validator the resume asks 64 KiB early and compares them with the disk.
        #expect(reqs.map(\.rangeStart) == [nil, 700_000 - 65_536])
        #expect(reqs[1].ifRange == nil)
    }

    /// A server without ETag or Last-Modified (lighttpd as configured by scripts/interop.py)
    /// whose file changed to another of the same size: the 64 KiB before the resume point differ
    /// from the disk, so the download starts over (it once appended, a file of two versions).
    @Test(arguments: [1, 4])
    func aChangedFileWithoutValidatorsIsCaughtByTheOverlap(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("nvc.bin")
        var options = DownloadOptions()
        options.connections = connections
        let url = server.url("/nvc.bin?size=3000000&etag=0&lm=0&change=1&drop=1000000&drops=1")
        let (result, log) = await run(testSession(), url, to: .file(dest), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(version: 1, count: 3_000_000))
        // With -x 4 the probe is the request that drops, and the rerun asks for the whole file.
        #expect(log.restarts.contains { $0.contains("differ") } || connections > 1, "\(log.restarts)")
    }

    @Test func contentLengthLargerThanTheBodyFailsAndKeepsThePartial() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("lie.bin")
        let session = testSession { $0.retry.maxRetries = 2 }
        let (result, _) = await run(session, server.url("/lie.bin?size=100000&lie=5000"), to: .file(dest))
        let error = try #require(result.error)
        #expect(error.code == .network || error.code == .incompleteBody)
        #expect(!fileExists(dest.path))
        expectFile(dest.path + ".part", equals: TestContent.bytes(count: 100_000))
        let record = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul")))
        #expect(record.contiguousBytes == 100_000 && record.totalLength == 105_000)
    }

    @Test func conflictingContentLengthsFailAtOnceWithoutRetries() async throws {
        // RFC 9112 6.3: a message whose Content-Length values disagree has no trustworthy framing,
        // an unrecoverable error; it was taken as a dropped connection and retried with backoff.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        for connections in [1, 4] {
            let dest = dir.url.appendingPathComponent("twolengths\(connections).bin")
            var options = DownloadOptions()
            options.connections = connections
            options.minSplitSize = 16_384
            let path = "/twolengths\(connections).bin"
            let (result, _) = await run(
                testSession { $0.retry.maxRetries = 2 }, server.url(path + "?size=100000&length2=100007"),
                to: .file(dest), options: options)
            let error = try #require(result.error)
            #expect(error.code == .invalidResponse, "\(error)")
            #expect(error.message.contains("conflicting Content-Length ("), "\(error.message)")
            #expect(error.message.contains(", 100007)"), "\(error.message)")
            #expect(server.requests.filter { $0.path == path }.count == 1)
            #expect(!fileExists(dest.path))
        }
    }

    /// A Retry-After over the longest wait fails at once (as before), saying why it was not retried:
    /// "HTTP 429 Too Many Requests" alone read as if retries had been tried and spent.
    @Test func aRetryAfterOverTheLongestWaitSaysSo() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        for connections in [1, 4] {
            var options = DownloadOptions()
            options.connections = connections
            let path = "/later\(connections).bin"
            let (result, log) = await run(
                testSession(), server.url(path + "?size=3000000&status=429&retryAfter=3600"),
                to: .file(dir.url.appendingPathComponent("later.bin")), options: options)
            let error = try #require(result.error)
            #expect(error.httpStatus == 429)
            #expect(
                error.message.hasSuffix("; the server asks to wait 3600 s, longer than the 300 s retries wait"),
                "\(error.message)")
            #expect(log.retries.isEmpty)
            #expect(server.requests(path: path).count == 1)
        }
    }

    /// A header that cannot be sent as given is refused by name before any request: the transport
    /// dropped it without a word (a library user's token never reached the server, silently).
    @Test func aHeaderWithALineBreakOrABadNameIsAUsageError() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.headers = ["X-A": "1\r\nX-Injected: 2"]
        let (result, _) = await run(
            testSession(), server.url("/h.bin"), to: .file(dir.url.appendingPathComponent("h.bin")), options: options)
        #expect(result.error?.code == .usage)
        #expect(result.error?.message == "header X-A has a line break or NUL in its value")
        let session = testSession { $0.additionalHeaders = ["X A": "1"] }
        await #expect(throws: HaulError.self) { _ = try await session.data(from: server.url("/h.bin")) }
        #expect(server.requests.isEmpty)
    }

    /// Timeouts and delays the configuration allows (`.infinity` for "no timeout", a huge
    /// Retry-After honoured) trapped converting seconds to curl's milliseconds or a sleep's
    /// nanoseconds: the process crashed.
    @Test func infiniteTimeoutsAndDelaysDoNotCrash() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        for (transport, connections) in [(HaulConfiguration.Transport.curl, 1), (.curl, 4), (.urlSession, 1)] {
            let session = testSession {
                $0.timeout.connect = .infinity
                $0.timeout.idle = .infinity
                $0.transport = transport
            }
            var options = DownloadOptions()
            options.connections = connections
            let dest = dir.url.appendingPathComponent("inf\(connections)\(transport).bin")
            let (result, _) = await run(session, server.url("/inf.bin?size=3000000"), to: .file(dest), options: options)
            #expect(result.error == nil, "\(String(describing: result.error))")
        }
        // A Retry-After of 10^20 s with no cap on it: the download waits (until cancelled).
        let patient = testSession {
            $0.retry.maxRetryAfter = .infinity
            $0.retry.maxDelay = .infinity
        }
        let waiting = Task {
            await run(
                patient, server.url("/later.bin?size=1000&status=503&retryAfter=100000000000000000000"),
                to: .file(dir.url.appendingPathComponent("later.bin")))
        }
        #expect(await eventually { server.requests(path: "/later.bin").count == 1 })
        try await Task.sleep(nanoseconds: 200_000_000)
        waiting.cancel()
        let (result, _) = await waiting.value
        #expect(result.error?.code == .cancelled)
        #expect(server.requests(path: "/later.bin").count == 1)
    }

    @Test func negativeContentLengthFailsAtOnceWithoutRetries() async throws {
        // libcurl calls it a weird server reply; it was taken as a dropped connection and retried.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("negative.bin")
        let (result, _) = await run(
            testSession { $0.retry.maxRetries = 2 }, server.url("/negative.bin?size=1000&length=-5"), to: .file(dest))
        let error = try #require(result.error)
        #expect(error.code == .invalidResponse, "\(error)")
        #expect(error.message.contains("Content-Length"), "\(error.message)")
        #expect(server.requests.filter { $0.path == "/negative.bin" }.count == 1)
    }

    @Test func chunkedBodyWithoutLength() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("ch.bin")
        let (result, log) = await run(testSession(), server.url("/chunked.bin?size=1234567&chunked=1"), to: .file(dest))
        #expect(result.value?.bytes == 1_234_567)
        expectFile(dest.path, equals: TestContent.bytes(count: 1_234_567))
        #expect(log.progress.dropLast().allSatisfy { $0.totalBytes == nil })
    }

    @Test func gzipEncodedBodyIsSavedAsSent() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("gz.bin.gz")
        let (result, _) = await run(testSession(), server.url("/gz.bin?size=200000&gzip=1"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.gzip(TestContent.bytes(count: 200_000)))
        #expect(server.requests.first?.header("Accept-Encoding") == "identity")
    }

    @Test func serviceUnavailableHonoursRetryAfter() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("s.bin")
        let started = Date()
        let (result, log) = await run(
            testSession(), server.url("/busy.bin?size=1000&status=503,503,200&retryAfter=1"), to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 1000))
        #expect(log.retries.map(\.2) == [1, 1])
        #expect(log.retries.allSatisfy { $0.1.httpStatus == 503 })
        #expect(Date().timeIntervalSince(started) >= 2)
    }

    @Test func notFoundFailsAtOnceWithTheStatus() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("nf.bin")
        let (result, _) = await run(testSession(), server.url("/missing?status=404"), to: .file(dest))
        let error = try #require(result.error)
        #expect(error.code == .httpStatus && error.httpStatus == 404)
        #expect(error.message.contains("HTTP 404 Not Found"))
        #expect(server.requests.count == 1)
        #expect(dir.contents().isEmpty)
    }

    @Test func retriesRunOutOnAServerThatKeepsFailing() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.retry.maxRetries = 3 }
        let (result, log) = await run(
            session, server.url("/down?status=500"), to: .file(dir.url.appendingPathComponent("x")))
        #expect(result.error?.httpStatus == 500)
        #expect(log.retries.count == 3)
        #expect(server.requests.count == 4)
    }

    /// A server that ignores Range and drops every answer at the same byte: each retry starts
    /// over and gets no further, so it must not count as progress (it once refilled the retry
    /// budget every time, and the download retried forever).
    @Test(.timeLimit(.minutes(5)), arguments: [1, 4])
    func retriesRunOutWhenEveryAnswerStartsOverAndDropsAtTheSamePlace(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.retry.maxRetries = 3 }
        var options = DownloadOptions()
        options.connections = connections
        let (result, log) = await run(
            session, server.url("/again?size=3000000&ranges=0&drop=1000000"),
            to: .file(dir.url.appendingPathComponent("again.bin")), options: options)
        #expect(result.error?.code == .network, "\(String(describing: result.error))")
        #expect(log.retries.count == 3)
        // With -x 4 the probe's ranged GET comes first (answered 200: one connection then).
        #expect(server.requests(path: "/again").count == 4 + (connections > 1 ? 1 : 0))
    }

}

final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var total = 0
    private var fired = false
    func add(_ n: Int) -> Int {
        lock.withLock {
            total += n
            return total
        }
    }
    func fireOnce() -> Bool {
        lock.withLock {
            defer { fired = true }
            return !fired
        }
    }
}
