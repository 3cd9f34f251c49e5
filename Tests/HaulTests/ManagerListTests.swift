import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// A persisted manager's list is its own: one per identifier, held by one manager at a time,
/// bounded, and with a way to take finished items out.
@Suite("DownloadManager: a list per identifier", .fewAtOnce)
struct ManagerListTests {
    func configuration(
        _ state: TemporaryDirectory, _ identifier: String,
        _ adjust: (inout DownloadManager.Configuration) -> Void = { _ in }
    ) -> DownloadManager.Configuration {
        var c = DownloadManager.Configuration()
        c.stateDirectory = state.url
        c.identifier = identifier
        c.session.retry.initialDelay = 0.05
        adjust(&c)
        return c
    }

    /// Every `DownloadManager()` in every program shared one `downloads.json`: a second
    /// manager reloaded (and resumed) the first's downloads, and two at once overwrote each
    /// other's list.
    @Test func aSecondManagerWithTheSameIdentifierIsRefusedUntilTheFirstShutsDown() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let first = try DownloadManager(configuration: configuration(state, "app"))
        let id = first.add(server.url("/one.bin?size=100"), to: .directory(dir.url))
        await first.waitUntilIdle()
        let refused = #expect(throws: HaulError.self) {
            try DownloadManager(configuration: configuration(state, "app"))
        }
        #expect(refused?.code == .listInUse)
        #expect(refused?.message.contains("\"app\" is in use by another manager") == true, "\(refused?.message ?? "")")
        await first.shutdown()
        let second = try DownloadManager(configuration: configuration(state, "app"))
        #expect(second.item(id)?.state == .completed, "the list continues once the first gave it up")
        await second.shutdown()
    }

    @Test func anotherIdentifierIsAnotherList() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let podcasts = try DownloadManager(configuration: configuration(state, "podcasts"))
        podcasts.add(server.url("/episode.bin?size=100"), to: .directory(dir.url))
        await podcasts.waitUntilIdle()
        let photos = try DownloadManager(configuration: configuration(state, "photos"))
        #expect(photos.items.isEmpty)
        #expect(podcasts.stateFile != photos.stateFile)
        #expect(podcasts.stateFile?.lastPathComponent == "podcasts.json")
        await podcasts.shutdown()
        await photos.shutdown()
    }

    /// An identifier is any bytes; it names a file inside `managers/` and nowhere else.
    @Test func anIdentifierCannotNameAFileOutsideTheStateDirectory() async throws {
        let state = try TemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: state.url) }
        let manager = try DownloadManager(configuration: configuration(state, "../../x/.y"))
        #expect(manager.stateFile?.deletingLastPathComponent().path == state.file("managers"))
        #expect(manager.stateFile?.lastPathComponent == "%2E.%2F..%2Fx%2F.y.json")
        await manager.shutdown()
        let empty = #expect(throws: HaulError.self) { try DownloadManager(configuration: configuration(state, "")) }
        #expect(empty?.code == .usage)
        // 200 bytes once encoded is the longest: the file's name and its `.unreadable` and
        // `.tmp` siblings stay under NAME_MAX.
        let longest = try DownloadManager(configuration: configuration(state, String(repeating: "a", count: 200)))
        await longest.shutdown()
        let accents = String(repeating: "é", count: 34)  // 68 bytes, 204 once encoded
        let long = #expect(throws: HaulError.self) { try DownloadManager(configuration: configuration(state, accents)) }
        #expect(long?.code == .usage)
        #expect(long?.message.contains("this one has 68 bytes") == true, "\(long?.message ?? "")")
    }

    /// Another process holding the list (here python3 with a POSIX lock on the same byte, which
    /// the kernel weighs against haul's open-file-description lock) is refused; once it is killed
    /// with -9 the list is free, with nothing stale left to clean.
    @Test(.enabled(if: ManagerListTests.hasPython, "needs python3"))
    func aListHeldByAnotherProcessIsRefusedAndFreedWhenItIsKilled() async throws {
        let state = try TemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: state.url) }
        try FileManager.default.createDirectory(atPath: state.file("managers"), withIntermediateDirectories: true)
        let script = """
            import fcntl, os, sys, time
            fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            print("locked", flush=True)
            time.sleep(120)
            """
        let holder = try ChildProcess("python3", ["-c", script, state.file("managers/app.lock")])
        defer { holder.killGroup() }
        #expect(await eventually(timeout: 30) { String(decoding: holder.stdout, as: UTF8.self).contains("locked") })
        let refused = #expect(throws: HaulError.self) {
            try DownloadManager(configuration: configuration(state, "app"))
        }
        #expect(refused?.code == .listInUse)
        holder.signal(SIGKILL)
        _ = await holder.finish(timeout: 30)
        let manager = try DownloadManager(configuration: configuration(state, "app"))
        await manager.shutdown()
    }

    static let hasPython = (try? ChildProcess("python3", ["-c", "pass"])) != nil

    @Test func aFinishedItemCanBeRemovedAndLeavesTheStateFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let manager = try DownloadManager(configuration: configuration(state, "app") { $0.maxConcurrentDownloads = 1 })
        let done = manager.add(server.url("/done.bin?size=100"), to: .directory(dir.url))
        await manager.waitUntilIdle()
        let slow = manager.add(server.url("/slow.bin?size=3000000&stall=1000&stalls=1"), to: .directory(dir.url))
        #expect(!manager.remove(slow), "not finished: it must be cancelled first")
        #expect(manager.remove(done))
        #expect(manager.item(done) == nil)
        #expect(!manager.remove(done))
        manager.cancel(slow)
        await manager.waitUntilIdle()
        #expect(manager.remove(slow))
        await manager.shutdown()
        let saved = try String(contentsOfFile: try #require(manager.stateFile).path, encoding: .utf8)
        #expect(!saved.contains("done.bin") && !saved.contains("slow.bin"))
        expectFile(dir.file("done.bin"), equals: TestContent.bytes(count: 100))  // the file stays
    }

    @Test func onlyTheNewestFinishedItemsAreKept() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let manager = try DownloadManager(
            configuration: configuration(state, "app") {
                $0.maxFinishedItems = 2
                $0.maxConcurrentDownloads = 1
            })
        for i in 1...4 { manager.add(server.url("/k\(i).bin?size=100"), to: .directory(dir.url)) }
        await manager.waitUntilIdle()
        #expect(manager.items.map { $0.url.lastPathComponent } == ["k3.bin", "k4.bin"])
        await manager.shutdown()
        let reloaded = try DownloadManager(configuration: configuration(state, "app"))
        #expect(reloaded.items.map { $0.url.lastPathComponent } == ["k3.bin", "k4.bin"])
        await reloaded.shutdown()
        #expect(dir.contents().sorted() == ["k1.bin", "k2.bin", "k3.bin", "k4.bin"], "files are not touched")
    }
}
