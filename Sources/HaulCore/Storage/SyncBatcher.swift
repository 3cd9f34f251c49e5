import Dispatch

/// Makes finished files durable in groups: the fsync()s of files that finish at about the same
/// time are issued together.
///
/// One fsync per finished file is what keeps a renamed download whole after a power loss, but
/// each costs a journal commit and a cache flush when issued alone, and a thousand small
/// downloads then spend most of their time in them. Here the syncs that arrive while one is in
/// progress wait and form the next group; a group first starts writeback of every file
/// (sync_file_range), so the file system allocates all of them in one journal transaction, then
/// fsync()s each: the first commits the transaction, the others find little left to do. Every
/// file is still synced before its caller renames it; a lone download is synced at once, as before.
///
/// Rejected: syncfs(2) for the group (it also flushes every other program's writes to the same
/// file system) and dropping the fsync as curl and aria2 do (a power loss could then leave a
/// finished name over empty or partial data, which a rerun would take as complete).
package final class SyncBatcher: Sendable {
    /// The process's batcher: downloads of every session share it.
    package static let shared = SyncBatcher()

    private struct Waiter {
        let fd: Int32
        let path: String
        let continuation: CheckedContinuation<Errno?, Never>
    }

    private struct State {
        var waiting: [Waiter] = []
        var draining = false
    }

    private let state = Locked(State())
    /// Files synced so far in groups of more than one (for tests and benchmarks).
    private let grouped = Locked(0)

    package init() {}

    /// fsync()s `fd` (the file at `path`, named in fault injection), in a group with others
    /// waiting at the same time. Returns the error, if the sync failed.
    package func sync(_ fd: Int32, path: String) async -> Errno? {
        await withCheckedContinuation { continuation in
            let start = state.withLock { state in
                state.waiting.append(Waiter(fd: fd, path: path, continuation: continuation))
                defer { state.draining = true }
                return !state.draining
            }
            if start { DispatchQueue.global().async { self.drain() } }
        }
    }

    /// How many files were synced as part of a group of two or more.
    package var groupedCount: Int { grouped.get() }

    /// How many syncs wait for the next group.
    package var waitingCount: Int { state.withLock { $0.waiting.count } }

    private func drain() {
        while true {
            let group = state.withLock { state in
                defer { state.waiting = [] }
                if state.waiting.isEmpty { state.draining = false }
                return state.waiting
            }
            if group.isEmpty { return }
            if group.count > 1 {
                for waiter in group { Sys.startWriteback(waiter.fd) }
                grouped.withLock { $0 += group.count }
            }
            for waiter in group {
                do throws(Errno) {
                    try Sys.fsync(waiter.fd, path: waiter.path)
                    waiter.continuation.resume(returning: nil)
                } catch {
                    waiter.continuation.resume(returning: error)
                }
            }
        }
    }
}
