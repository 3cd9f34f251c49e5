import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

extension SegmentedTests {
    @Test(.skippedUnderThreadSanitizer("replaced or raced depends on speeds a loaded machine skews"))
    func aMuchSlowerConnectionIsReplacedAndTheFileIsExact() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("slow.bin")
        let size = 32 << 20
        // The range at 8 MiB drips at 20 kB/s; the others run at 2 MB/s for 4 s, longer than the
        // 3 s the slow one is watched for, so it is replaced while they run (once one is free it
        // would race the slow one for its rest instead: a hedge).
        let url = server.url("/slow.bin?size=\(size)&rate=2000000&slowat=8388608&slowrate=20000")
        let (result, log) = await runBounded(url, to: dest)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        // Replaced at once (no backoff) while the others run; on a loaded machine the others may
        // end first, and a free connection races it for its rest instead (a hedge): either way
        // once, and the rest of that range is asked from where the slow one had got to.
        let replaced = slowReplacements(log)
        #expect(replaced.count <= 1, "\(log.retries.map(\.1.message))")
        #expect(replaced.allSatisfy { $0.2 == 0 }, "replaced at once, no backoff")
        let starts = server.requests(path: "/slow.bin").compactMap(\.rangeStart)
        #expect(starts.contains { $0 > 8_388_608 && $0 < 16_777_216 }, "\(starts)")
    }

    /// The other ranges of a fast server end within milliseconds; the one that stalls beside them
    /// was left to the idle timeout (30 s; 36 s in a CLI run) because ranges that quick were not
    /// taken as references. Now a free connection asks for its rest at once (a hedge), and the
    /// stalled one stops when that has arrived.
    @Test func aStalledRangeBesideRangesThatEndedAtOnceIsRacedNotWaitedOut() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("stalled.bin")
        let size = 3_000_000
        // The probe's answer (the first range) stops after 1 MB; the other ranges come at once.
        let url = server.url("/stalled.bin?size=\(size)&stall=1000000&stalls=1")
        let (result, log) = await runBounded(url, to: dest, session: testSession { $0.timeout.idle = 30 })
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        #expect(log.retries.isEmpty, "\(log.retries.map(\.1.message))")
        let requests = server.requests(path: "/stalled.bin")
        let rest = try #require(requests.first { $0.rangeStart == 1_000_000 }, "\(requests.compactMap(\.range))")
        let first = try #require(requests.first)
        #expect(rest.receivedAt.timeIntervalSince(first.receivedAt) < 20, "replaced, not left to the 30 s idle timeout")
    }

    @Test func rangesWaitingForAConnectionSlotAreNotTakenForSlowOnes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("queued.bin")
        let size = 8 << 20
        // One connection per host for the probe's 2 MiB and four 1.5 MiB ranges at 1 MB/s:
        // the later ranges wait 3.5 s and more for their slot (longer than the slow-connection
        // window) without a byte.
        let session = testSession { $0.maxConnectionsPerHost = 1 }
        let (result, log) = await run(
            session, server.url("/queued.bin?size=\(size)&rate=1000000"), to: .file(dest), options: options())
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        #expect(log.retries.isEmpty, "\(log.retries.map(\.1.message))")
        // (The cap itself is checked from the server's side in the queue tests; here stealing
        // ends ranges early, and the server counts an abandoned answer until it notices.)
    }

    @Test func aResumeWithOneConnectionPerHostDoesNotWaitForItsOwnProbe() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("capped.bin")
        let size = 6 << 20
        let url = server.url("/capped.bin?size=\(size)&rate=2000000")
        let session = testSession { $0.maxConnectionsPerHost = 1 }
        let first = Task { try await session.download(from: url, to: .file(dest), options: options()) }
        #expect(await eventually(timeout: 20) { fileExists(dest.path + ".haul") })
        first.cancel()
        _ = await first.result
        // The resume's probe (one byte, not adopted) must let go of the only slot at once.
        let again = Task { await run(session, url, to: .file(dest), options: options()) }
        let bound = Task {
            try await Task.sleep(nanoseconds: 30_000_000_000)  // bounds a hang; not a speed check
            again.cancel()
        }
        let (result, _) = await again.value
        bound.cancel()
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
    }

    @Test func aConnectionBelowTheLowestSpeedLimitIsReplacedAndARangeThatStaysSlowFails() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("floor.bin")
        var o = options(2)
        o.lowestSpeedLimit = 200_000
        // Every connection is at 100 kB/s: nothing is "much slower" than the others, but all
        // are under the floor. Retries: 1, so the second replacement in a row fails.
        let session = testSession { $0.retry.maxRetries = 1 }
        let url = server.url("/floor.bin?size=4000000&rate=100000")
        let (result, log) = await run(session, url, to: .file(dest), options: o)
        #expect(result.error?.code == .network)
        #expect(result.error?.message.contains("below the lowest speed limit (limit 200000 B/s); replaced") == true)
        #expect(!log.retries.isEmpty)
        #expect(fileExists(dest.path + ".part"), "the bytes stay for a later resume")
    }

    @Test(.skippedUnderThreadSanitizer("four ranges with bytes within 30 s was not reached on a loaded machine"))
    func cancelledSegmentedDownloadResumesOnlyTheGaps() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("gaps.bin")
        // 4 MiB per range at 0.5 MB/s: a range cannot reach the next one (and merge with it in the
        // record) for 8 s. With 2 MiB, a full ThreadSanitizer CI run once saw 3 ranges at the end.
        let size = 16 << 20
        let url = server.url("/gaps.bin?size=\(size)&rate=500000")
        let session = testSession()
        let opts = options()
        let task = Task { try await session.download(from: url, to: .file(dest), options: opts) }
        func record() -> RecordShape? {
            try? JSONDecoder().decode(
                RecordShape.self, from: Data(contentsOf: URL(fileURLWithPath: dest.path + ".haul")))
        }
        // Stop once a checkpoint shows bytes in all four ranges (a fixed sleep was too short
        // under ThreadSanitizer).
        #expect(await eventually(timeout: 30) { record()?.ranges.count == 4 })
        task.cancel()
        _ = await task.result
        // Four ranges with bytes, or fewer where one reached the next before the cancel (a
        // loaded machine saw two): each gap after a range is what the rerun asks for.
        let record = try #require(record())
        #expect(!record.ranges.isEmpty, "\(record.ranges)")
        let before = server.requests(path: "/gaps.bin").count
        let (result, _) = await run(session, url, to: .file(dest), options: opts)
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        let resumedStarts = Set(server.requests(path: "/gaps.bin").dropFirst(before).compactMap(\.rangeStart))
        #expect(resumedStarts.isSuperset(of: Set(record.ranges.map(\.end).filter { $0 < size })), "\(resumedStarts)")
    }

    /// Zero or fewer connections mean one (every download now passes through the segmented
    /// engine, which hands one connection over to the plain one).
    @Test(arguments: [0, -3])
    func fewerThanOneConnectionMeansOne(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("one.bin")
        let (result, _) = await run(
            testSession(), server.url("/one.bin?size=3000000"), to: .file(dest), options: options(connections))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(server.requests(path: "/one.bin").map(\.range) == [nil])
    }

    /// A partial with gaps, left by four connections, resumed with `connections` into a named
    /// file or a directory: only the gaps are asked for (plus the resume probe's one byte). With
    /// one connection everything after the first range's bytes was fetched again (a single
    /// `Range: bytes=N-` over the other ranges); into a directory the probe asked for 2 MiB and
    /// dropped them (it did not know of the partial before the answer named the file).
    @Test(arguments: [(1, false), (1, true), (4, true)])
    func aResumeOfRangesWithGapsAsksOnlyForTheGaps(connections: Int, intoDirectory: Bool) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let size = 8 << 20
        // The first four answers (the probe's and three ranges) stop after 500 kB each.
        let url = server.url("/holes.bin?size=\(size)&stall=500000&stalls=4")
        let dest = dir.url.appendingPathComponent("holes.bin")
        let session = testSession()
        let first = Task { try await session.download(from: url, to: .file(dest), options: options()) }
        func record() -> RecordShape? {
            try? JSONDecoder().decode(
                RecordShape.self, from: Data(contentsOf: URL(fileURLWithPath: dest.path + ".haul")))
        }
        #expect(
            await eventually(timeout: 30) {
                record().map { $0.ranges.count == 4 && $0.ranges.allSatisfy { $0.end - $0.start == 500_000 } } ?? false
            })
        first.cancel()
        _ = await first.result
        let kept = try #require(record()).ranges
        let held = kept.reduce(0) { $0 + $1.end - $1.start }
        let before = server.requests(path: "/holes.bin").count
        let target: DownloadDestination = intoDirectory ? .directory(dir.url) : .file(dest)
        let (result, _) = await run(session, url, to: target, options: options(connections))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: size))
        let asked = server.requests(path: "/holes.bin").dropFirst(before).compactMap(\.range)
        let spans = asked.map { header -> (start: Int, end: Int) in
            let bounds = header.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
            let start = Int(bounds[0]) ?? 0
            return (start, (bounds.count > 1 ? Int(bounds[1]) ?? (size - 1) : size - 1) + 1)
        }
        // Nothing on disk was asked for again (but the probe's byte): every range lies in a gap.
        let inGaps = spans.dropFirst().allSatisfy { span in
            !kept.contains { $0.start < span.end && span.start < $0.end }
        }
        #expect(spans.first.map { $0.start == 0 && $0.end == 1 } == true && inGaps, "\(asked)")
        // The gaps once each, but for a range that lagged and was raced (seen once under
        // ThreadSanitizer): a race asks for the rest of a gap again, so no gap is asked for more
        // than twice.
        let bytes = spans.reduce(0) { $0 + $1.end - $1.start }
        #expect(bytes >= size - held + 1 && bytes <= 2 * (size - held) + 1, "\(asked)")
    }

    @Test(
        .skippedUnderThreadSanitizer("speeds are not meaningful under ThreadSanitizer's slowdown"),
        arguments: [1, 2])
    func rateLimitHoldsWithinTenPercent(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("limited.bin")
        var o = options(connections)
        o.maxBytesPerSecond = 2_000_000
        let started = Date()
        let (result, log) = await run(
            testSession { $0.progressInterval = 0.25 }, server.url("/limited.bin?size=6000000"), to: .file(dest),
            options: o)
        let seconds = Date().timeIntervalSince(started)
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 6_000_000))
        // 6 MB at 2 MB/s take three seconds: never more than 10% faster (the limit holds; load
        // only slows a download down). How close to the limit it gets is the benchmark's to
        // measure: a loaded CI run took 9.6 s.
        #expect(seconds >= 3 * 0.9, "took \(seconds) s")
        let steady = log.progress.dropFirst(6).dropLast()
        #expect(steady.allSatisfy { $0.bytesPerSecond < 2_000_000 * 1.1 }, "\(steady.map(\.bytesPerSecond))")
    }

    @Test(
        .skippedUnderThreadSanitizer("speeds are not meaningful under ThreadSanitizer's slowdown"))
    func overallLimitIsSharedByConcurrentDownloads() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.maxOverallBytesPerSecond = 2_000_000 }
        let started = Date()
        async let a = run(session, server.url("/a.bin?size=3000000"), to: .directory(dir.url))
        async let b = run(session, server.url("/b.bin?size=3000000&seed=2"), to: .directory(dir.url))
        let (ra, rb) = await (a, b)
        let seconds = Date().timeIntervalSince(started)
        #expect(ra.0.error == nil && rb.0.error == nil)
        expectFile(dir.file("a.bin"), equals: TestContent.bytes(count: 3_000_000))
        expectFile(dir.file("b.bin"), equals: TestContent.bytes(seed: 2, count: 3_000_000))
        // 6 MB through a 2 MB/s budget: at least ~3 s, both sharing it (load only slows them;
        // how close they get to the budget is the benchmark's: a loaded CI run took over 9 s).
        #expect(seconds >= 3 * 0.9, "took \(seconds) s")
    }

    /// The overall budget is shared, not won by one download at a time: each wait ended for all
    /// waiting transfers together and the one first in the transport's table took the next
    /// chunk every time, so four downloads under `--max-overall-rate` finished one after another
    /// (at 1, 2, 3 and 4 s for 4 x 4 MiB at 4 MiB/s), the last receiving nothing for 3 s. Now the
    /// transfer that has waited longest goes first: when the first download ends, the others have
    /// most of their bytes too.
    @Test(
        .skippedUnderThreadSanitizer("speeds are not meaningful under ThreadSanitizer's slowdown"))
    func theOverallBudgetIsSharedInTurnsNotWonByOneDownloadAtATime() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.maxOverallBytesPerSecond = 3_000_000 }
        let size = 1_500_000
        let received = Locked<[Int: Int64]>([:])
        let atFirstEnd = Locked<[Int: Int64]?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 1...4 {
                group.addTask {
                    _ = try await session.download(
                        from: server.url("/share\(i).bin?size=\(size)&seed=\(i)"),
                        to: .file(dir.url.appendingPathComponent("share\(i).bin"))
                    ) { event in
                        if case .progress(let p) = event { received.withLock { $0[i] = p.completedBytes } }
                    }
                    received.withLock { r in
                        r[i] = Int64(size)
                        atFirstEnd.withLock { if $0 == nil { $0 = r } }
                    }
                }
            }
            try await group.waitForAll()
        }
        for i in 1...4 { expectFile(dir.file("share\(i).bin"), equals: TestContent.bytes(seed: i, count: size)) }
        let snapshot = try #require(atFirstEnd.get())
        let behind = (1...4).map { snapshot[$0] ?? 0 }.min() ?? 0
        #expect(behind >= Int64(size) * 4 / 10, "when the first ended: \(snapshot.sorted { $0.key < $1.key })")
    }

    struct RecordShape: Decodable {
        struct Range: Decodable {
            var start: Int
            var end: Int
        }
        var ranges: [Range]
    }
}
