import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// The list a persisted manager keeps: reloaded, written now and then, kept aside when unreadable.
extension DownloadManagerTests {
    @Test func theListSurvivesARestartAndUnfinishedDownloadsContinue() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let persistent = persistent(in: state)
        let first = try DownloadManager(configuration: persistent)
        let id = first.add(
            server.url("/p1.bin?size=3000000&stall=1000000&stalls=1"), to: .directory(dir.url), priority: 3)
        #expect(await received(first, id))
        await first.shutdown()
        #expect(FileManager.default.fileExists(atPath: listFile(state)))

        let second = try DownloadManager(configuration: persistent)
        #expect(second.item(id)?.priority == 3)
        await second.waitUntilIdle()
        #expect(second.item(id)?.state == .completed)
        expectFile(dir.file("p1.bin"), equals: TestContent.bytes(count: 3_000_000))
        #expect((server.requests(path: "/p1.bin").last?.rangeStart ?? 0) > 0)
    }

    /// Every change (each start, each progress event, each end) built the whole sorted list for
    /// the subscribers of `updates` and, persisting, wrote the whole state file: a list of n
    /// downloads cost n² (`haul get --json -j16` of 5000 small files took 29.6 s, 0.37 s
    /// without --json). Changes are gathered now: a list at most every 0.1 s, the file at most
    /// once a second, and both at once when the manager goes idle, so the end state is there
    /// when waitUntilIdle() returns.
    @Test(
        .skippedUnderThreadSanitizer("300 downloads take 15 s under ThreadSanitizer, beside timing tests on two cores"))
    func aBurstOfChangesBuildsTheListAndWritesTheStateFileOnlyNowAndThen() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let manager = try DownloadManager(
            configuration: persistent(in: state) {
                $0.maxConcurrentDownloads = 16
                $0.maxDownloadsPerHost = 16
            })
        let last = Locked<[DownloadManager.Item]>([])
        let watcher = Task { for await list in manager.updates { last.set(list) } }
        defer { watcher.cancel() }
        let count = 300
        for i in 0..<count { manager.add(server.url("/b\(i)?size=100"), to: .directory(dir.url)) }
        await manager.waitUntilIdle()
        #expect(manager.items.allSatisfy { $0.state == .completed })
        // Each download changes the list at least three times (added, started, ended).
        #expect(manager.listSnapshots < count, "\(manager.listSnapshots) lists built")
        #expect(manager.stateFileWrites < count / 3, "\(manager.stateFileWrites) writes")
        // The end state is in the file when waitUntilIdle() returns, and reaches subscribers.
        let saved = try String(contentsOfFile: listFile(state), encoding: .utf8)
        #expect(saved.components(separatedBy: "\"completed\"").count - 1 == count)
        #expect(
            await eventually(timeout: 10) {
                last.get().count == count && last.get().allSatisfy { $0.state == .completed }
            })
    }

    /// A list whose state file had grown past 16 MiB (some 48,000 downloads) did not load: the
    /// manager started empty and its next save replaced the file, the list lost.
    @Test(
        .skippedUnderThreadSanitizer("17 MB of JSON take 11 s under ThreadSanitizer, beside timing tests on two cores"))
    func aStateFileOverSixteenMiBIsReloaded() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let persistent = persistent(in: state) { $0.maxFinishedItems = 10_000 }  // all 9,000 stay
        let first = try DownloadManager(configuration: persistent)
        first.add(server.url("/big-list.bin?size=100"), to: .directory(dir.url))
        await first.waitUntilIdle()
        await first.shutdown()
        // The saved item, repeated with other ids and long URLs: 9,000 items of about 2 KB.
        let file = listFile(state)
        var stored = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Any])
        let item = try #require((stored["items"] as? [[String: Any]])?.first)
        let padding = String(repeating: "p", count: 2000)
        stored["items"] = (0..<9000).map { i -> [String: Any] in
            var copy = item
            copy["id"] = UUID().uuidString
            copy["url"] = server.url("/big-list.bin?size=100&n=\(i)&pad=\(padding)").absoluteString
            copy["sequence"] = i + 1
            return copy
        }
        let data = try JSONSerialization.data(withJSONObject: stored)
        #expect(data.count > 16 << 20)
        try data.write(to: URL(fileURLWithPath: file))
        let second = try DownloadManager(configuration: persistent)
        #expect(second.items.count == 9000)
        #expect(second.items.allSatisfy { $0.state == .completed })
        await second.shutdown()
    }

    /// A list the manager cannot read is kept aside as `<identifier>.json.unreadable`; the next
    /// save replaced it.
    @Test func anUnreadableStateFileIsKeptAside() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        defer { cleanUp(server, dir, state) }
        let garbage = Data("{\"version\": 1, \"items\": [ damaged".utf8)
        try FileManager.default.createDirectory(atPath: state.file("managers"), withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: listFile(state), contents: garbage))
        let manager = try DownloadManager(
            configuration: persistent(in: state))
        #expect(manager.items.isEmpty)
        manager.add(server.url("/after.bin?size=100"), to: .directory(dir.url))
        await manager.waitUntilIdle()
        await manager.shutdown()
        #expect(FileManager.default.contents(atPath: listFile(state) + ".unreadable") == garbage)
        let saved = try String(contentsOfFile: listFile(state), encoding: .utf8)
        #expect(saved.contains("after.bin"))
    }
}
