import Foundation
import Haul
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

    @Test func redirectChainIsFollowedAndLoopsAreCaught() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("r.bin")
        let (ok, _) = await run(testSession(), server.url("/r.bin?size=5000&redirect=4"), to: .file(dest))
        #expect(ok.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 5000))
        #expect(server.requests(path: "/r.bin").count == 5)

        let (loop, _) = await run(
            testSession(), server.url("/loop?loop=1"), to: .file(dir.url.appendingPathComponent("l")))
        #expect(loop.error?.code == .tooManyRedirects)
        let (long, _) = await run(
            testSession { $0.maxRedirects = 2 }, server.url("/long?size=10&redirect=5"),
            to: .file(dir.url.appendingPathComponent("m")))
        #expect(long.error?.code == .tooManyRedirects)
    }

    @Test func stalledConnectionIsDetectedWithinTheIdleTimeoutAndResumed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("stall.bin")
        let started = Date()
        let (result, log) = await run(
            testSession { $0.timeout.idle = 2 }, server.url("/stall.bin?size=2000000&stall=800000&stalls=1"),
            to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 2_000_000))
        // A timeout, not the end of the server's stall (60 s), is what ended the first answer.
        #expect(log.retries.first?.1.code == .timeout)
        #expect(server.requests(path: "/stall.bin").map(\.rangeStart) == [nil, 800_000])
        #expect(Date().timeIntervalSince(started) < 50)
    }

    @Test func authorizationIsNotForwardedToAnotherHost() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let target = "http://localhost:\(server.port)/landing.bin?size=100"
        let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let session = testSession {
            $0.additionalHeaders = ["Authorization": "Bearer s3cret", "Cookie": "id=1", "X-Trace": "t1"]
        }
        let (result, _) = await run(
            session, server.url("/start?to=\(encoded)"), to: .file(dir.url.appendingPathComponent("a.bin")))
        #expect(result.error == nil)
        let first = try #require(server.requests(path: "/start").first)
        let second = try #require(server.requests(path: "/landing.bin").first)
        #expect(first.header("Authorization") == "Bearer s3cret")
        #expect(second.header("Host")?.hasPrefix("localhost") == true)
        #expect(second.header("Authorization") == nil)
        #expect(second.header("X-Trace") == "t1", "other headers follow, as with curl")
        #expect(second.header("Cookie") == nil)
    }

    @Test func authorizationIsKeptOnTheSameHost() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.additionalHeaders = ["Authorization": "Bearer s3cret"] }
        let (result, _) = await run(
            session, server.url("/same.bin?size=10&redirect=1"), to: .file(dir.url.appendingPathComponent("s")))
        #expect(result.error == nil)
        #expect(server.requests.allSatisfy { $0.header("Authorization") == "Bearer s3cret" })
    }

    @Test func urlCredentialsFollowSameHostRedirectsOnly() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let basic = "Basic " + Data("alice:pa55".utf8).base64EncodedString()
        let same = URL(string: "http://alice:pa55@127.0.0.1:\(server.port)/same-cred?size=10&redirect=2")!
        let (ok, _) = await run(testSession(), same, to: .file(dir.url.appendingPathComponent("a")))
        #expect(ok.error == nil)
        #expect(server.requests(path: "/same-cred").map { $0.header("Authorization") } == [basic, basic, basic])

        let target = "http://localhost:\(server.port)/other-host?size=10"
        let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let cross = URL(string: "http://alice:pa55@127.0.0.1:\(server.port)/hop?to=\(encoded)")!
        let (moved, _) = await run(testSession(), cross, to: .file(dir.url.appendingPathComponent("b")))
        #expect(moved.error == nil)
        #expect(server.requests(path: "/hop").first?.header("Authorization") == basic)
        #expect(server.requests(path: "/other-host").first?.header("Authorization") == nil)
    }

    /// A redirect target's query can be a credential: a storage service's pre-signed link carries
    /// its signature (and the key's id) there, and error messages end up in logs and bug reports.
    /// A message names a redirect target without its query; the URL the user gave keeps its own.
    @Test(arguments: [1, 4])
    func aRedirectTargetsQueryStaysOutOfMessages(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        let session = testSession { $0.retry.maxRetries = 0 }
        for (status, name) in [(403, "refused"), (503, "busy")] {
            let target = "/\(name).bin?status=\(status)&X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=5ec2e7"
            let encoded = target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let (result, _) = await run(
                session, server.url("/\(name)-start?token=mine&to=\(encoded)"),
                to: .file(dir.url.appendingPathComponent("\(name).bin")), options: options)
            let error = try #require(result.error)
            #expect(error.httpStatus == status, "\(error.message)")
            #expect(error.message.contains("/\(name).bin"), "\(error.message)")
            #expect(!error.message.contains("5ec2e7") && !error.message.contains("AKIDEXAMPLE"), "\(error.message)")
        }
        let (own, _) = await run(
            session, server.url("/own.bin?status=403&token=mine"),
            to: .file(dir.url.appendingPathComponent("own.bin")), options: options)
        #expect(
            own.error?.message.contains("/own.bin?status=403&token=mine") == true, "\(String(describing: own.error))")
    }

    @Test func credentialsNeverReachTheRecord() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("cred.bin")
        let url = URL(string: "http://alice:pa55word@127.0.0.1:\(server.port)/cred.bin?size=500000&drop=200000")!
        var options = DownloadOptions()
        options.headers = ["Authorization": "Bearer tok-123"]
        let (result, _) = await run(testSession { $0.retry.maxRetries = 0 }, url, to: .file(dest), options: options)
        let error = try #require(result.error)
        #expect(!error.message.contains("pa55word"))
        let record = String(decoding: bytes(at: dest.path + ".haul"), as: UTF8.self)
        #expect(record.contains("\"url\" : \"http://127.0.0.1:\(server.port)/cred.bin"))
        #expect(!record.contains("pa55word") && !record.contains("alice") && !record.contains("tok-123"))
        #expect(server.requests.first?.header("Authorization") == "Bearer tok-123")
    }

    @Test func cancellingKeepsThePartialAndTheNextRunResumes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("cancel.bin")
        // A checkpoint comes after a second of transfer; the answer stalls at 4.5 MB, so the
        // cancel always finds it unfinished.
        let url = server.url("/cancel.bin?size=6000000&rate=1500000&stall=4500000&stalls=1")
        let session = testSession()
        let task = Task { try await session.download(from: url, to: .file(dest)) }
        #expect(
            await eventually(timeout: 10) {
                (ResumeRecord.decode(bytes(at: dest.path + ".haul"))?.contiguousBytes ?? 0) > 0
            })
        task.cancel()
        let error = await #expect(throws: HaulError.self) { try await task.value }
        #expect(error?.code == .cancelled)
        let saved = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul"))).contiguousBytes
        #expect(saved > 0)
        let (result, _) = await run(session, url, to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 6_000_000))
        #expect(server.requests(path: "/cancel.bin").last?.rangeStart.map { Int64($0) >= saved } == true)
    }

    @Test func diskFullGivesAClearErrorAndAResumablePartial() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("full.bin")
        let url = server.url("/full.bin?size=3000000")
        // The first pwrite past 1 MB fails with ENOSPC (once, as when space frees up later).
        let written = LockedCounter()
        let part = dest.path + ".part"
        let hook = FaultInjection.add { call, count, path in
            guard call == .pwrite, path == part else { return nil }
            return written.add(count) > 1_000_000 && written.fireOnce() ? .noSpace : nil
        }
        let (result, _) = await run(testSession { $0.progressInterval = 0 }, url, to: .file(dest))
        FaultInjection.remove(hook)
        let error = try #require(result.error)
        #expect(error.code == .diskFull)
        #expect(error.message.contains("disk full") && error.message.contains("full.bin.part"))
        let record = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul")))
        #expect(record.contiguousBytes > 0)
        let (again, _) = await run(testSession(), url, to: .file(dest))
        #expect(again.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(
            server.requests(path: "/full.bin").last?.rangeStart == Int(record.contiguousBytes),
            "\(server.requests(path: "/full.bin").map(\.range))")
    }

    @Test func aSlowSyncOfOneDownloadDoesNotStallAnother() async throws {
        // A's checkpoint syncs its partial; that sync is held (a slow disk) while B, on the same
        // transport, must go on receiving.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let partA = dir.file("slowdisk-a.bin.part")
        let partB = dir.file("slowdisk-b.bin.part")
        let hold = SyncHold([partA])
        defer { hold.remove() }
        let session = testSession()
        let a = Task {
            await run(session, server.url("/slowdisk-a.bin?size=4000000&rate=1000000"), to: .directory(dir.url))
        }
        #expect(await eventually(timeout: 30) { !hold.held.isEmpty })
        let b = Task {
            await run(session, server.url("/slowdisk-b.bin?size=4000000&rate=1000000&seed=2"), to: .directory(dir.url))
        }
        #expect(
            await eventually(timeout: 30) { (fileSize(partB) ?? 0) >= 500_000 },
            "B got \(fileSize(partB) ?? 0) bytes while A's sync was held")
        hold.release()
        let (ra, rb) = (await a.value, await b.value)
        #expect(ra.0.error == nil && rb.0.error == nil)
        expectFile(dir.file("slowdisk-a.bin"), equals: TestContent.bytes(count: 4_000_000))
        expectFile(dir.file("slowdisk-b.bin"), equals: TestContent.bytes(seed: 2, count: 4_000_000))
    }

    @Test func aResumeDoesNotWaitForASyncBeforeItsFirstBytes() async throws {
        // Resuming the same version from where the record ends leaves that record as it is (it
        // stays true while bytes are added after it); it was rewritten and synced on the
        // transport's thread first, so one slow disk held every transfer of the session.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("again.bin")
        let url = server.url("/again.bin?size=3000000&rate=1000000&stall=600000&stalls=1")
        let first = testSession().downloadTask(with: url, to: .file(dest))
        first.resume()
        #expect(await eventually { (first.progress?.completedBytes ?? 0) >= 600_000 })
        let saved = try #require(await first.cancelProducingResumeData()).bytesOnDisk
        let hold = SyncHold([dest.path + ".part"])
        defer { hold.remove() }
        let session = testSession()
        let resumed = Task { await run(session, url, to: .file(dest)) }
        let part = dest.path + ".part"
        #expect(
            await eventually(timeout: 30) { (fileSize(part) ?? 0) >= saved + 300_000 },
            "\(fileSize(part) ?? 0) bytes: the resume's bytes flow")
        hold.release()
        #expect(await resumed.value.0.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(server.requests(path: "/again.bin").last?.rangeStart == Int(saved))
    }

    @Test func slowSyncsDoNotHoldUpSwiftTasks() async throws {
        // On Linux, work items on Dispatch's global queue share threads with Swift's tasks:
        // checkpoints waiting for a slow disk there left no thread for any task.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let parts = (0..<8).map { dir.file("held\($0).bin.part") }
        let hold = SyncHold(Set(parts))
        defer { hold.remove() }
        let session = testSession()
        let downloads = (0..<8).map { i in
            Task {
                await run(
                    session, server.url("/held\(i).bin?size=3000000&rate=1000000&seed=\(i + 1)"),
                    to: .directory(dir.url))
            }
        }
        #expect(await eventually(timeout: 30) { hold.held.count == 8 })
        // Tasks still run while all eight syncs are held.
        let ranWhileHeld = await Task.detached { hold.held.count == 8 }.value
        #expect(ranWhileHeld)
        hold.release()
        for (i, download) in downloads.enumerated() {
            #expect(await download.value.0.error == nil)
            expectFile(dir.file("held\(i).bin"), equals: TestContent.bytes(seed: i + 1, count: 3_000_000))
        }
    }

    /// One connection (the streaming path) and four (a small file comes whole with the probe).
    @Test(arguments: [1, 4])
    func aFileIsSyncedBeforeItIsRenamedEvenWithAChecksum(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("synced-\(connections).bin")
        let part = dest.path + ".part"
        // The sync of this partial fails: the download must fail before the rename, keeping the
        // partial (the checksum check used to close the file first, and then it was never synced).
        let hook = FaultInjection.add { call, _, path in call == .fsync && path == part ? Errno(EIO) : nil }
        var options = DownloadOptions()
        options.connections = connections
        options.sha256 = HaulCore.SHA256.hexDigest(of: TestContent.bytes(count: 70000))
        let (result, _) = await run(testSession(), server.url("/synced?size=70000"), to: .file(dest), options: options)
        FaultInjection.remove(hook)
        let error = try #require(result.error)
        #expect(error.code == .fileSystem && error.message.contains("sync"), "\(error)")
        #expect(!fileExists(dest.path))
        expectFile(part, equals: TestContent.bytes(count: 70000))
    }

    @Test(arguments: [1, 4])
    func aDestinationThatAppearsDuringTheDownloadIsNotReplaced(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("appeared-\(connections).bin")
        let part = dest.path + ".part"
        // Another program creates the destination just before the partial is renamed into place.
        let hook = FaultInjection.add { call, _, path in
            if call == .fsync && path == part {
                _ = FileManager.default.createFile(atPath: dest.path, contents: Data("mine".utf8))
            }
            return nil
        }
        var options = DownloadOptions()
        options.connections = connections
        let (result, _) = await run(
            testSession(), server.url("/appeared?size=70000"), to: .file(dest), options: options)
        FaultInjection.remove(hook)
        let error = try #require(result.error)
        #expect(error.code == .destinationExists && error.message.contains("appeared during the download"), "\(error)")
        #expect(bytes(at: dest.path) == Array("mine".utf8))
        expectFile(part, equals: TestContent.bytes(count: 70000))
    }

    @Test func checksumIsVerified() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var good = DownloadOptions()
        good.sha256 = HaulCore.SHA256.hexDigest(of: TestContent.bytes(count: 70000))
        let (ok, _) = await run(
            testSession(), server.url("/sum?size=70000"), to: .file(dir.url.appendingPathComponent("ok")), options: good
        )
        #expect(ok.error == nil)
        var bad = DownloadOptions()
        bad.sha256 = String(repeating: "0", count: 64)
        let (no, _) = await run(
            testSession(), server.url("/sum?size=70000"), to: .file(dir.url.appendingPathComponent("bad")), options: bad
        )
        #expect(no.error?.code == .checksumMismatch)
        // Nothing of it is left: its record was written again after the mismatch deleted it.
        #expect(dir.contents() == ["ok"])
    }

    @Test func invalidURLsFailBeforeAnyRequest() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for raw in ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost"] {
            let (result, _) = await run(testSession(), URL(string: raw)!, to: .directory(dir.url))
            #expect(result.error?.code == .invalidURL, "\(raw)")
        }
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
