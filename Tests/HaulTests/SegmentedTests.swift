import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Segmented downloads over several connections", .fewAtOnce)
struct SegmentedTests {
    func options(_ connections: Int = 4) -> DownloadOptions {
        var o = DownloadOptions()
        o.connections = connections
        o.minSplitSize = 1 << 20
        return o
    }

    /// Downloads `url` to `dest` with four connections, cancelled after 60 s (a bound on the
    /// test, not a speed check).
    func runBounded(
        _ url: URL, to dest: URL, session: HaulSession = testSession()
    ) async -> (Result<DownloadResult, HaulError>, EventLog) {
        let download = Task { await run(session, url, to: .file(dest), options: options()) }
        let bounded = Task {
            try await Task.sleep(nanoseconds: 60_000_000_000)
            download.cancel()
        }
        defer { bounded.cancel() }
        return await download.value
    }

    /// The connections replaced for being much slower than the others.
    func slowReplacements(_ log: EventLog) -> [(Int, HaulError, Double)] {
        log.retries.filter { $0.1.message.contains("much slower than the other connections; replaced") }
    }

    @Test func fourConnectionsFetchFourRangesAtOnce() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("seg.bin")
        let size = 8 << 20
        // Each answer's last bytes wait until four requests were answered at once (`hold=4`): on
        // a loaded machine the engine took over 4 s from the probe's head to the three range
        // requests, after the probe's answer was all sent.
        let (result, log) = await run(
            testSession(), server.url("/seg.bin?size=\(size)&rate=4000000&hold=4"), to: .file(dest),
            options: options())
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        let ranges = server.requests(path: "/seg.bin").compactMap(\.range)
        let first = server.requests.first?.receivedAt ?? Date()
        let times = server.requests.map { String(format: "%.3f", $0.receivedAt.timeIntervalSince(first)) }
        #expect(server.maxConcurrentRequests() == 4, "\(ranges) at \(times) s")
        // The probe asks for the first 2 MiB, and its answer is the first range.
        #expect(ranges.first == "bytes=0-2097151")
        // The file is four 2 MiB shares; the probe's answer is the first (a quick connection may
        // also steal half of a range before its request went out).
        let starts = Set(server.requests(path: "/seg.bin").compactMap(\.rangeStart))
        #expect(starts.isSuperset(of: [0, 2_097_152, 4_194_304, 6_291_456]), "\(ranges)")
        #expect(log.progress.last?.fraction == 1)
        #expect(dir.contents() == ["seg.bin"])
    }

    @Test func aDroppedRangeIsRetriedFromWhereItStopped() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("drop.bin")
        let size = 4 << 20
        // The first three requests are cut after 300 000 bytes: the probe (whose answer is the
        // first range), the second range, and the first retry.
        let (result, log) = await run(
            testSession(), server.url("/drop.bin?size=\(size)&rate=3000000&drop=300000&drops=3"), to: .file(dest),
            options: options(2))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        // Each retry asks from where its range was cut: a planned start (the two 2 MiB halves,
        // the first being the probe's answer) plus multiples of 300 000; which request came third
        // depends on timing.
        let starts = server.requests(path: "/drop.bin").compactMap(\.rangeStart)
        let planned = [0, 2 << 20]
        #expect(starts.count == 5, "\(starts) \(log.retries.map(\.1.message))")
        #expect(
            starts.allSatisfy { s in planned.contains { s >= $0 && (s - $0) % 300_000 == 0 } }
                && starts.filter { !planned.contains($0) }.count == 3, "\(starts)")
        #expect(log.retries.count == 3)
    }

    /// A storage service's pre-signed link (what GitHub's release downloads redirect to) expires
    /// while ranges are still being asked for it: a retry, a stolen range or a replacement after
    /// that gets a 403 from the signed URL, not from the file's own. The range is asked of the
    /// original URL again, whose redirect signs a fresh link, and goes on from where it stopped.
    @Test func anExpiredSignedLinkIsSignedAgainFromTheOriginalURL() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("signed.bin")
        let size = 4 << 20
        // A link expires 0.3 s after its first use; the first two signed requests (the probe's
        // answer, which is the first range, and the second range) are cut after 800 000 bytes at
        // 2 MB/s, so the retries come after the link has expired.
        let (result, log) = await run(
            testSession(), server.url("/signed.bin?size=\(size)&signed=0.3&rate=2000000&drop=800000&drops=2"),
            to: .file(dest), options: options(2))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        let requests = server.requests(path: "/signed.bin")
        let signings = requests.filter { $0.query["sig"] == nil }
        #expect(signings.count >= 2, "\(requests.map(\.target))")
        // The probe's range, cut at 800 000 bytes, went on from there on a freshly signed link.
        // (Other starts are each range's own, where it was cut, or, when a range lags near the
        // end, its rest raced from where it had got to: a quiet CI run saw 1 324 288.)
        let served = requests.filter { $0.query["sig"] != nil }.compactMap(\.rangeStart)
        #expect(served.contains(800_000), "\(served)")
        #expect(served.allSatisfy { $0 >= 0 && $0 < size }, "\(served)")
        #expect(log.restarts.isEmpty)
    }

    @Test func anExpiredSignedLinkIsSignedAgainWithOneConnection() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("signed1.bin")
        let size = 2 << 20
        let (result, _) = await run(
            testSession(), server.url("/signed1.bin?size=\(size)&signed=0.3&rate=2000000&drop=800000&drops=1"),
            to: .file(dest), options: options(1))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        let served = server.requests(path: "/signed1.bin").filter { $0.query["sig"] != nil }.compactMap(\.rangeStart)
        #expect(served.contains(800_000), "\(served)")
    }

    /// A server that answers at most two requests of a client at once (many mirrors do) turns
    /// the other connections away with 503. They are the connections too many, not a failing
    /// download: the two that are let in fetch the whole file.
    @Test(.skippedUnderThreadSanitizer("which connections are turned away depends on timing a loaded machine skews"))
    func connectionsBeyondWhatTheServerAdmitsAreDroppedNotFailed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("busy.bin")
        let size = 8 << 20
        let (result, log) = await run(
            testSession(), server.url("/busy.bin?size=\(size)&busy=2&rate=2000000"), to: .file(dest),
            options: options(4))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        #expect(log.restarts.isEmpty)
        // The connections turned away were not retried (their retries had used up the budget):
        // the probe, three range requests (one let in), the two ranges turned away asked again
        // by the connections let in when theirs were done, and perhaps a stolen half.
        let requests = server.requests(path: "/busy.bin")
        #expect(log.retries.isEmpty, "\(log.retries.map(\.1.message))")
        #expect(requests.count <= 8, "\(requests.compactMap(\.range))")
    }

    /// nginx's `limit_rate` gives each request its first 2 MiB at once and the rest in bursts
    /// (here: the first MiB at once, then 0.25 MB/s). The probe's connection, done early, finds no
    /// range worth splitting; its spare piece, which came at once, shows a new request is much
    /// faster than the running ones, so it asks for their rest too, gets it in its first burst,
    /// and the running answers are cut off before their last byte (they would have taken twice
    /// as long). Not under ThreadSanitizer: there the engine's own delays (the plan came 1.6 s
    /// after the probe in one CI run) enter the speeds it compares.
    @Test(.skippedUnderThreadSanitizer("speeds measured under ThreadSanitizer say nothing"))
    func aRangeUnderBurstsEndsExactAndIsAskedForAtMostTwice() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("burst.bin")
        let size = 12 << 20
        // Four shares of 3 MiB: the probe's 2 MiB and a 1 MiB spare on one connection (done
        // after 4 s), 3 MiB on each of the others (8 s).
        let (result, log) = await run(
            testSession(), server.url("/burst.bin?size=\(size)&burst=1048576&rate=250000"), to: .file(dest),
            options: options(4))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        #expect(log.restarts.isEmpty)
        // Whether a range is raced depends on speeds the engine measures, which a loaded machine
        // skews (beside the whole suite: once no race, once a connection replaced as slow
        // instead): the decision is SegmentPlannerTests', the gain the throttled benchmark's.
        // Here: the file is exact, nothing restarts, and nothing is asked more than twice.
        #expect(log.retries.allSatisfy { $0.1.message.contains("replaced") }, "\(log.retries.map(\.1.message))")
        let requests = server.requests(path: "/burst.bin")
        let first = requests.first?.receivedAt ?? Date()
        let seen = requests.map {
            "#\($0.connection) \($0.range ?? "-") at \(String(format: "%.2f", $0.receivedAt.timeIntervalSince(first)))"
        }
        #expect(requests.count <= 8, "each running range is raced at most once: \(seen)")
    }

    @Test func serverIgnoringRangeLaterNeverYieldsAMixedFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("mixed.bin")
        let size = 4 << 20
        let (result, log) = await run(
            testSession(), server.url("/mixed.bin?size=\(size)&norange=2"), to: .file(dest), options: options())
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        #expect(log.restarts.count == 1)
    }

    @Test func fileChangingMidDownloadIsRestartedNotSpliced() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("changed.bin")
        let size = 4 << 20
        let (result, _) = await run(
            testSession(), server.url("/changed.bin?size=\(size)&change=1"), to: .file(dest), options: options())
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(version: 1, count: size))
    }

    @Test func withoutRangeSupportItUsesOneConnection() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("one.bin")
        let (result, _) = await run(
            testSession(), server.url("/one.bin?size=3000000&ranges=0"), to: .file(dest), options: options())
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        // The probe learned that ranges are not supported (a 200 too large to keep); one plain GET
        // followed.
        let requests = server.requests(path: "/one.bin")
        #expect(requests.map(\.range) == ["bytes=0-2097151", nil])
    }

    @Test func aSmallFileTakesOneRequestAndReplacesALeftoverPartialOnlyWithOverwrite() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("small.bin")
        // A longer `.part` without a record: haul cannot tell it is its own, so it is refused
        // (before any request) unless overwriting.
        #expect(
            FileManager.default.createFile(atPath: dest.path + ".part", contents: Data(repeating: 7, count: 50_000)))
        let (refused, _) = await run(
            testSession(), server.url("/small.bin?size=20000"), to: .file(dest), options: options())
        #expect(refused.error?.code == .destinationExists)
        #expect(refused.error?.message.contains("small.bin.part") == true, "\(String(describing: refused.error))")
        #expect(server.requests.isEmpty)
        #expect(fileSize(dest.path + ".part") == 50_000, "left alone")
        var overwriting = options()
        overwriting.overwrite = true
        let (result, log) = await run(
            testSession(), server.url("/small.bin?size=20000"), to: .file(dest), options: overwriting)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: 20_000))
        #expect(dir.contents() == ["small.bin"], "no partial left")
        #expect(server.requests(path: "/small.bin").count == 1)
        #expect(log.progress.last?.fraction == 1)
    }

    @Test(arguments: ["etag=0&lm=0", "weak=1&lm=0"])
    func withoutAValidatorAFileIsNotSplit(_ validators: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("nov.bin")
        let size = 6 << 20
        let (result, _) = await run(
            testSession(), server.url("/nov.bin?size=\(size)&\(validators)"), to: .file(dest), options: options())
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        // The probe, then one plain request: a change between ranges could not be detected.
        #expect(server.requests(path: "/nov.bin").map(\.range) == ["bytes=0-2097151", nil])
    }

    @Test func cancellingDuringTheProbeDoesNotWaitForItsAnswer() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("late.bin")
        let session = testSession()
        let opts = options()
        // The server waits 60 s before answering: the cancel must not wait for it (bounds a
        // loaded machine keeps, well under the answer's delay).
        let task = Task {
            try await session.download(
                from: server.url("/late.bin?size=6000000&delay=60"), to: .file(dest), options: opts)
        }
        #expect(await eventually(timeout: 30) { !server.requests(path: "/late.bin").isEmpty })
        let cancelled = Date()
        task.cancel()
        let result = await task.result
        #expect(Date().timeIntervalSince(cancelled) < 30, "returned before the answer came")
        if case .failure(let e as HaulError) = result {
            #expect(e.code == .cancelled)
        } else {
            Issue.record("\(result)")
        }
    }

    @Test func aBusyAnswerToTheProbeIsWaitedOutBeforeTheNextRequest() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("busy.bin")
        let started = Date()
        let (result, log) = await run(
            testSession(), server.url("/busy.bin?size=3000000&status=503,200&retryAfter=1"), to: .file(dest),
            options: options())
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(log.retries.map(\.0) == [1])
        #expect(log.retries.first?.1.httpStatus == 503)
        #expect(log.retries.first?.2 == 1, "Retry-After honoured")
        #expect(Date().timeIntervalSince(started) >= 1, "the second request waited")
        #expect(server.requests(path: "/busy.bin").count == 2)
    }

    /// The probe's busy answer is the first of the retry budget's tries, not one more: with two
    /// retries there were four requests and "retry 1" twice (the single engine counted anew).
    @Test func aBusyProbeCountsAgainstTheRetries() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        for retries in [0, 2] {
            let path = "/busy\(retries).bin"
            let (result, log) = await run(
                testSession { $0.retry.maxRetries = retries }, server.url(path + "?size=3000000&status=503"),
                to: .file(dir.url.appendingPathComponent("busy\(retries).bin")), options: options())
            #expect(result.error?.httpStatus == 503, "\(String(describing: result.error))")
            #expect(server.requests(path: path).count == retries + 1, "retries \(retries)")
            #expect(log.retries.map(\.0) == Array(0..<retries).map { $0 + 1 }, "retries \(retries)")
        }
    }

    @Test func theChecksumIsVerifiedOnSegmentedDownloadsToo() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let size = 4 << 20
        let url = server.url("/sum.bin?size=\(size)&rate=4000000")
        var o = options()
        o.checksums = [try Checksum("sha-256=" + String(repeating: "0", count: 64))]
        let (bad, _) = await run(testSession(), url, to: .file(dir.url.appendingPathComponent("bad.bin")), options: o)
        #expect(bad.error?.code == .checksumMismatch, "\(String(describing: bad.error))")
        #expect(dir.contents().isEmpty, "a mismatching file is deleted")
        o.checksums = [try Checksum("sha-256=" + SHA256.hexDigest(of: TestContent.bytes(count: size)))]
        let (good, _) = await run(testSession(), url, to: .file(dir.url.appendingPathComponent("good.bin")), options: o)
        #expect(good.error == nil)
        // The probe's answer is the first 2 MiB; the other 2 MiB go in two 1 MiB ranges.
        #expect(server.maxConcurrentRequests() >= 2, "it was segmented (three at once when none ends early)")
        expectFile(dir.file("good.bin"), equals: TestContent.bytes(count: size))
    }

}
