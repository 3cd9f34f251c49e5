import Dispatch

/// The process's file-system worker: partials of finished small downloads are created and
/// written here, and every finished download is synced and renamed into place here.
///
/// Two threads while there is work (the worker on Dispatch's global queue, the syncer on a serial
/// queue of its own: see `syncerQueue`). The worker runs jobs in order: creates,
/// writes, renames. One worker, not one thread per download: files created at the same time in
/// one directory contend for its lock, and on ext4 the waiter spins. The syncer takes the files
/// that jobs hand over for syncing, in groups, while the worker goes on (the disk works on both
/// at once), and hands each file back to the worker for its rename.
///
/// Grouped syncs: one fsync per finished file is what keeps a renamed download whole after a
/// power loss, but each costs a journal commit and a cache flush when issued alone. Files handed
/// over while the syncer is busy form its next group: writeback of each is started first
/// (sync_file_range), so the file system allocates all of them in one journal transaction, then
/// each is fsync()ed (the first commits the transaction, the others find little left to do). A
/// lone download is synced at once. Every file is synced before it is renamed.
///
/// Few hops: a small download's create, write, sync and rename are one job, so its task leaves
/// Swift's pool once and comes back once (instead of once per step).
///
/// Rejected: syncfs(2) per group (it also flushes every other program's writes on that file
/// system); no fsync, as curl and aria2 do (a power loss could leave a finished name over empty
/// or partial data, which a rerun would take as complete).
package final class FileWorker: Sendable {
    /// The worker of this process: downloads of every session share it.
    package static let shared = FileWorker()

    /// What a job asks for when its part on the worker is done.
    package enum Step<Value: Sendable> {
        /// Finished with this value.
        case done(Value)
        /// Sync `fd` (the file at `path`, named in fault injection) in a group, then finish with
        /// `then` on the worker, given the sync's error if it failed.
        case sync(fd: Int32, path: String, then: @Sendable (Errno?) throws(HaulError) -> Value)
    }

    /// A job's sync request, erased to a common type.
    private struct PendingSync: Sendable {
        let fd: Int32
        let path: String
        let finish: @Sendable (Errno?) -> Void
    }

    /// Work for one of the two threads, and whether that thread is draining it.
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

    private struct State {
        var jobs = Queue<@Sendable () -> PendingSync?>()
        var syncs = Queue<PendingSync>()
    }

    private let state = Locked(State())
    /// The syncer's queue is a serial one of its own (``Sys/ownBlockingQueue(_:)``): a sync that
    /// waits for a slow disk must not hold one of the threads Swift's tasks run on. The worker
    /// (creates, writes, renames: page-cache work) stays on the global queue, whose thread is
    /// often the one that just queued the job: a serial queue of its own would double the
    /// context switches.
    private let syncerQueue = Sys.ownBlockingQueue("haul.file-syncer")
    /// Files synced so far in groups of more than one (for tests and benchmarks).
    private let grouped = Locked(0)

    package init() {}

    /// How many files were synced as part of a group of two or more.
    package var groupedCount: Int { grouped.get() }

    /// How many syncs wait for the next group.
    package var waitingCount: Int { state.withLock { $0.syncs.items.count } }

    /// Runs `body` on the worker instead of Swift's cooperative pool; when it asks for a sync,
    /// the file is synced in a group and its `then` runs on the worker before this returns.
    package func perform<T: Sendable>(
        _ body: @escaping @Sendable () throws(HaulError) -> Step<T>
    ) async throws(HaulError) -> T {
        let result = await withCheckedContinuation { (c: CheckedContinuation<Result<T, HaulError>, Never>) in
            enqueue {
                let step: Step<T>
                do throws(HaulError) { step = try body() } catch {
                    c.resume(returning: .failure(error))
                    return nil
                }
                switch step {
                case .done(let value):
                    c.resume(returning: .success(value))
                    return nil
                case .sync(let fd, let path, let then):
                    return PendingSync(fd: fd, path: path) { error in
                        do throws(HaulError) { c.resume(returning: .success(try then(error))) } catch {
                            c.resume(returning: .failure(error))
                        }
                    }
                }
            }
        }
        return try result.get()
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
            let syncs = jobs.compactMap { $0() }
            if syncs.isEmpty { continue }
            if state.withLock({ $0.syncs.add(syncs) }) { syncerQueue.async { self.sync() } }
        }
    }

    /// The syncer: syncs what the worker passed on since its last group, while the worker goes
    /// on creating and writing (the disk works on both at once), then hands each file back to
    /// the worker for what follows its sync (the rename: one thread in the directory).
    private func sync() {
        while true {
            let group = state.withLock { $0.syncs.take() }
            if group.isEmpty { return }
            if group.count > 1 {
                for pending in group { Sys.startWriteback(pending.fd) }
                grouped.withLock { $0 += group.count }
            }
            for pending in group {
                let error: Errno?
                do throws(Errno) {
                    try Sys.fsync(pending.fd, path: pending.path)
                    error = nil
                } catch let e {
                    error = e
                }
                let finish = pending.finish
                enqueue {
                    finish(error)
                    return nil
                }
            }
        }
    }
}
