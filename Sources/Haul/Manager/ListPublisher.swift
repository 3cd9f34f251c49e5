import Dispatch
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Publishes a manager's list: to the subscribers of ``DownloadManager/updates`` within
/// `publishDelay` of a change (a burst of changes gives one list, the latest), to the state file
/// at most every `saveInterval` while downloads run, and both at once when the queue is idle, so
/// that the end state is there when ``DownloadManager/waitUntilIdle()`` returns (its waiters are
/// resumed after). A list is built only when something needs one: n downloads would otherwise
/// cost n² (each start, progress event and end building and writing the whole list).
final class ListPublisher: Sendable {
    typealias Item = DownloadManager.Item
    /// The queue now: whether it is idle, and its items in the order added when asked for them.
    typealias Look = @Sendable (_ withItems: Bool) -> (idle: Bool, items: [Item])

    /// Seconds a change waits for others before subscribers get the list.
    static let publishDelay = 0.1
    /// The shortest interval between two writes of the state file while downloads run.
    static let saveInterval = 1.0

    private struct Waiting {
        var subscribers: [Int: AsyncStream<[Item]>.Continuation] = [:]
        var nextSubscriber = 0
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Changes not yet published or written.
    private struct Pending {
        var publish = false
        var persist = false
        /// A flush is queued on `queue`.
        var scheduled = false
        /// When the state file was last written (monotonic seconds).
        var savedAt = -Double.infinity
    }

    private let look: Look
    let file: ManagerStateFile?
    private let waiting = Locked(Waiting())
    private let pending = Locked(Pending())
    private let queue = DispatchQueue(label: "haul.manager.changes")
    /// Held while a list is built and delivered (two flushes at once could write an older list
    /// over a newer one); counts the lists built (tests).
    private let flushing = Locked(0)

    init(file: ManagerStateFile?, look: @escaping Look) {
        self.file = file
        self.look = look
    }

    /// How many times the whole list was built for subscribers or the state file.
    var listsBuilt: Int { flushing.withLock { $0 } }

    /// The list as it changes: the current one first, then one after each burst of changes.
    func subscribe() -> AsyncStream<[Item]> {
        AsyncStream(bufferingPolicy: .bufferingNewest(16)) { continuation in
            let id = waiting.withLock { w -> Int in
                w.nextSubscriber += 1
                w.subscribers[w.nextSubscriber] = continuation
                return w.nextSubscriber
            }
            continuation.yield(look(true).items)
            continuation.onTermination = { [weak self] _ in
                _ = self?.waiting.withLock { $0.subscribers.removeValue(forKey: id) }
            }
        }
    }

    /// Returns once the queue is idle (checked after the waiter is in place, so an idle that
    /// comes in between is not missed: its flush finds the waiter).
    func waitUntilIdle() async {
        await withCheckedContinuation { c in
            waiting.withLock { $0.idleWaiters.append(c) }
            if look(false).idle { resumeIdleWaiters() }
        }
    }

    /// Resumes the idle waiters if the queue is idle now. The callers saw it idle a moment
    /// before (in `flush`, before the list was built and written), and a waiter may have come
    /// since, after items were added: `haul get -j` adds its URLs and waits while the network
    /// watcher's first change is being flushed, and was let go with nothing run (exit 0, nothing
    /// done). So the waiters are taken first and the queue looked at after: one that came after
    /// an add sees that add; waiters of a queue that is not idle go back, for the flush that
    /// finds it idle (looked at once more after they are back, since that flush may have come
    /// and gone while they were out).
    private func resumeIdleWaiters() {
        while true {
            let waiters = waiting.withLock { w -> [CheckedContinuation<Void, Never>] in
                defer { w.idleWaiters = [] }
                return w.idleWaiters
            }
            guard !waiters.isEmpty else { return }
            if look(false).idle {
                for w in waiters { w.resume() }
                return
            }
            waiting.withLock { $0.idleWaiters = waiters + $0.idleWaiters }
            if !look(false).idle { return }
        }
    }

    /// A change: `persist` whether the state file needs it; `force` publishes and writes at once
    /// whatever the state (the manager's shutdown).
    func changed(persist: Bool, force: Bool = false) {
        let saving = persist && file != nil
        let idle = look(false).idle
        let publishing = waiting.withLock { !$0.subscribers.isEmpty }
        let now = pending.withLock { p -> Bool in
            p.publish = p.publish || publishing
            p.persist = p.persist || saving
            if idle || force { return true }
            if (p.publish || p.persist) && !p.scheduled {
                p.scheduled = true
                queue.asyncAfter(deadline: .now() + Self.publishDelay) { [weak self] in self?.flush(force: false) }
            }
            return false
        }
        if now { flush(force: true) }
    }

    /// Builds the list once for what is pending; `force` (idle, or shut down) also writes the
    /// state file whatever the interval, and resumes the idle waiters afterwards.
    private func flush(force: Bool) {
        flushing.withLock { built in
            let clock = monotonicSeconds()
            let (publish, persist) = pending.withLock { p -> (Bool, Bool) in
                let save = p.persist && (force || clock - p.savedAt >= Self.saveInterval)
                defer {
                    p.publish = false
                    if save {
                        p.persist = false
                        p.savedAt = clock
                    }
                    p.scheduled = p.persist && !force
                }
                return (p.publish, save)
            }
            let subscribers = publish ? waiting.withLock { Array($0.subscribers.values) } : []
            let (idle, items) = look(persist || !subscribers.isEmpty)
            if persist || !subscribers.isEmpty { built += 1 }
            for sub in subscribers { sub.yield(items) }
            if persist { file?.save(items) }
            // A save put off by the interval is written when it is due.
            let later = pending.withLock { p -> Double? in
                guard p.scheduled, !force else { return nil }
                return max(0, p.savedAt + Self.saveInterval - clock)
            }
            if let later {
                queue.asyncAfter(deadline: .now() + later) { [weak self] in self?.flush(force: false) }
            }
            if idle { resumeIdleWaiters() }
        }
    }
}
