import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The manager's queue as a state machine: events in (an item added, paused, resumed, cancelled
/// or removed; a task made for it; a task's progress or end; a change of the network; a
/// shutdown), actions out (make a task, resume, suspend or cancel one, deliver an outcome,
/// forget an item). It does no I/O and calls nothing: ``DownloadManager`` holds it behind one
/// lock and carries out the actions after leaving it. `Handle` is the task (``DownloadTask``;
/// the unit tests use a class of their own).
struct QueueStateMachine<Handle: AnyObject & Sendable>: Sendable {
    typealias Item = DownloadManager.Item
    typealias Outcome = Result<DownloadResult, HaulError>
    typealias Completion = @Sendable (Outcome) -> Void

    /// The caps and rules the queue follows (from ``DownloadManager/Configuration``).
    struct Policy: Sendable {
        var maxRunning = 3
        var maxPerHost = 2
        var waitsForConnectivity = true
        /// Finished (completed or failed) items kept in the list; the oldest leave first.
        var maxFinished = 1000
    }

    enum Action {
        /// Make a task for the item and hand it back with ``created(_:for:)``.
        case create(UUID, URL, DownloadManager.Target, DownloadOptions)
        case resume(UUID, Handle)
        /// Stop the transfer keeping its bytes; the item continues later with the same task.
        /// (`resume` and `suspend` are carried out as "run it if it is the item's current task,
        /// else stop it", so that two of them carried out in the wrong order still end right.)
        case suspend(UUID, Handle)
        /// Cancel and remove the partial file.
        case cancel(Handle)
        /// Cancel keeping the bytes (the network went away and the manager does not wait).
        case cancelKeepingBytes(Handle)
        /// Call the item's completion handler (taken out of the queue with the state change, so
        /// that a `remove` or `forget` right after cannot lose it), then report it with
        /// ``delivered(_:)``.
        case deliver(UUID, Outcome, Completion?)
        /// The item left the list (``DownloadManager/remove(_:)``, or the bound on finished items).
        case forget(UUID)
    }

    /// What a running item's transfer is.
    private enum Slot {
        /// A `.create` action is out; the task has not come back yet.
        case creating
        case task(Handle)
        var handle: Handle? {
            if case .task(let h) = self { return h }
            return nil
        }
    }

    /// A task that is no longer its item's current one, kept until its transfer has ended: a new
    /// task would start a second transfer on the same partial.
    private enum Stopped {
        /// Paused, or waiting for the network: the item continues with this task.
        case suspended(Handle)
        /// Being cancelled: the item starts again only once its end has removed or kept the files.
        case cancelling(Handle)
        var handle: Handle {
            switch self {
            case .suspended(let h), .cancelling(let h): return h
            }
        }
    }

    private(set) var policy: Policy
    private(set) var items: [UUID: Item] = [:]
    private var running: [UUID: Slot] = [:]
    private var stopped: [UUID: Stopped] = [:]
    private var options: [UUID: DownloadOptions] = [:]
    private var completions: [UUID: Completion] = [:]
    // Kept in step with the items so that scheduling never scans or sorts the whole list.
    private(set) var counts = StateCounts()
    private var runningByHost: [String: Int] = [:]
    /// Queued items in run order: higher priority first, then the order added. Entries are left
    /// behind when an item stops being queued; only one with the item's queue stamp counts.
    private var pending = RunQueue<(id: UUID, stamp: Int)>()
    /// Finished items in the order they finished, with the stamp each got (an item that is
    /// resumed and finishes again is in it twice; only the entry with its current stamp counts).
    private var finishOrder: [(id: UUID, stamp: Int)] = []
    private var finishStart = 0
    private var stamp = 0
    private(set) var sequence = 0
    private(set) var networkAllowed = true
    /// The last path that was not allowed, while it lasts (for its reason).
    private(set) var blockedPath: NetworkPath?
    private(set) var shutDown = false
    /// ``shutdown()`` has stopped every transfer: nothing more will run here.
    private var stoppedForGood = false
    /// `.deliver` actions handed out and not yet reported delivered: the queue is not idle
    /// before they have run, or a waiter could miss an outcome.
    private var delivering = 0

    init(policy: Policy) { self.policy = policy }

    var isIdle: Bool {
        if stoppedForGood { return delivering == 0 }
        return counts[.queued] == 0 && counts[.running] == 0
            && counts[.waitingForNetwork] == 0 && delivering == 0
    }

    // MARK: - Events from the caller

    /// A new item (queued), or one reloaded from the state file (any state).
    mutating func add(_ item: Item, options: DownloadOptions? = nil, completion: Completion? = nil) -> [Action] {
        var item = item
        item.state = [.running, .waitingForNetwork].contains(item.state) ? .queued : item.state
        sequence = max(sequence, item.sequence)
        if let options { self.options[item.id] = options }
        if let completion { completions[item.id] = completion }
        items[item.id] = item
        counts[item.state] += 1
        if item.state == .queued { enqueue(item.id) }
        if item.state == .completed || item.state == .failed { noteFinished(item.id) }
        return schedule()
    }

    /// The next item's sequence number (the order added).
    mutating func nextSequence() -> Int {
        sequence += 1
        return sequence
    }

    /// A new cap on downloads at once: more start now when it grew; when it shrank, the running
    /// ones finish and no new one starts until they are under it.
    mutating func setMaxRunning(_ n: Int) -> [Action] {
        policy.maxRunning = max(1, n)
        return schedule()
    }

    mutating func pause(_ id: UUID) -> [Action] {
        guard let item = items[id], [.queued, .running, .waitingForNetwork].contains(item.state) else { return [] }
        set(id, .paused)
        var actions: [Action] = []
        if let task = running.removeValue(forKey: id)?.handle {
            stopped[id] = .suspended(task)
            actions.append(.suspend(id, task))
        }
        return actions + schedule()
    }

    mutating func resume(_ id: UUID) -> [Action] {
        guard let item = items[id], item.state == .paused || item.state == .failed else { return [] }
        set(id, .queued)
        items[id]!.error = nil
        return schedule()
    }

    mutating func cancel(_ id: UUID) -> [Action] {
        guard let item = items[id], item.state != .completed, item.state != .failed else { return [] }
        var actions: [Action] = []
        if case .task(let task) = running[id] {
            // Its end reports the outcome.
            return [.cancel(task)]
        }
        // Not running (or its task not made yet): nothing will report the end, so it ends here.
        running[id] = nil
        actions.append(fail(id, HaulError(.cancelled, "cancelled")))
        if let task = stopped[id]?.handle {
            stopped[id] = .cancelling(task)
            actions.append(.cancel(task))
        }
        return actions + schedule()
    }

    /// Removes a finished item from the list; false for an item that is queued, running, paused
    /// or waiting (cancel it first) or not in the list.
    mutating func remove(_ id: UUID) -> Bool {
        guard let item = items[id], item.state == .completed || item.state == .failed else { return false }
        drop(id)
        return true
    }

    /// Moves a queued item in the run order (where it already is: nothing changes); false for
    /// one that is not queued. It takes the priority of the item it moves next to where that differs (the order
    /// is priority first), and the queued items' sequence numbers follow the new order, so a
    /// reload from the state file keeps it.
    mutating func move(_ id: UUID, _ move: DownloadManager.QueueMove) -> Bool {
        guard items[id]?.state == .queued else { return false }
        var order: [UUID] = []
        for index in pending.startIndex..<pending.endIndex where isLive(pending[index]) {
            order.append(pending[index].id)
        }
        let sequences = order.map { items[$0]!.sequence }.sorted()
        guard let (moved, priority) = move.apply(to: order.map { ($0, items[$0]!.priority) }, moving: id) else {
            return false
        }
        order = moved
        items[id]!.priority = priority
        var queue = RunQueue<(id: UUID, stamp: Int)>()
        for (other, sequence) in zip(order, sequences) {
            items[other]!.sequence = sequence
            queue.append((other, items[other]!.queueStamp))
        }
        pending = queue
        return true
    }

    /// A network change: `allowed` whether the configuration may use `path`.
    mutating func networkChanged(allowed: Bool, path: NetworkPath) -> [Action] {
        blockedPath = allowed ? nil : path
        guard networkAllowed != allowed else { return [] }
        networkAllowed = allowed
        if allowed {
            // Back in the queue in the order they were added.
            let waiting = items.values.filter { $0.state == .waitingForNetwork }.sorted { $0.sequence < $1.sequence }
            for item in waiting { set(item.id, .queued) }
            return schedule()
        }
        var actions: [Action] = []
        let affected = items.values.filter { ($0.state == .queued || $0.state == .running) && $0.needsNetwork }
            .sorted { $0.sequence < $1.sequence }
        for item in affected {
            let task = running.removeValue(forKey: item.id)?.handle
            // Both keep the partial file and its record: waiting ones continue from them later,
            // failed ones when the caller resumes them (or a later run does).
            if policy.waitsForConnectivity {
                set(item.id, .waitingForNetwork)
                if let task {
                    stopped[item.id] = .suspended(task)
                    actions.append(.suspend(item.id, task))
                }
            } else {
                actions.append(fail(item.id, Self.noPath(path)))
                if let task {
                    stopped[item.id] = .cancelling(task)
                    actions.append(.cancelKeepingBytes(task))
                }
            }
        }
        return actions + schedule()
    }

    /// Stops everything for good; the tasks to cancel keeping their bytes.
    mutating func shutdown() -> [Handle] {
        shutDown = true
        // Stopped ones too: their transfers may still be writing their records.
        defer { stopped = [:] }
        return running.values.compactMap(\.handle) + stopped.values.map(\.handle)
    }

    /// The shutdown's cancels have ended: ``isIdle`` no longer waits for anything but deliveries.
    mutating func shutdownEnded() { stoppedForGood = true }

    /// `count` `.deliver` actions have run.
    mutating func delivered(_ count: Int) { delivering -= count }

    // MARK: - Events from tasks

    /// The task a `.create` action asked for; true when the item still wants it (the caller
    /// resumes it), false when a pause, a cancel or a lost network came first.
    mutating func created(_ task: Handle, for id: UUID) -> Bool {
        guard !shutDown, case .creating = running[id], items[id]?.state == .running else { return false }
        running[id] = .task(task)
        return true
    }

    /// Whether `task` is the one `id` runs now (its events are the item's).
    func isCurrent(_ task: Handle, for id: UUID) -> Bool { running[id]?.handle === task }

    mutating func progress(_ progress: TransferProgress, for id: UUID, from task: Handle) -> Bool {
        guard isCurrent(task, for: id) else { return false }
        items[id]?.progress = progress
        return true
    }

    /// `task` ended with its file at `url`; `result` and `progress` are the task's own.
    mutating func completed(
        _ id: UUID, from task: Handle, at url: URL, result: DownloadResult?, progress: TransferProgress?
    ) -> [Action] {
        if isCurrent(task, for: id) {
            guard items[id]?.state == .running, !shutDown else { return [] }
            running[id] = nil
            return [complete(id, at: url, done: result)] + schedule()
        }
        guard case let stoppedTask? = stopped[id]?.handle, stoppedTask === task else { return [] }
        stopped[id] = nil
        // A stopped task whose transfer had every byte when the stop came completes anyway (see
        // ``DownloadTask/suspend()``): so does its item, paused, waiting for the network or
        // queued again behind the stop, since its file is in place.
        guard !shutDown, let item = items[id], [.paused, .waitingForNetwork, .queued].contains(item.state) else {
            return schedule()
        }
        items[id]!.progress = progress ?? item.progress
        items[id]!.error = nil
        return [complete(id, at: url, done: result)] + schedule()
    }

    /// `task` ended with `error`. `lostNetwork`: the network path, read now, is not allowed (a
    /// connection that died with the network can report before the path change does).
    /// `recheck` in the answer: the item waits for the network, and the manager should treat
    /// the path it read as a change.
    mutating func failed(
        _ id: UUID, from task: Handle, _ error: HaulError, lostNetwork: Bool
    ) -> (actions: [Action], recheck: Bool) {
        guard isCurrent(task, for: id) else {
            // A stopped task's end: the item may start again now.
            guard stopped[id]?.handle === task else { return ([], false) }
            stopped[id] = nil
            return (schedule(), false)
        }
        guard items[id]?.state == .running, !shutDown else { return ([], false) }
        running[id] = nil
        if error.isTransient && policy.waitsForConnectivity && items[id]!.needsNetwork
            && (!networkAllowed || lostNetwork)
        {
            // The connection died with the network: wait for it instead of failing (a new
            // task with a fresh retry budget continues from the saved bytes).
            set(id, .waitingForNetwork)
            return ([], networkAllowed)
        }
        return ([fail(id, error)] + schedule(), false)
    }

    // MARK: - Scheduling

    /// Starts queued items while the caps allow; then drops finished items past the bound.
    private mutating func schedule() -> [Action] {
        guard !shutDown else { return forgetOldFinished() }
        var actions: [Action] = []
        var index = pending.startIndex
        while index < pending.endIndex, counts[.running] < max(1, policy.maxRunning) {
            let id = pending[index].id
            guard isLive(pending[index]), let item = items[id] else {
                index = pending.remove(at: index)  // paused, cancelled or started elsewhere
                continue
            }
            if !networkAllowed && item.needsNetwork {
                // Queued while the path went away: it waits with the others.
                index = pending.remove(at: index)
                if policy.waitsForConnectivity {
                    set(id, .waitingForNetwork)
                } else {
                    let error = blockedPath.map(Self.noPath) ?? HaulError(.networkUnavailable, "no usable network path")
                    actions.append(fail(id, error))
                }
                continue
            }
            guard runningByHost[item.origin, default: 0] < max(1, policy.maxPerHost) else {
                index += 1
                continue
            }
            if case .cancelling = stopped[id] {
                index += 1  // its end schedules again
                continue
            }
            index = pending.remove(at: index)
            set(id, .running)
            if case .suspended(let task) = stopped.removeValue(forKey: id) {
                running[id] = .task(task)
                actions.append(.resume(id, task))
            } else {
                running[id] = .creating
                actions.append(.create(id, item.url, item.target, options[id] ?? DownloadOptions()))
            }
        }
        return actions + forgetOldFinished()
    }

    // MARK: - Bookkeeping

    private mutating func set(_ id: UUID, _ state: Item.State) {
        guard let item = items[id], item.state != state else { return }
        counts[item.state] -= 1
        counts[state] += 1
        if item.state == .running { runningByHost[item.origin, default: 0] -= 1 }
        if state == .running { runningByHost[item.origin, default: 0] += 1 }
        items[id]!.state = state
        if state == .queued { enqueue(id) }
        if state == .completed || state == .failed { noteFinished(id) }
    }

    private mutating func enqueue(_ id: UUID) {
        let priority = items[id]!.priority
        stamp += 1
        items[id]!.queueStamp = stamp
        // The usual case (equal priorities, added in order) appends without a scan: a scan per
        // add would make a thousand adds cost half a million dictionary lookups.
        if let last = pending.last, let lastItem = items[last.id], lastItem.priority >= priority {
            pending.append((id, stamp))
            return
        }
        pending.insert((id, stamp)) { items[$0.id].map { $0.priority < priority } ?? false }
    }

    /// Whether a run-queue entry is its item's current place: queued, and queued then.
    private func isLive(_ entry: (id: UUID, stamp: Int)) -> Bool {
        items[entry.id].map { $0.state == .queued && $0.queueStamp == entry.stamp } ?? false
    }

    /// Marks `id` failed with `error`; the delivery of that outcome.
    private mutating func fail(_ id: UUID, _ error: HaulError) -> Action {
        set(id, .failed)
        items[id]!.error = error
        delivering += 1
        return .deliver(id, .failure(error), completions.removeValue(forKey: id))
    }

    /// Marks `id` completed with its file at `url`; the delivery of its result: the task's
    /// (`done`), else bytes from its last progress.
    private mutating func complete(_ id: UUID, at url: URL, done: DownloadResult?) -> Action {
        set(id, .completed)
        items[id]!.fileURL = url
        delivering += 1
        let completion = completions.removeValue(forKey: id)
        if var done {
            done.fileURL = url
            return .deliver(id, .success(done), completion)
        }
        let bytes = items[id]!.progress?.completedBytes ?? 0
        return .deliver(id, .success(DownloadResult(fileURL: url, bytes: bytes, alreadyComplete: false)), completion)
    }

    private mutating func noteFinished(_ id: UUID) {
        stamp += 1
        items[id]!.finishStamp = stamp
        finishOrder.append((id, stamp))
        // Entries go stale when an item is resumed or removed; past twice the finished items
        // (and a few hundred), only the live ones are kept.
        let finished = counts[.completed] + counts[.failed]
        if finishOrder.count - finishStart > 2 * finished + 256 {
            finishOrder = finishOrder[finishStart...].filter { entry in
                items[entry.id].map { $0.finishStamp == entry.stamp && ($0.state == .completed || $0.state == .failed) }
                    ?? false
            }
            finishStart = 0
        }
    }

    /// Drops the oldest finished items past ``Policy/maxFinished``.
    private mutating func forgetOldFinished() -> [Action] {
        var actions: [Action] = []
        while counts[.completed] + counts[.failed] > max(0, policy.maxFinished),
            finishStart < finishOrder.count
        {
            let (id, stamp) = finishOrder[finishStart]
            finishStart += 1
            guard let item = items[id], item.finishStamp == stamp, item.state == .completed || item.state == .failed
            else { continue }  // resumed since, or removed
            drop(id)
            actions.append(.forget(id))
        }
        // Spent entries are given back once they are most of the array (amortized O(1)).
        if finishStart >= 256 && finishStart * 2 >= finishOrder.count {
            finishOrder.removeFirst(finishStart)
            finishStart = 0
        }
        return actions
    }

    private mutating func drop(_ id: UUID) {
        guard let item = items.removeValue(forKey: id) else { return }
        counts[item.state] -= 1
        options[id] = nil
        completions[id] = nil
    }

    static func noPath(_ path: NetworkPath) -> HaulError {
        HaulError(.networkUnavailable, "no usable network: \(unusable(path))")
    }

    /// Why `path` cannot carry downloads.
    static func unusable(_ path: NetworkPath) -> String { path.reason ?? "the path is not allowed" }
}
