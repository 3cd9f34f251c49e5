import Dispatch

/// The process's file-system worker: partials of finished small downloads are created and
/// written here, and every finished download is synced and renamed into place here.
///
/// The worker runs on Dispatch's global queue, the syncers on serial queues of their own (see
/// `syncerQueues`). The worker runs jobs in order: creates, writes, renames. One worker, not one
/// thread per download: files created at the same time in one directory contend for its lock,
/// and on ext4 the waiter spins. The syncers take the files that jobs hand over for syncing, in
/// groups, while the worker goes on (the disk works on both at once), and hand each file back to
/// the worker for its rename.
///
/// Grouped syncs: one fsync per finished file is what keeps a renamed download whole after a
/// power loss, but each costs a journal commit and a cache flush when issued alone. Files are
/// handed to an idle syncer (a lane) at once, so up to four fsyncs are in flight and the file
/// system joins them in its commits and flushes; with every lane busy, files handed over form
/// the next group of the least loaded one: writeback of each is started first
/// (sync_file_range), so the file system allocates all of them in one journal transaction, then
/// each is fsync()ed (the first commits the transaction, the others find little left to do). A
/// lone download is synced at once. Every file on a disk is synced before it is renamed. On
/// tmpfs and ramfs, whose fsync writes nothing and returns at once, a file is not synced at all:
/// the worker goes straight on to what follows, without a hand-over to a syncer and back or a
/// system call that does nothing.
///
/// Few hops: a small download's create, write, sync and rename are one job, so its task leaves
/// Swift's pool once and comes back once (instead of once per step).
///
/// One syncfs(2) for a group: where every file of a group was opened by the job that asked for
/// its sync (a small file written whole: they come in the order they were opened), all are on
/// one ext4 or XFS file system under Linux 5.17 or later, and no more than 64 MiB of the page
/// cache waits to be written, one syncfs of the first file's file system and an fsync of the
/// last stand for their fsyncs: the syncfs writes every dirty page and inode there at once and
/// reports any write error since that first file was opened, the fsync flushes the disk's cache
/// after it (a failure is then told file by file, by their fsyncs). Where each fsync writes its
/// inode and flushes the cache alone (a journal-less ext4), that is most of a small file's sync
/// (measured in docs/resume-record.md).
///
/// Rejected: syncfs for any group (it writes every other program's dirty data on that file
/// system, and would wait for a large copy in progress: hence the 64 MiB bound); syncfs on
/// btrfs (a whole transaction commit where an fsync writes its tree log) and network file
/// systems; no fsync, as curl and aria2 do (a power loss could leave a finished name over empty
/// or partial data, which a rerun would take as complete).
package final class FileWorker: Sendable {
    /// The worker of this process: downloads of every session share it.
    package static let shared = FileWorker()

    /// What a job asks for when its part on the worker is done.
    package enum Step<Value: Sendable> {
        /// Finished with this value.
        case done(Value)
        /// Sync `fd` (the file at `path`, named in fault injection) in a group, then finish with
        /// `then` on the worker, given the sync's error if it failed. `opened`: the job opened
        /// the file itself (so files are handed over in the order they were opened), which lets
        /// one syncfs(2) stand for its fsync.
        case sync(fd: Int32, path: String, opened: Bool = false, then: @Sendable (Errno?) throws(HaulError) -> Value)
    }

    /// A job's sync request, erased to a common type.
    private struct PendingSync: Sendable {
        let fd: Int32
        let path: String
        /// Opened by the job that asked for the sync.
        let opened: Bool
        let finish: @Sendable (Errno?) -> Void
    }

    /// Work for a thread (the worker, a syncer), and whether that thread is draining it.
    private struct Queue<Item: Sendable>: Sendable {
        var items: [Item] = []
        var draining = false

        /// Adds `more`; true when nothing drains the queue (the caller starts the thread).
        mutating func add(_ more: [Item]) -> Bool {
            items += more
            defer { draining = true }
            return !draining
        }

        /// Everything queued; none (and the thread stops draining) when the queue is empty.
        mutating func take() -> [Item] {
            defer { items = [] }
            if items.isEmpty { draining = false }
            return items
        }
    }

    /// A syncer's files: those waiting for its next group, and how many of its current group
    /// are not synced yet.
    private struct Lane: Sendable {
        var waiting = Queue<PendingSync>()
        var syncing = 0

        var load: Int { waiting.items.count + syncing }
    }

    private struct State {
        var jobs = Queue<@Sendable () -> PendingSync?>()
        var lanes: [Lane]

        /// The lane for syncs handed over now: the least loaded, the first of equals. A sync
        /// never waits behind another while a lane has none (a lane whose thread has not seen
        /// that its work is done counts as free); with every lane busy, the files form the next
        /// group of the one with the fewest left.
        func laneForNewSyncs() -> Int {
            lanes.indices.min { lanes[$0].load < lanes[$1].load } ?? 0
        }
    }

    private let state: Locked<State>
    /// The syncers' queues are serial ones of their own (``Sys/ownBlockingQueue(_:)``): a sync
    /// that waits for a slow disk must not hold one of the threads Swift's tasks run on. The
    /// worker (creates, writes, renames: page-cache work) stays on the global queue, whose
    /// thread is often the one that just queued the job: a serial queue of its own would double
    /// the context switches.
    private let syncerQueues: [DispatchQueue]
    /// Files synced so far in groups of more than one (for tests and benchmarks).
    private let grouped = Locked(0)
    /// Files synced by one syncfs(2) for their group (for tests and benchmarks).
    private let syncedTogether = Locked(0)
    /// Whether one syncfs(2) of the first file's file system may stand for the fsyncs of
    /// the files given (two or more, opened in that order by the jobs that asked).
    private let oneSyncCovers: @Sendable ([Int32]) -> Bool

    /// Whether a file is on a file system whose fsync writes nothing (tmpfs): not synced, what
    /// follows its sync runs at once on the worker.
    private let needsNoSync: @Sendable (Int32) -> Bool
    /// Files not synced for that reason (for tests).
    private let unsynced = Locked(0)

    /// A worker whose syncs run on up to `lanes` threads at once (at least one); `needsNoSync`
    /// says which files are not synced at all: by default those on tmpfs and ramfs, unless a
    /// fault injection hook is in place (tests fail or hold syncs wherever their files are).
    /// `oneSyncCovers` says when a group's files are synced by one syncfs(2): by default
    /// ``syncfsCovers(_:)``, unless a fault injection hook is in place.
    package init(
        lanes: Int = 4,
        needsNoSync: @escaping @Sendable (Int32) -> Bool = { !FaultInjection.isActive && Sys.keepsNothingOnDisk($0) },
        oneSyncCovers: @escaping @Sendable ([Int32]) -> Bool = { !FaultInjection.isActive && syncfsCovers($0) }
    ) {
        let count = max(1, lanes)
        state = Locked(State(lanes: Array(repeating: Lane(), count: count)))
        syncerQueues = (0..<count).map { _ in Sys.ownBlockingQueue("haul.file-syncer") }
        self.needsNoSync = needsNoSync
        self.oneSyncCovers = oneSyncCovers
    }

    /// At most this much of the system's page cache may wait to be written when one syncfs(2)
    /// stands for a group's fsyncs: it writes every program's dirty data on the file system.
    package static let unwrittenLimit: Int64 = 64 << 20

    /// Whether one syncfs(2) can stand for the fsyncs of `fds`: all on one ext4 or XFS file
    /// system (``Sys/sharedSyncVolume(_:)``), and no more than ``unwrittenLimit`` of the page
    /// cache waiting to be written (theirs included) when asked.
    package static func syncfsCovers(_ fds: [Int32]) -> Bool {
        guard let volume = fds.first.flatMap(Sys.sharedSyncVolume) else { return false }
        for fd in fds.dropFirst() where Sys.sharedSyncVolume(fd) != volume { return false }
        guard let unwritten = Sys.unwrittenBytes() else { return false }
        return unwritten <= unwrittenLimit
    }

    /// How many files were synced as part of a group of two or more.
    package var groupedCount: Int { grouped.get() }

    /// How many files were synced by one syncfs(2) for their group.
    package var syncedTogetherCount: Int { syncedTogether.get() }

    /// How many files were not synced, their fsync writing nothing.
    package var unsyncedCount: Int { unsynced.get() }

    /// How many syncs wait for a lane's next group.
    package var waitingCount: Int { state.withLock { $0.lanes.reduce(0) { $0 + $1.waiting.items.count } } }

    /// Runs `body` on the worker instead of Swift's cooperative pool; when it asks for a sync,
    /// the file is synced in a group and its `then` runs on the worker before this returns.
    package func perform<T: Sendable>(
        _ body: @escaping @Sendable () throws(HaulError) -> Step<T>
    ) async throws(HaulError) -> T {
        let result = await withCheckedContinuation { (c: CheckedContinuation<Result<T, HaulError>, Never>) in
            submit(body) { c.resume(returning: $0) }
        }
        return try result.get()
    }

    /// ``perform(_:)`` for a caller that is not a task: `completion` is called once, on the
    /// worker or a syncer, with the job's value or error.
    package func submit<T: Sendable>(
        _ body: @escaping @Sendable () throws(HaulError) -> Step<T>,
        completion: @escaping @Sendable (Result<T, HaulError>) -> Void
    ) {
        enqueue {
            let step: Step<T>
            do throws(HaulError) { step = try body() } catch {
                completion(.failure(error))
                return nil
            }
            switch step {
            case .done(let value):
                completion(.success(value))
                return nil
            case .sync(let fd, let path, let opened, let then):
                return PendingSync(fd: fd, path: path, opened: opened) { error in
                    do throws(HaulError) { completion(.success(try then(error))) } catch {
                        completion(.failure(error))
                    }
                }
            }
        }
    }

    /// fsync()s `fd` in a group; returns the error, if any.
    package func sync(_ fd: Int32, path: String) async -> Errno? {
        let result = try? await perform { () throws(HaulError) -> Step<Errno?> in
            .sync(fd: fd, path: path) { error in error }
        }
        return result ?? nil
    }

    private func enqueue(_ job: @escaping @Sendable () -> PendingSync?) {
        if state.withLock({ $0.jobs.add([job]) }) { DispatchQueue.global().async { self.work() } }
    }

    /// The worker: runs the jobs in order and passes their syncs on to the syncer.
    private func work() {
        while true {
            let jobs = state.withLock { $0.jobs.take() }
            if jobs.isEmpty { return }
            var syncs: [PendingSync] = []
            for pending in jobs.compactMap({ $0() }) {
                // Where an fsync writes nothing, neither the hand-over to a syncer and back (two
                // thread wake-ups for each file) nor the call itself does anything.
                guard needsNoSync(pending.fd) else {
                    syncs.append(pending)
                    continue
                }
                unsynced.withLock { $0 += 1 }
                pending.finish(nil)
            }
            if syncs.isEmpty { continue }
            let (lane, start) = state.withLock { s in
                let lane = s.laneForNewSyncs()
                return (lane, s.lanes[lane].waiting.add(syncs))
            }
            if start { syncerQueues[lane].async { self.sync(lane: lane) } }
        }
    }

    /// The syncer: syncs what the worker passed on since its last group, while the worker goes
    /// on creating and writing (the disk works on both at once), then hands each file back to
    /// the worker for what follows its sync (the rename: one thread in the directory).
    private func sync(lane: Int) {
        while true {
            let group = state.withLock { s in
                let group = s.lanes[lane].waiting.take()
                s.lanes[lane].syncing = group.count
                return group
            }
            if group.isEmpty { return }
            if group.count > 1 {
                grouped.withLock { $0 += group.count }
                if let errors = syncTogether(group) {
                    for (pending, error) in zip(group, errors) { handBack(pending, lane: lane, error: error) }
                    continue
                }
                for pending in group { Sys.startWriteback(pending.fd) }
            }
            for pending in group { handBack(pending, lane: lane, error: Self.fsync(pending)) }
        }
    }

    /// Syncs `group` with one syncfs(2) of the file system of its first file and an fsync of its
    /// last (``Sys/syncFileSystem(_:paths:)``), where that stands for their fsyncs
    /// (``syncfsCovers(_:)``); each file's error, or nil when it does not stand for them or the
    /// syncfs failed: each file's fsync then tells which of them it was. When the last file's
    /// fsync fails, that file has its error and the others are fsync()ed one by one.
    ///
    /// Why the first file's descriptor: syncfs reports a write error that happened on the file
    /// system since that descriptor was opened, and the files of a group that the jobs opened
    /// themselves come in the order they were opened. A file opened before (a partial's commit)
    /// is always synced on its own.
    private func syncTogether(_ group: [PendingSync]) -> [Errno?]? {
        guard group.allSatisfy(\.opened), oneSyncCovers(group.map(\.fd)) else { return nil }
        let lastError: Errno?
        do throws(Errno) { lastError = try Sys.syncFileSystem(group.map(\.fd), paths: group.map(\.path)) } catch {
            return nil
        }
        if let lastError { return group.dropLast().map(Self.fsync) + [lastError] }
        syncedTogether.withLock { $0 += group.count }
        return Array(repeating: nil, count: group.count)
    }

    /// A synced file goes back to the worker for what follows (one thread in the directory).
    private func handBack(_ pending: PendingSync, lane: Int, error: Errno?) {
        state.withLock { $0.lanes[lane].syncing -= 1 }
        let finish = pending.finish
        enqueue {
            finish(error)
            return nil
        }
    }

    /// fsync()s the file; returns the error, if any.
    private static func fsync(_ pending: PendingSync) -> Errno? {
        do throws(Errno) {
            try Sys.fsync(pending.fd, path: pending.path)
            return nil
        } catch {
            return error
        }
    }
}
