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

    /// Syncs `files` (opened by the caller, as a job that opens its file says) on `worker`, all
    /// at once; each one's error, in order.
    private func syncOpened(_ files: ArraySlice<(fd: Int32, path: String)>, on worker: FileWorker) async -> [Errno?] {
        let tasks = files.map { f in
            Task {
                try? await worker.perform { () throws(HaulError) -> FileWorker.Step<Errno?> in
                    .sync(fd: f.fd, path: f.path, opened: true) { $0 }
                }
            }
        }
        var results: [Errno?] = []
        for task in tasks { results.append(await task.value ?? nil) }
        return results
    }

    /// Files that formed a group while a sync was held, each opened by the job that asked, are
    /// synced by one syncfs(2) where it covers them: one call, of a file of the group (the
    /// first to reach the worker; the test's four tasks reach it in any order).
    @Test func aGroupOfFilesItsJobsOpenedIsSyncedByOneSyncfs() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(5, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(lanes: 1, oneSyncCovers: { $0.count == 4 })
        let calls = Locked<[String]>([])
        let id = FaultInjection.add { call, _, path in
            if call == .syncfs, let path, path.hasPrefix(dir.path + "/") { calls.withLock { $0.append(path) } }
            return nil
        }
        defer { FaultInjection.remove(id) }
        let hold = SyncHold([files[0].path])
        defer { hold.remove() }
        let first = Task { await worker.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { !hold.held.isEmpty })
        let rest = Task { await syncOpened(files.dropFirst(), on: worker) }
        #expect(await eventually { worker.waitingCount == 4 })
        hold.release()
        #expect(await first.value == nil)
        #expect(await rest.value == [nil, nil, nil, nil])
        #expect(calls.get().count == 1 && files.dropFirst().map(\.path).contains(calls.get()[0]), "one syncfs")
        #expect(worker.syncedTogetherCount == 4)
        #expect(worker.groupedCount == 4)
    }

    /// A syncfs that fails does not say which file it was: each file of the group is then
    /// fsync()ed, and only the one whose fsync fails fails. A group with a file its job did not
    /// open (a partial's commit) is fsync()ed file by file, as is one where syncfs covers less.
    @Test(arguments: ["failed", "not opened", "not covered"])
    func aGroupIsFsyncedFileByFileWhereOneSyncfsCannotTell(_ why: String) async throws {
        let dir = try TemporaryDirectory()
        let files = try files(4, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(lanes: 1, oneSyncCovers: { _ in why != "not covered" })
        let fsynced = Locked<Set<String>>([])
        let id = FaultInjection.add { call, _, path in
            if call == .syncfs, path?.hasPrefix(dir.path + "/") == true { return why == "failed" ? Errno(EIO) : nil }
            if call == .fsync, let path, path.hasPrefix(dir.path + "/") { fsynced.withLock { _ = $0.insert(path) } }
            return nil
        }
        defer { FaultInjection.remove(id) }
        let hold = SyncHold([files[0].path], failing: files[2].path)
        defer { hold.remove() }
        let first = Task { await worker.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { !hold.held.isEmpty })
        let rest =
            why == "not opened"
            ? Task {
                var results: [Errno?] = []
                let tasks = files.dropFirst().map { f in Task { await worker.sync(f.fd, path: f.path) } }
                for task in tasks { results.append(await task.value) }
                return results
            } : Task { await syncOpened(files.dropFirst(), on: worker) }
        #expect(await eventually { worker.waitingCount == 3 })
        hold.release()
        #expect(await first.value == nil)
        #expect(await rest.value == [nil, Errno(EIO), nil])
        #expect(fsynced.get() == Set(files.map(\.path)), "every file fsync()ed")
        #expect(worker.syncedTogetherCount == 0)
    }

    /// The flush after a group's syncfs is the last file's fsync: when it fails, that file has
    /// its error and the others are fsync()ed one by one (their bytes are not known to be on
    /// the disk).
    @Test func whenTheFsyncAfterASyncfsFailsTheLastFileHasItsErrorAndTheOthersAreFsynced() async throws {
        let dir = try TemporaryDirectory()
        let files = try files(4, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let worker = FileWorker(lanes: 1, oneSyncCovers: { _ in true })
        let fsynced = Locked<[String]>([])
        let failed = Locked(false)
        // Once, as the kernel reports a write error once to a descriptor.
        let id = FaultInjection.add { call, _, path in
            guard call == .fsync, let path, path.hasPrefix(dir.path + "/") else { return nil }
            fsynced.withLock { $0.append(path) }
            guard path == files[3].path, !failed.get() else { return nil }
            failed.set(true)
            return Errno(EIO)
        }
        defer { FaultInjection.remove(id) }
        let hold = SyncHold([files[0].path])
        defer { hold.remove() }
        let first = Task { await worker.sync(files[0].fd, path: files[0].path) }
        #expect(await eventually { !hold.held.isEmpty })
        // Handed over in order from here: the group's last file is the last one submitted.
        let results = Locked<[Int: Errno?]>([:])
        for (i, f) in files.enumerated().dropFirst() {
            worker.submit { () throws(HaulError) -> FileWorker.Step<Errno?> in
                .sync(fd: f.fd, path: f.path, opened: true) { $0 }
            } completion: { result in
                let error: Errno? =
                    switch result {
                    case .success(let error): error
                    case .failure: Errno(EINVAL)  // the job itself failed: not what is tested
                    }
                results.withLock { $0[i] = error }
            }
        }
        #expect(await eventually { worker.waitingCount == 3 })
        hold.release()
        #expect(await first.value == nil)
        #expect(await eventually { results.get().count == 3 })
        #expect(results.get() == [1: nil, 2: nil, 3: Errno(EIO)])
        #expect(Set(fsynced.get()) == Set(files.map(\.path)), "the first alone, the last's flush, the others after it")
        #expect(worker.syncedTogetherCount == 0)
    }

    /// One syncfs stands for fsyncs on ext4 and XFS under Linux 5.17 or later, for files of one
    /// file system only; never on tmpfs. /proc/meminfo tells the page cache waiting to be written.
    @Test func oneSyncfsCoversFilesOfOneExt4OrXFSFileSystem() throws {
        let dir = try TemporaryDirectory()
        let files = try files(2, in: dir)
        defer { for f in files { Sys.close(f.fd) } }
        let type = Int64(haul_fs_type(dir.path))
        let eligible = [0xEF53, 0x5846_5342].contains(type) && haul_kernel_at_least(5, 17) != 0
        let volume = Sys.sharedSyncVolume(files[0].fd)
        #expect((volume != nil) == eligible, "f_type \(String(type, radix: 16))")
        #expect(Sys.sharedSyncVolume(files[1].fd) == volume)
        #expect(Sys.unwrittenBytes() != nil)
        if Int64(haul_fs_type("/dev/shm")) == 0x0102_1994,
            let fd = (try? Sys.openUnnamed(inDirectory: "/dev/shm")) ?? nil
        {
            defer { Sys.close(fd) }
            #expect(Sys.sharedSyncVolume(fd) == nil)
            #expect(!FileWorker.syncfsCovers([files[0].fd, fd]))
        }
    }

    /// The kernel's release is compared as numbers, not text (5.10 is after 5.8, before 5.17).
    @Test func theKernelsReleaseIsComparedAsNumbers() {
        #expect(haul_release_at_least("5.10.0-28-amd64", 5, 8) != 0)
        #expect(haul_release_at_least("5.10.0-28-amd64", 5, 17) == 0)
        #expect(haul_release_at_least("5.17", 5, 17) != 0)
        #expect(haul_release_at_least("6.1.0", 5, 17) != 0)
        #expect(haul_release_at_least("4.19.0", 5, 8) == 0)
        #expect(haul_release_at_least("linux", 5, 8) == 0)
        #expect(haul_kernel_at_least(2, 6) != 0)
        #expect(haul_kernel_at_least(999, 0) == 0)
    }
}
