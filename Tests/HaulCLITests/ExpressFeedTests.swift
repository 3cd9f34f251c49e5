import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCLI
@testable import HaulCore

/// `haul get -j` without a live display feeds URLs the express way (docs/small-downloads.md):
/// `-j` transfers at once, and a file being saved no longer holds its place.
@Suite("The express feed", .fewAtOnce)
struct ExpressFeedTests {
    /// The feed's express start as `haul get` makes it (a session without an HTTP cache, four
    /// connections), for `urls` into `dir`; the indexes in `skipping` take the manager at once.
    private static func express(
        _ urls: [URL], into dir: URL, skipping: Set<Int> = [], worker: FileWorker = .shared
    )
        -> @Sendable (Int, @escaping @Sendable (Int) -> Void, @escaping @Sendable (HaulSession.ExpressEnd) -> Void) ->
        ExpressDownload?
    {
        var configuration = HaulConfiguration()
        configuration.cache = nil
        let session = HaulSession(configuration: configuration)
        var options = DownloadOptions()
        options.connections = 4
        return { [options] index, saving, ended in
            guard !skipping.contains(index) else { return nil }
            return session.startExpress(
                urls[index], into: dir, options: options, saving: saving, worker: worker, completion: ended)
        }
    }

    /// While small files wait for a slow disk (-j 1), the place of each whose transfer ended goes
    /// to the next URL until four times -j files wait, and no further: a fifth URL waits. Every
    /// file is saved once the disk goes on.
    @Test func smallFilesBeingSavedFreeTheirPlacesUntilFourTimesJWait() async throws {
        try await expectWhileSavesAreHeld(
            names: ["a", "b", "c", "d", "e", "f"], size: 3000, asked: ["a", "b", "c", "d"])
    }

    /// Files waiting for their save stop the next URL once they hold 1 MiB a job in all (-j 1: a
    /// second URL starts while one file of 700,000 bytes waits, a third not while two do), so the
    /// bodies held stay bounded whatever their sizes.
    @Test func filesBeingSavedHoldingAMebibyteAJobHoldTheNextURL() async throws {
        try await expectWhileSavesAreHeld(names: ["a", "b", "c"], size: 700_000, asked: ["a", "b"])
    }

    /// Runs `names` (files of `size` bytes) through a feed of -j 1 with every sync held: the
    /// URLs asked for are `asked` (looked at again after the feed has had time to ask for more),
    /// and every file is saved once the syncs are let go. The files go to a file worker of their
    /// own: the held syncs take its lanes, not those of the process's worker other tests share.
    private func expectWhileSavesAreHeld(names: [String], size: Int, asked expected: Set<String>) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let urls = names.map { server.url("/\($0).bin?size=\(size)") }
        // Every sync is held (one may wait behind another in a group of the file worker's:
        // either way each waits for its save), so the order the transfers end in does not matter.
        let hold = SyncHold(Set(names.map { dir.file("\($0).bin.part") }))
        defer { hold.remove() }
        let saved = Locked<Set<Int>>([])
        let managed = Locked<Set<Int>>([])
        let feed = ExpressFeed(
            count: urls.count, jobs: 1,
            express: Self.express(urls, into: dir.url, worker: FileWorker()),
            manage: { index, _, finished in
                managed.withLock { _ = $0.insert(index) }
                finished()
            },
            saved: { index, _, _ in saved.withLock { _ = $0.insert(index) } })
        let run = Task { await feed.run() }
        defer { run.cancel() }

        let asked = { Set(server.requests.map(\.path)) }
        let paths = Set(expected.map { "/\($0).bin" })
        for _ in 0..<3000 where hold.held.isEmpty || asked() != paths {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(!hold.held.isEmpty, "a save is held")
        #expect(asked() == paths)
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(asked() == paths, "no further URL while these wait for their save")
        #expect(saved.get().isEmpty)

        hold.release()
        for _ in 0..<3000 where saved.get().count < names.count { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(saved.get() == Set(names.indices))
        #expect(managed.get().isEmpty)
        for name in names { expectFile(dir.file("\(name).bin"), equals: TestContent.bytes(count: size)) }
        #expect(server.requests.count == names.count, "each URL asked once")
    }

    /// A save that declines (a URL whose file has the name another one's save holds) goes to the manager once, with the answer it has, and the run ends
    /// when both have: nothing counted twice, nothing waiting for ever.
    @Test func aSaveThatDeclinesGoesToTheManagerOnce() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let urls = [server.url("/x/same.bin?size=3000&seed=1"), server.url("/y/same.bin?size=3000&seed=2")]
        let hold = SyncHold([dir.file("same.bin.part")])
        defer { hold.remove() }
        let saved = Locked<[Int]>([])
        let managed = Locked<[(Int, Bool)]>([])
        let feed = ExpressFeed(
            count: urls.count, jobs: 2,
            express: Self.express(urls, into: dir.url, worker: FileWorker()),
            manage: { index, options, finished in
                managed.withLock { $0.append((index, options?.prefetched != nil)) }
                options?.prefetched?.drop()
                finished()
            },
            saved: { index, _, _ in saved.withLock { $0.append(index) } })
        let done = Locked(false)
        let run = Task {
            await feed.run()
            done.set(true)
        }
        defer { run.cancel() }
        for _ in 0..<3000 where hold.held.isEmpty || managed.get().isEmpty {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        // Whichever transfer ended first claimed the name; the other went to the manager.
        #expect(managed.get().count == 1, "one URL went to the manager")
        #expect(managed.get().first?.1 == true, "with the answer it had")
        #expect(!done.get(), "the run waits for the first's save")
        hold.release()
        for _ in 0..<3000 where !done.get() { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(done.get())
        #expect(managed.get().count == 1)
        guard let first = saved.get().first, let other = managed.get().first?.0 else { return }
        #expect(saved.get().count == 1 && first != other)
        expectFile(dir.file("same.bin"), equals: TestContent.bytes(seed: first + 1, count: 3000))
    }

    /// A save that declines after its place went to the next URL waits for a place: with -j 3,
    /// one place held by the manager and two transfers that never end, it goes to the manager
    /// only when the manager's download has finished; a stop while it waits drops it (its answer
    /// cancelled, nothing handed over) and the run ends.
    @Test(arguments: [false, true]) func aDeclinedSaveWaitsForAPlace(stopping: Bool) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let urls = [
            server.url("/m.bin?size=1000"), server.url("/x/same.bin?size=3000&seed=1"),
            server.url("/y/same.bin?size=3000&seed=2"), server.url("/z.bin?size=300000&stall=1000"),
            server.url("/w.bin?size=300000&stall=1000"),
        ]
        let hold = SyncHold([dir.file("same.bin.part")])
        defer { hold.remove() }
        let managed = Locked<[Int]>([])
        let firstFinished = Locked<(@Sendable () -> Void)?>(nil)
        let feed = ExpressFeed(
            count: urls.count, jobs: 3,
            // The first URL takes the manager and holds its place.
            express: Self.express(urls, into: dir.url, skipping: [0], worker: FileWorker()),
            manage: { index, options, finished in
                managed.withLock { $0.append(index) }
                options?.prefetched?.drop()
                if index == 0 { firstFinished.set(finished) } else { finished() }
            },
            saved: { _, _, _ in })
        let done = Locked(false)
        let run = Task {
            await feed.run()
            done.set(true)
        }
        defer { run.cancel() }
        // One of x and y is being saved (held), the other declined; z and w never end; the
        // manager holds m: three places taken, so the declined one waits.
        for _ in 0..<3000 where feed.declinedSavesWaiting == 0 { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(feed.declinedSavesWaiting == 1)
        #expect(managed.get() == [0], "the declined save waits while -j are taken")
        if !stopping {
            firstFinished.get()?()
            for _ in 0..<3000 where managed.get().count < 2 { try await Task.sleep(nanoseconds: 10_000_000) }
            #expect(managed.get().count == 2 && Set(managed.get()[1...]).isSubset(of: [1, 2]), "then it goes")
        }
        feed.stop()
        hold.release()
        for _ in 0..<3000 where !done.get() { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(done.get(), "the run ends")
        if stopping {
            #expect(managed.get() == [0], "the declined save was dropped, not handed over")
            #expect(feed.declinedSavesWaiting == 0)
        }
    }
}
