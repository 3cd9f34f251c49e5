import Foundation
import Haul
import HaulTestSupport
import Testing

extension DownloadManagerTests {
    /// Moves reorder what is queued behind a download that holds the only slot: the server sees
    /// the new order, priorities follow where an item was put, and a reloaded list keeps it.
    @Test func queuedItemsMoveAndRunInTheirNewOrderAfterAReload() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let manager = try DownloadManager(configuration: persistent(in: state) { $0.maxConcurrentDownloads = 1 })
        // Stalls after 1000 bytes: the slot stays taken until it is cancelled.
        let holder = manager.add(server.url("/holder?size=100000&stall=1000&stalls=1"), to: .directory(dir.url))
        #expect(await received(manager, holder, atLeast: 1000))
        var ids: [String: UUID] = [:]
        for (name, priority) in [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("high", 5)] {
            ids[name] = manager.add(server.url("/\(name)?size=1000"), to: .directory(dir.url), priority: priority)
        }
        func order() -> [String] {
            manager.items.filter { $0.state == .queued }.map { $0.url.path.dropFirst() }.map(String.init)
        }
        #expect(order() == ["a", "b", "c", "d", "high"], "the list is in the order added")
        #expect(manager.move(ids["d"]!, .top), "past a higher priority: d takes it")
        #expect(manager.item(ids["d"]!)?.priority == 5)
        #expect(manager.move(ids["a"]!, .bottom) && manager.move(ids["c"]!, .up) && manager.move(ids["high"]!, .down))
        #expect(manager.move(ids["a"]!, .down), "already last: nothing changes")
        #expect(!manager.move(holder, .top), "a running item has no place in the queue")
        #expect(!manager.move(UUID(), .top))
        #expect(order() == ["d", "c", "high", "b", "a"])
        await manager.shutdown()

        let again = try DownloadManager(configuration: persistent(in: state) { $0.maxConcurrentDownloads = 1 })
        // The holder was running: queued first again, and may have started by now.
        let reloaded = again.items.filter { $0.id != holder && $0.state == .queued }.map(\.url.path)
        #expect(reloaded == ["/d", "/c", "/high", "/b", "/a"])
        again.cancel(holder)
        await again.waitUntilIdle()
        let started = server.requests.map(\.path).filter { $0 != "/holder" }
        #expect(started == ["/d", "/c", "/high", "/b", "/a"])
        await again.shutdown()
    }

    /// A queued item paused and resumed left its old entry in the run queue, and that entry
    /// counted again: it started from its old place, not from the back of its priority.
    @Test func aQueuedItemPausedAndResumedGoesToTheBack() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let manager = try DownloadManager(configuration: configuration { $0.maxConcurrentDownloads = 1 })
        let holder = manager.add(server.url("/holder?size=100000&stall=1000&stalls=1"), to: .directory(dir.url))
        #expect(await received(manager, holder, atLeast: 1000))
        let a = manager.add(server.url("/a?size=1000"), to: .directory(dir.url))
        manager.add(server.url("/b?size=1000"), to: .directory(dir.url))
        manager.pause(a)
        manager.resume(a)
        manager.cancel(holder)
        await manager.waitUntilIdle()
        #expect(server.requests.map(\.path).filter { $0 != "/holder" } == ["/b", "/a"])
        await manager.shutdown()
    }
}
