import Foundation
import HaulTestSupport
import Testing

@testable import HaulCore

@Suite("Finished files are synced in groups")
struct SyncBatcherTests {
    /// Files with a few bytes each, open for writing.
    func files(_ count: Int, in dir: TemporaryDirectory) throws -> [(fd: Int32, path: String)] {
        try (0..<count).map { i in
            let path = dir.url.appendingPathComponent("f\(i)").path
            let fd = try Sys.open(path, O_RDWR | O_CREAT)
            try [UInt8](repeating: UInt8(i), count: 4096).withUnsafeBytes { try Sys.pwriteAll(fd, $0, at: 0) }
            return (fd, path)
        }
    }

    /// Holds the sync of `held` (setting `entered`) until `release` is set (bounded: 10 s),
    /// failing `failing` with EIO.
    func hook(held: String, failing: String? = nil, entered: Locked<Bool>, release: Locked<Bool>) -> Int {
        FaultInjection.add { call, _, path in
            guard call == .fsync else { return nil }
            if path == held {
                entered.set(true)
                let deadline = Date().addingTimeInterval(10)
                while !release.get() && Date() < deadline { usleep(1000) }
            }
            return failing != nil && path == failing ? Errno(EIO) : nil
        }
    }

    @Test func syncsThatArriveDuringASyncFormTheNextGroup() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(8, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let batcher = SyncBatcher()
        let (entered, release) = (Locked(false), Locked(false))
        let id = hook(held: files[0].path, entered: entered, release: release)
        defer { FaultInjection.remove(id) }
        let first = Task { await batcher.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { entered.get() })  // the first is being synced, alone
        let rest = Task {
            await withTaskGroup(of: Errno?.self) { group in
                for f in files.dropFirst() { group.addTask { await batcher.sync(f.fd, path: f.path) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
        }
        #expect(await eventually { batcher.waitingCount == 7 })
        release.set(true)
        #expect(await first.value == nil)
        #expect(await rest.value.allSatisfy { $0 == nil })
        #expect(batcher.groupedCount == 7)
        #expect(batcher.waitingCount == 0)
    }

    @Test func aFailedSyncFailsOnlyItsOwnFile() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(4, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let batcher = SyncBatcher()
        let (entered, release) = (Locked(false), Locked(false))
        let id = hook(held: files[0].path, failing: files[2].path, entered: entered, release: release)
        defer { FaultInjection.remove(id) }
        let first = Task { await batcher.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { entered.get() })
        let rest = files.dropFirst().map { f in Task { await batcher.sync(f.fd, path: f.path) } }
        #expect(await eventually { batcher.waitingCount == 3 })
        release.set(true)
        #expect(await first.value == nil)
        var results: [Errno?] = []
        for task in rest { results.append(await task.value) }
        #expect(results == [nil, Errno(EIO), nil])
        // A lone sync afterwards goes through on its own.
        #expect(await batcher.sync(files[1].fd, path: files[1].path) == nil)
        #expect(batcher.groupedCount == 3)
    }
}
