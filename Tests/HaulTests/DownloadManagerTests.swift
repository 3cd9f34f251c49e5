import Foundation
import Haul
import HaulFoundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("DownloadManager: caps, priorities, persistence", .fewAtOnce)
struct DownloadManagerTests {
    /// Waits up to 10 s until `manager` has `bytes` of item `id`.
    func received(_ manager: DownloadManager, _ id: UUID, atLeast bytes: Int64 = 300_000) async -> Bool {
        await eventually(timeout: 10) { (manager.item(id)?.progress?.completedBytes ?? 0) >= bytes }
    }

    func configuration(
        _ adjust: (inout DownloadManager.Configuration) -> Void = { _ in }
    )
        -> DownloadManager
        .Configuration
    {
        var c = DownloadManager.Configuration()
        c.persistence = .ephemeral
        c.session.retry.initialDelay = 0.05
        adjust(&c)
        return c
    }

    /// ``configuration(_:)`` keeping its list in `state` (`.default` persistence) under the
    /// identifier `tests`.
    func persistent(
        in state: TemporaryDirectory, _ adjust: (inout DownloadManager.Configuration) -> Void = { _ in }
    ) -> DownloadManager.Configuration {
        configuration {
            $0.persistence = .default
            $0.stateDirectory = state.url
            $0.identifier = "tests"
            adjust(&$0)
        }
    }

    /// Where ``persistent(in:_:)`` keeps the list.
    func listFile(_ state: TemporaryDirectory) -> String { state.file("managers/tests.json") }

    /// Caps of 0 (or below) ran nothing, and `waitUntilIdle()` never returned; they mean 1 now.
    /// Rates of 0 (or below) held every byte; they mean no limit now, as `--limit-rate 0` does in
    /// curl and aria2.
    @Test func capsAndRatesOfZeroDoNotStopEverything() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(
            configuration: configuration {
                $0.maxConcurrentDownloads = 0
                $0.maxDownloadsPerHost = -1
                $0.session.maxOverallBytesPerSecond = 0
            })
        var options = DownloadOptions()
        options.maxBytesPerSecond = -5
        for i in 1...2 {
            manager.add(server.url("/zero\(i).bin?size=300000"), to: .directory(dir.url), options: options)
        }
        let idle = Task { await manager.waitUntilIdle() }
        #expect(await eventually(timeout: 60) { manager.items.allSatisfy { $0.state == .completed } })
        await manager.shutdown()
        await idle.value
        for i in 1...2 { expectFile(dir.file("zero\(i).bin"), equals: TestContent.bytes(count: 300_000)) }
        #expect(server.maxConcurrentRequests() == 1, "a cap of 0 is a cap of 1")
    }

    /// The shared limit changes while the manager runs (`haul serve`'s setting; the daemon's
    /// tests see a running transfer follow it); a transport that cannot pace refuses a limit.
    @Test func theSharedSpeedLimitChangesAtRunTimeAndOnlyWhereItCanBeKept() throws {
        let manager = try DownloadManager(configuration: configuration { $0.session.maxOverallBytesPerSecond = 5000 })
        #expect(manager.maxOverallBytesPerSecond == 5000)
        try manager.setMaxOverallBytesPerSecond(1 << 20)
        #expect(manager.maxOverallBytesPerSecond == 1 << 20)
        for none: Int64? in [0, -3, nil] {
            try manager.setMaxOverallBytesPerSecond(none)
            #expect(manager.maxOverallBytesPerSecond == nil)
        }
        let session = testSession { $0.transport = .urlSession }
        #expect(throws: HaulError.self) { try session.setMaxOverallBytesPerSecond(1 << 20) }
        try session.setMaxOverallBytesPerSecond(nil)
        #expect(session.maxOverallBytesPerSecond == nil)
    }

    @Test func neverExceedsTheConcurrencyCapAndFinishesEverything() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration { $0.maxConcurrentDownloads = 2 })
        let completions = Box(0)
        for i in 0..<6 {
            manager.add(
                server.url("/f\(i).bin?size=400000&rate=2000000&seed=\(i + 1)&hold=2"), to: .directory(dir.url),
                completion: { result in
                    if case .success = result { completions.set(completions.get() + 1) }
                })
        }
        await manager.waitUntilIdle()
        #expect(server.maxConcurrentRequests() == 2)
        #expect(completions.get() == 6)
        #expect(manager.items.allSatisfy { $0.state == .completed })
        for i in 0..<6 { expectFile(dir.file("f\(i).bin"), equals: TestContent.bytes(seed: i + 1, count: 400_000)) }
        let aggregate = manager.aggregateProgress
        #expect(aggregate.completedBytes == 2_400_000 && aggregate.fraction == 1)
    }

    @Test func idsAreDistinctRandomUUIDs() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let ids = (0..<50).map { i in manager.add(server.url("/id\(i).bin?size=10"), to: .directory(dir.url)) }
        await manager.waitUntilIdle()
        #expect(Set(ids).count == 50)
        for id in ids {
            let text = Array(id.uuidString)
            #expect(text[14] == "4" && "89AB".contains(text[19]), "\(id) is not a version 4 UUID")
        }
        #expect(Set(manager.items.map(\.id)) == Set(ids))
    }

    @Test func perHostCapIsSharedByAllDownloadsToThatHost() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(
            configuration: configuration {
                $0.maxConcurrentDownloads = 4
                $0.maxDownloadsPerHost = 1
            })
        // `hold=2`: the first answers' last bytes wait until the two hosts' downloads overlapped.
        for i in 0..<3 {
            manager.add(
                server.url("/a\(i)?size=500000&rate=1000000&hold=2"), to: .file(dir.url.appendingPathComponent("a\(i)"))
            )
            manager.add(
                URL(string: "http://localhost:\(server.port)/b\(i)?size=500000&rate=1000000&hold=2")!,
                to: .file(dir.url.appendingPathComponent("b\(i)")))
        }
        await manager.waitUntilIdle()
        #expect(server.maxConcurrentRequests(host: "127.0.0.1:\(server.port)") == 1)
        #expect(server.maxConcurrentRequests(host: "localhost:\(server.port)") == 1)
        #expect(server.maxConcurrentRequests() == 2)
        #expect(manager.items.allSatisfy { $0.state == .completed })
    }

    @Test func higherPriorityRunsFirst() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration { $0.maxConcurrentDownloads = 1 })
        manager.add(server.url("/first?size=200000&rate=1000000"), to: .directory(dir.url))
        manager.add(server.url("/low?size=1000"), to: .directory(dir.url), priority: 0)
        manager.add(server.url("/high?size=1000"), to: .directory(dir.url), priority: 5)
        await manager.waitUntilIdle()
        #expect(server.requests.map(\.path) == ["/first", "/high", "/low"])
    }

    @Test func pauseResumeAndCancelById() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        // The first answers stall after 1 MB, so the pause and the cancel always find them
        // unfinished (at 2 MB/s a whole ThreadSanitizer run once let both finish first).
        let keep = manager.add(server.url("/keep?size=4000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        let drop = manager.add(server.url("/drop?size=4000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        #expect(await received(manager, keep, atLeast: 200_000))
        manager.pause(keep)
        manager.cancel(drop)
        #expect(manager.item(keep)?.state == .paused)
        #expect(await eventually(timeout: 10) { manager.item(drop)?.error?.code == .cancelled })
        manager.resume(keep)
        await manager.waitUntilIdle()
        #expect(manager.item(keep)?.state == .completed)
        expectFile(dir.file("keep"), equals: TestContent.bytes(count: 4_000_000))
        #expect((server.requests(path: "/keep").last?.rangeStart ?? 0) > 0)
        #expect(!dir.contents().contains { $0.hasPrefix("drop") })
    }

    @Test func aResumeRightAfterAPauseWaitsForTheStoppedTransferAndContinuesFromItsBytes() async throws {
        // The paused transfer is still stopping (its record not yet written) when the resume
        // comes: a second transfer on the same partial must not start before it has stopped.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let id = manager.add(server.url("/again?size=3000000&rate=1500000"), to: .directory(dir.url))
        #expect(await received(manager, id))
        for _ in 0..<3 {
            manager.pause(id)
            manager.resume(id)
        }
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed)
        expectFile(dir.file("again"), equals: TestContent.bytes(count: 3_000_000))
        // Each request continues where the stopped one's record ends (a second transfer started
        // at once found no record and asked from 0). The server's own count of requests at once
        // cannot show this: it notices an abandoned request only at its next write.
        let starts = server.requests(path: "/again").map { $0.rangeStart ?? 0 }
        #expect(starts.first == 0 && zip(starts, starts.dropFirst()).allSatisfy { $0 < $1 }, "\(starts)")
    }

    @Test func cancellingAPausedItemRemovesItsPartial() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let id = manager.add(server.url("/gone?size=3000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        #expect(await received(manager, id))
        manager.pause(id)
        #expect(await eventually(timeout: 10) { dir.contents() == ["gone.haul", "gone.part"] })
        manager.cancel(id)
        #expect(manager.item(id)?.error?.code == .cancelled)
        #expect(await eventually(timeout: 10) { dir.contents().isEmpty }, "\(dir.contents())")
    }

    @Test func aResumeRightAfterCancellingAPausedItemStartsOverWithoutLosingTheNewPartial() async throws {
        // The cancel removes the paused task's files when that task has wound down; a new task
        // started before then would have its partial deleted under it.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let id = manager.add(server.url("/over?size=3000000&rate=3000000"), to: .directory(dir.url))
        #expect(await received(manager, id))
        manager.pause(id)
        manager.cancel(id)
        manager.resume(id)
        await manager.waitUntilIdle()
        #expect(manager.item(id)?.state == .completed, "\(String(describing: manager.item(id)?.error))")
        expectFile(dir.file("over"), equals: TestContent.bytes(count: 3_000_000))
        #expect(dir.contents() == ["over"])
    }

    @Test func aPausedItemWhoseTransferHadEveryByteCompletes() async throws {
        // The file's sync is held: the transfer has every byte when the pause comes. Its task
        // completes anyway, and so does the item (it stayed paused, and a resume asked the
        // server again to find the file complete).
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let hold = SyncHold([dir.file("whole.bin.part")])
        defer { hold.remove() }
        let manager = try DownloadManager(configuration: configuration())
        let outcomes = Box<[Bool]>([])
        let id = manager.add(
            server.url("/whole.bin?size=200000"), to: .directory(dir.url),
            completion: { result in outcomes.set(outcomes.get() + [(try? result.get()) != nil]) })
        #expect(await eventually(timeout: 30) { !hold.held.isEmpty })
        manager.pause(id)
        #expect(manager.item(id)?.state == .paused)
        hold.release()
        #expect(await eventually(timeout: 10) { manager.item(id)?.state == .completed })
        #expect(await eventually(timeout: 5) { !outcomes.get().isEmpty })
        try await Task.sleep(nanoseconds: 100_000_000)
        #expect(outcomes.get() == [true], "the completion is called once, with the file")
        #expect(manager.item(id)?.fileURL?.path == dir.file("whole.bin"))
        #expect(server.requests(path: "/whole.bin").count == 1)
        expectFile(dir.file("whole.bin"), equals: TestContent.bytes(count: 200_000))
        await manager.waitUntilIdle()
    }

    @Test func idleComesAfterEveryCompletionHasRun() async throws {
        // A completion still running (here a slow one) while another download finishes: the
        // manager was idle as soon as the states said so, and a waiter missed that outcome
        // (`haul get -j` once exited 0 with a 404 among its downloads).
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration { $0.maxConcurrentDownloads = 2 })
        let calls = Box(0)
        manager.add(
            server.url("/missing?status=404"), to: .directory(dir.url),
            completion: { _ in
                usleep(500_000)
                calls.set(calls.get() + 1)
            })
        manager.add(
            server.url("/quick?size=100000&rate=1000000"), to: .directory(dir.url),
            completion: { _ in calls.set(calls.get() + 1) })
        await manager.waitUntilIdle()
        #expect(calls.get() == 2)
    }

    @Test func cancellingAPausedItemCallsItsCompletion() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let outcome = Box<HaulError?>(nil)
        let id = manager.add(
            server.url("/told?size=3000000&stall=1000000&stalls=1"), to: .directory(dir.url),
            completion: { result in if case .failure(let e) = result { outcome.set(e) } })
        #expect(await received(manager, id))
        manager.pause(id)
        manager.cancel(id)
        #expect(outcome.get()?.code == .cancelled)
    }

    @Test func shutdownRightAfterAPauseLeavesTheRecordOfThePausedTransfer() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let id = manager.add(server.url("/held?size=3000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        #expect(await received(manager, id))
        manager.pause(id)
        await manager.shutdown()
        // The stopped transfer had written its record before shutdown returned.
        let bytes = try #require(FileManager.default.contents(atPath: dir.file("held.haul")))
        let record = try #require(ResumeRecord.decode(Array(bytes)))
        #expect(record.contiguousBytes >= 300_000)
    }

    /// `haul get -j` stops on Ctrl-C with `shutdown()` and then waits with `waitUntilIdle()`:
    /// with a download still queued (or running) that wait never ended, and the command hung.
    @Test func waitUntilIdleEndsOnceTheManagerIsShutDownWithDownloadsLeft() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration { $0.maxConcurrentDownloads = 1 })
        let running = manager.add(server.url("/sd1?size=3000000&stall=1000000&stalls=1"), to: .directory(dir.url))
        let queued = manager.add(server.url("/sd2?size=1000"), to: .directory(dir.url))
        #expect(await received(manager, running))
        let waited = Box(false)
        let waiter = Task {
            await manager.waitUntilIdle()
            waited.set(true)
        }
        await manager.shutdown()
        #expect(await eventually(timeout: 10) { waited.get() }, "waitUntilIdle returned after shutdown")
        waiter.cancel()
        #expect(manager.item(queued)?.state == .queued, "its place in the list is kept")
        #expect(server.requests(path: "/sd2").isEmpty)
        // A wait that starts after the shutdown returns at once.
        let late = Box(false)
        Task {
            await manager.waitUntilIdle()
            late.set(true)
        }
        #expect(await eventually(timeout: 10) { late.get() })
    }

    /// A file already complete on disk is reported as such by the manager, with its size: the
    /// manager built its result from progress events (none came) and said 0 bytes, not already
    /// complete (`haul get -j --json` printed "bytes":0 and "saved").
    @Test func anAlreadyCompleteFileIsReportedWithItsSize() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(
            FileManager.default.createFile(atPath: dir.file("done.bin"), contents: Data(TestContent.bytes(count: 5000)))
        )
        let manager = try DownloadManager(configuration: configuration())
        let outcome = Locked<Result<DownloadResult, HaulError>?>(nil)
        manager.add(server.url("/done.bin?size=5000"), to: .directory(dir.url), completion: { outcome.set($0) })
        await manager.waitUntilIdle()
        let result = try #require(try outcome.get()?.get())
        #expect(result.alreadyComplete)
        #expect(result.bytes == 5000)
    }

    /// An item's events (started, retrying, …) reach its `events` handler, as a session's
    /// download gives them.
    @Test func anItemsEventsReachItsHandler() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let seen = Locked<[String]>([])
        manager.add(
            server.url("/ev.bin?size=2000000&drop=500000&drops=1"), to: .directory(dir.url),
            events: { event in
                switch event {
                case .started(let s): seen.withLock { $0.append("started \(s.offset)") }
                case .retrying(let attempt, _, _): seen.withLock { $0.append("retrying \(attempt)") }
                default: break
                }
            })
        await manager.waitUntilIdle()
        #expect(seen.get() == ["started 0", "retrying 1", "started 500000"])
    }

    @Test func ephemeralKeepsNoState() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let manager = try DownloadManager(configuration: configuration { $0.stateDirectory = state.url })
        manager.add(server.url("/e?size=100"), to: .directory(dir.url))
        await manager.waitUntilIdle()
        #expect(manager.stateFile == nil)
        #expect(state.contents().isEmpty)
        #expect(dir.contents() == ["e"])
    }

    @Test func destinationClosureAndScopedManager() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var c = configuration()
        c.destination = { url in .file(dir.url.appendingPathComponent("via-closure-" + url.lastPathComponent)) }
        let names = try await withDownloadManager(configuration: c) { manager -> [String] in
            manager.add(server.url("/x.bin?size=100"))
            await manager.waitUntilIdle()
            return manager.items.compactMap { $0.fileURL?.lastPathComponent }
        }
        #expect(names == ["via-closure-x.bin"])
        expectFile(dir.file("via-closure-x.bin"), equals: TestContent.bytes(count: 100))
    }

    @Test func updatesStreamTheList() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration())
        let watcher = Task { () -> Bool in
            for await list in manager.updates where list.first?.state == .completed { return true }
            return false
        }
        manager.add(server.url("/u?size=1000"), to: .directory(dir.url))
        await manager.waitUntilIdle()
        #expect(await watcher.value)
    }
}
