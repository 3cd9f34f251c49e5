import CHaulCurl
import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("The file worker syncs finished files in groups", .fewAtOnce)
struct FileWorkerTests {
    /// Files with a few bytes each, open for writing.
    func files(_ count: Int, in dir: TemporaryDirectory) throws -> [(fd: Int32, path: String)] {
        try (0..<count).map { i in
            let path = dir.url.appendingPathComponent("f\(i)").path
            let fd = try Sys.open(path, O_RDWR | O_CREAT)
            try [UInt8](repeating: UInt8(i), count: 4096).withUnsafeBytes { try Sys.pwriteAll(fd, $0, at: 0) }
            return (fd, path)
        }
    }

    @Test func syncsThatArriveDuringASyncFormTheNextGroup() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(8, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(lanes: 1)
        let hold = SyncHold([files[0].path])
        defer { hold.remove() }
        let first = Task { await worker.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { !hold.held.isEmpty })  // the syncer has it, alone
        let rest = Task {
            await withTaskGroup(of: Errno?.self) { group in
                for f in files.dropFirst() { group.addTask { await worker.sync(f.fd, path: f.path) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
        }
        #expect(await eventually { worker.waitingCount == 7 })
        hold.release()
        #expect(await first.value == nil)
        #expect(await rest.value.allSatisfy { $0 == nil })
        #expect(worker.groupedCount == 7)
        #expect(worker.waitingCount == 0)
    }

    @Test func aFailedSyncFailsOnlyItsOwnFile() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(4, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(lanes: 1)
        let hold = SyncHold([files[0].path], failing: files[2].path)
        defer { hold.remove() }
        let first = Task { await worker.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { !hold.held.isEmpty })
        let rest = files.dropFirst().map { f in Task { await worker.sync(f.fd, path: f.path) } }
        #expect(await eventually { worker.waitingCount == 3 })
        hold.release()
        #expect(await first.value == nil)
        var results: [Errno?] = []
        for task in rest { results.append(await task.value) }
        #expect(results == [nil, Errno(EIO), nil])
        // A lone sync afterwards is a group of its own.
        #expect(await worker.sync(files[1].fd, path: files[1].path) == nil)
        #expect(worker.groupedCount == 3)
    }

    /// A sync waiting for a slow disk holds only its own lane: the next file goes to an idle
    /// one at once; with every lane busy, files wait for the least loaded one as a group.
    @Test func aHeldSyncHoldsOnlyItsLane() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(4, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(lanes: 2)
        let hold = SyncHold([files[0].path, files[2].path])
        defer { hold.remove() }
        let first = Task { await worker.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { hold.held == [files[0].path] })
        // The second lane is idle: this sync ends while the first is still held (behind it, it
        // would wait for the release).
        let secondDone = Locked(false)
        let second = Task {
            defer { secondDone.set(true) }
            return await worker.sync(files[1].fd, path: files[1].path)
        }
        #expect(await eventually(timeout: 30) { secondDone.get() })
        #expect(hold.held == [files[0].path])
        #expect(await second.value == nil)
        let third = Task { await worker.sync(files[2].fd, path: files[2].path) }
        #expect(await eventually { hold.held.count == 2 })
        // Both lanes busy: the fourth waits.
        let fourth = Task { await worker.sync(files[3].fd, path: files[3].path) }
        #expect(await eventually { worker.waitingCount == 1 })
        hold.release()
        #expect(await first.value == nil)
        #expect(await third.value == nil)
        #expect(await fourth.value == nil)
        #expect(worker.waitingCount == 0)
        #expect(worker.unsyncedCount == 0)
    }

    /// Where an fsync writes nothing (tmpfs) a file is not synced: what follows its sync still
    /// runs before the job returns, on the worker.
    @Test func filesOnTmpfsAreNotSyncedAndWhatFollowsStillRuns() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(3, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(needsNoSync: { _ in true })
        let synced = Locked<[String]>([])
        let id = FaultInjection.add { call, _, path in
            guard call == .fsync, let path, path.hasPrefix(dir.path + "/") else { return nil }
            synced.withLock { $0.append(path) }
            return Errno(EIO)
        }
        defer { FaultInjection.remove(id) }
        for f in files {
            let value = try await worker.perform { () throws(HaulError) -> FileWorker.Step<String> in
                .sync(fd: f.fd, path: f.path) { error in error == nil ? f.path : "failed" }
            }
            #expect(value == f.path)
        }
        #expect(synced.get().isEmpty, "no fsync")
        #expect(worker.unsyncedCount == 3)
        #expect(worker.groupedCount == 0)
    }

    /// tmpfs is told from its file system type; the test directory's file system is told apart
    /// when it is another one.
    @Test func tmpfsIsToldFromTheFileSystemType() throws {
        let volatile: Set<Int64> = [0x0102_1994, 0x8584_58F6]  // tmpfs, ramfs
        let shm = "/dev/shm"
        if volatile.contains(Int64(haul_fs_type(shm))), let fd = try Sys.openUnnamed(inDirectory: shm) {
            defer { Sys.close(fd) }
            #expect(Sys.keepsNothingOnDisk(fd))
        }
        let dir = try TemporaryDirectory()
        let files = try files(1, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        #expect(Sys.keepsNothingOnDisk(files[0].fd) == volatile.contains(Int64(haul_fs_type(dir.path))))
    }

    @Test func aJobsSyncAndWhatFollowsRunOnTheWorkerBeforeItReturns() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(3, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker()
        let failing = files[1].path
        let id = FaultInjection.add { call, _, path in call == .fsync && path == failing ? Errno(EIO) : nil }
        defer { FaultInjection.remove(id) }
        let results = await withTaskGroup(of: (Int, String).self) { group in
            for (i, f) in files.enumerated() {
                group.addTask {
                    do throws(HaulError) {
                        let value = try await worker.perform { () throws(HaulError) -> FileWorker.Step<String> in
                            .sync(fd: f.fd, path: f.path) { error throws(HaulError) in
                                if let error { throw .fileSystem(error, "sync", path: f.path) }
                                return "renamed \(i)"
                            }
                        }
                        return (i, value)
                    } catch {
                        return (i, error.message)
                    }
                }
            }
            return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        #expect(results[0] == "renamed 0" && results[2] == "renamed 2")
        #expect(results[1]?.contains("sync") == true, "\(results)")
        #expect(worker.waitingCount == 0)
    }
}
