import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A queue of downloads with caps on concurrent downloads and on downloads per host,
/// priorities, per-item progress and completion closures, an observable list, an aggregate
/// progress, and (by default) a list that survives a restart.
///
/// ```swift
/// var configuration = DownloadManager.Configuration()
/// configuration.identifier = "com.example.podcasts"
/// let manager = try DownloadManager(configuration: configuration)
/// let id = manager.add(url, to: .directory(downloads)) { progress in
///     print(progress.fraction ?? 0)
/// } completion: { result in
///     print(result)
/// }
/// await manager.waitUntilIdle()
/// ```
///
/// The queue's rules are a state machine (`QueueStateMachine`) behind one lock; the manager
/// carries out what it decides (making, resuming and stopping tasks, calling handlers) after
/// leaving that lock, and `ListPublisher` publishes the list and writes the state file.
public final class DownloadManager: Sendable {
    typealias Queue = QueueStateMachine<DownloadTask>

    /// The closures an item was added with, but its completion (the queue keeps that one).
    private struct Handlers {
        var progress: (@Sendable (TransferProgress) -> Void)?
        var events: (@Sendable (DownloadEvent) -> Void)?
    }

    /// The manager's settings.
    public let configuration: Configuration
    /// Transfers of this manager on the wire now (the network activity indicator).
    public var activity: NetworkActivity { session.activity }
    package let session: HaulSession
    let queue: Locked<Queue>
    private let handlers = Locked<[UUID: Handlers]>([:])
    private let publisher: ListPublisher
    let watcher = Locked<Task<Void, Never>?>(nil)

    /// How many times the state file was written (tests).
    package var stateFileWrites: Int { publisher.file?.writeCount ?? 0 }
    /// How many times the whole list was built for subscribers or the state file (tests).
    package var listSnapshots: Int { publisher.listsBuilt }

    /// Creates a manager; with ``Configuration/Persistence/default`` it takes the list of
    /// ``Configuration/identifier`` and continues its unfinished downloads.
    /// - Throws: ``HaulError/Code/listInUse`` while another manager (in this process or another)
    ///   holds that list; ``HaulError/Code/usage`` for an identifier of no bytes, or of more
    ///   than 200 once encoded for a file name; a file system error when the state directory
    ///   cannot be made or the list's lock taken.
    public init(configuration: Configuration = Configuration()) throws(HaulError) {
        self.configuration = configuration
        session = HaulSession(configuration: configuration.session)
        let file =
            configuration.persistence == .default
            ? try ManagerStateFile(directory: Self.stateDirectory(configuration), identifier: configuration.identifier)
            : nil
        let queue = Locked(
            Queue(
                policy: Queue.Policy(
                    maxRunning: configuration.maxConcurrentDownloads, maxPerHost: configuration.maxDownloadsPerHost,
                    waitsForConnectivity: configuration.waitsForConnectivity,
                    maxFinished: configuration.maxFinishedItems)))
        self.queue = queue
        publisher = ListPublisher(file: file) { withItems in
            queue.withLock { q in (q.isIdle, withItems ? q.items.values.sorted { $0.sequence < $1.sequence } : []) }
        }
        let loaded = file?.load { [configuration] in Self.needsNetwork($0, configuration) } ?? []
        perform(queue.withLock { q in loaded.flatMap { q.add($0) } })
        if let network = configuration.network { watch(network) }
    }

    /// A manager let go without ``shutdown()`` writes its list, stops its transfers (keeping
    /// their bytes) and holds the list until they have ended (a manager that takes it next
    /// finds their files free), then writes it again and gives it up.
    deinit {
        watcher.withLock { $0?.cancel() }
        let tasks = queue.withLock { $0.shutdown() }
        publisher.changed(persist: true, force: true)  // now, in case the process ends next
        let (queue, publisher) = (self.queue, self.publisher)
        Task.detached {
            await Self.stop(tasks)
            queue.withLock { $0.shutdownEnded() }
            publisher.changed(persist: true, force: true)
            publisher.file?.release()
        }
    }

    /// Cancels `tasks` keeping their bytes, all at once (one transfer slow to end holds up no
    /// other's cancel), and returns once every one has ended.
    private static func stop(_ tasks: [DownloadTask]) async {
        await withTaskGroup(of: Void.self) { group in
            for task in tasks { group.addTask { _ = await task.cancelProducingResumeData() } }
        }
    }

    /// The state file, when persisting: `managers/<identifier>.json` in the state directory.
    public var stateFile: URL? { publisher.file?.url }

    /// Queues a download.
    /// - Parameters:
    ///   - url: What to download.
    ///   - target: A file, or a directory for the server-suggested name.
    ///   - priority: Higher runs first.
    ///   - options: Connections, rate limit, overwrite and so on (kept in memory only).
    ///   - progress: Called with progress (rate-limited), on a background thread.
    ///   - events: Called with each event of the item's running download (started, progress,
    ///     retrying, restarted, …), as ``HaulSession/download(from:to:options:events:)`` gives
    ///     them, on a background thread.
    ///   - completion: Called once with the outcome, on a background thread.
    /// - Returns: The item's id.
    @discardableResult
    public func add(
        _ url: URL, to target: Target, priority: Int = 0, options: DownloadOptions = DownloadOptions(),
        progress: (@Sendable (TransferProgress) -> Void)? = nil,
        events: (@Sendable (DownloadEvent) -> Void)? = nil,
        completion: (@Sendable (Result<DownloadResult, HaulError>) -> Void)? = nil
    ) -> UUID {
        add(
            url, to: target, priority: priority, options: options, id: UUID.random(), events: events,
            progress: progress, completion: completion)
    }

    /// Queues a download under an id the caller chose (`haul serve` books it before the
    /// manager can report it).
    @discardableResult
    package func add(
        _ url: URL, to target: Target, priority: Int = 0, options: DownloadOptions = DownloadOptions(), id: UUID,
        events: (@Sendable (DownloadEvent) -> Void)? = nil,
        progress: (@Sendable (TransferProgress) -> Void)? = nil,
        completion: (@Sendable (Result<DownloadResult, HaulError>) -> Void)? = nil
    ) -> UUID {
        let origin = url.originKey
        let needsNetwork = Self.needsNetwork(url, configuration)
        if progress != nil || events != nil {
            handlers.withLock { $0[id] = Handlers(progress: progress, events: events) }
        }
        perform(
            queue.withLock { q in
                q.add(
                    Item(
                        id: id, url: url, target: target, priority: priority, state: .queued,
                        sequence: q.nextSequence(), origin: origin, needsNetwork: needsNetwork),
                    options: options, completion: completion)
            })
        publisher.changed(persist: true)
        return id
    }

    /// Queues a download to where ``Configuration/destination`` says.
    @discardableResult
    public func add(
        _ url: URL, priority: Int = 0, progress: (@Sendable (TransferProgress) -> Void)? = nil,
        completion: (@Sendable (Result<DownloadResult, HaulError>) -> Void)? = nil
    ) -> UUID {
        add(url, to: configuration.destination(url), priority: priority, progress: progress, completion: completion)
    }

    /// The items, in the order they were added.
    public var items: [Item] { queue.withLock { $0.items.values.sorted { $0.sequence < $1.sequence } } }

    /// One item.
    public func item(_ id: UUID) -> Item? { queue.withLock { $0.items[id] } }

    /// The items in `states`, in the order they were added: the few running ones of a long
    /// list without sorting and copying the rest (the CLI's display, ten times a second).
    package func items(in states: Set<Item.State>) -> [Item] {
        queue.withLock { q in q.items.values.filter { states.contains($0.state) } }
            .sorted { $0.sequence < $1.sequence }
    }

    /// How many items are in `state`.
    package func count(in state: Item.State) -> Int { queue.withLock { $0.counts[state] } }

    /// The list as it changes (an observable list): the current list first, then a new one
    /// within 0.1 s of changes; a burst of changes gives one list, the latest.
    public var updates: AsyncStream<[Item]> { publisher.subscribe() }

    /// All items together: bytes done and, when every size is known, the total.
    public var aggregateProgress: TransferProgress {
        var done: Int64 = 0
        var total: Int64? = 0
        var speed = 0.0
        // A sum needs no order: the items as stored, not `items` (sorted and copied).
        queue.withLock { q in
            for item in q.items.values {
                let p = item.progress
                done += p?.completedBytes ?? 0
                if let t = p?.totalBytes, total != nil { total! += t } else { total = nil }
                if item.state == .running { speed += p?.smoothedBytesPerSecond ?? 0 }
            }
        }
        return TransferProgress(
            completedBytes: done, totalBytes: total, bytesPerSecond: speed, smoothedBytesPerSecond: speed)
    }

    /// Pauses an item, keeping its bytes (a running transfer stops). An item whose transfer
    /// already had every byte completes instead, once its file is in place.
    public func pause(_ id: UUID) { act { $0.pause(id) } }

    /// Changes ``Configuration/maxConcurrentDownloads`` while the manager runs (`haul serve`'s
    /// setting): running downloads are not stopped when it shrinks.
    public func setMaxConcurrentDownloads(_ n: Int) { act { $0.setMaxRunning(n) } }

    /// The limit the manager's downloads share now (bytes per second; nil: none).
    public var maxOverallBytesPerSecond: Int64? { session.maxOverallBytesPerSecond }

    /// Changes the limit the manager's downloads share (nil or 0: none), running ones included;
    /// see ``HaulSession/setMaxOverallBytesPerSecond(_:)``.
    public func setMaxOverallBytesPerSecond(_ bytesPerSecond: Int64?) throws(HaulError) {
        try session.setMaxOverallBytesPerSecond(bytesPerSecond)
    }

    /// Puts a paused or failed item back in the queue.
    public func resume(_ id: UUID) { act { $0.resume(id) } }

    /// Cancels an item and removes its partial file.
    public func cancel(_ id: UUID) { act { $0.cancel(id) } }

    /// Moves a queued item in the run order. Priority comes first in that order: an item moved
    /// next to one of another priority takes that priority (moved to the top past a higher one,
    /// it gets the higher one). False when the item is not queued (a running one has started; a
    /// paused one goes to the back of its priority when resumed).
    @discardableResult
    public func move(_ id: UUID, _ move: QueueMove) -> Bool {
        guard queue.withLock({ $0.move(id, move) }) else { return false }
        publisher.changed(persist: true)
        return true
    }

    /// Takes a finished (completed or failed) item out of the list, and out of the state file
    /// at its next write; its file stays. False for an item that is not finished (cancel it
    /// first) or not in the list.
    @discardableResult
    public func remove(_ id: UUID) -> Bool {
        guard queue.withLock({ $0.remove(id) }) else { return false }
        handlers.withLock { $0[id] = nil }
        publisher.changed(persist: true)
        return true
    }

    /// Waits until nothing is queued or running, or until ``shutdown()`` has stopped the
    /// manager (its unfinished downloads keep their place, and nothing more runs).
    public func waitUntilIdle() async { await publisher.waitUntilIdle() }

    /// Stops running downloads, keeping their bytes and (when persisting) their place in the
    /// list, and gives the list up: a later manager with the same identifier continues them.
    /// Returns once every transfer has ended and the list is written.
    public func shutdown() async {
        let tasks = queue.withLock { $0.shutdown() }
        watcher.withLock { $0?.cancel() }
        await Self.stop(tasks)
        queue.withLock { $0.shutdownEnded() }  // waitUntilIdle() ends: nothing more will run
        // Written before this returns, even with a completion handler running.
        publisher.changed(persist: true, force: true)
        publisher.file?.release()
    }

    // MARK: - Carrying out the queue's decisions

    /// Runs `event` on the queue, then what it decided, then publishes the change.
    func act(_ event: (inout Queue) -> [Queue.Action]) {
        perform(queue.withLock(event))
        publisher.changed(persist: true)
    }

    /// Carries out `actions` in order, outside the queue's lock.
    func perform(_ actions: [Queue.Action]) {
        var delivered = 0
        for action in actions {
            switch action {
            case .create(let id, let url, let target, let options):
                let task = session.downloadTask(with: url, to: target.destination, options: options)
                task.onEvent { [weak self, weak task] event in
                    guard let self, let task else { return }
                    self.handle(event, for: id, from: task)
                }
                if queue.withLock({ $0.created(task, for: id) }) { steer(task, for: id) }
            case .resume(let id, let task), .suspend(let id, let task):
                steer(task, for: id)
            case .cancel(let task):
                task.cancel()
            case .cancelKeepingBytes(let task):
                Task { _ = await task.cancelProducingResumeData() }
            case .deliver(_, let outcome, let completion):
                completion?(outcome)
                delivered += 1
            case .forget(let id):
                handlers.withLock { $0[id] = nil }
            }
        }
        if delivered > 0 { queue.withLock { $0.delivered(delivered) } }
    }

    /// Runs `task` if it is its item's current task, else stops it, keeping its bytes, and asks
    /// again until the answer holds after the act: a pause and a resume carried out on two
    /// threads in either order end with what the queue said last. No lock is held while the
    /// task acts (its `suspend()` calls event handlers, which may call the manager).
    private func steer(_ task: DownloadTask, for id: UUID) {
        var run = queue.withLock { $0.isCurrent(task, for: id) }
        while true {
            if run { task.resume() } else { task.suspend() }
            let now = queue.withLock { $0.isCurrent(task, for: id) }
            if now == run { return }
            run = now
        }
    }

    /// An event of `task`; the item's only while that is its current task (a task that was
    /// paused and then cancelled reports its end after a new one may have started).
    private func handle(_ event: DownloadEvent, for id: UUID, from task: DownloadTask) {
        if case .progress(let p) = event {
            // The most frequent event: one look at the queue, which also says whether it is current.
            guard queue.withLock({ $0.progress(p, for: id, from: task) }) else { return }
            let handlers = handlers.withLock { $0[id] }
            handlers?.events?(event)
            handlers?.progress?(p)
            publisher.changed(persist: false)
            return
        }
        let current = queue.withLock { $0.isCurrent(task, for: id) }
        if current { handlers.withLock { $0[id] }?.events?(event) }
        switch event {
        case .completed(let url):
            let (result, progress) = (task.result, task.progress)
            act { $0.completed(id, from: task, at: url, result: result, progress: progress) }
        case .failed(let error):
            failed(id, from: task, error, current: current)
        default:
            break
        }
    }
}

/// Runs `body` with a manager and always shuts it down afterwards (running downloads stop,
/// keeping their bytes), like `withHTTPClient`.
/// - Throws: What the manager's ``DownloadManager/init(configuration:)`` or `body` throws.
public func withDownloadManager<R>(
    configuration: DownloadManager.Configuration = DownloadManager.Configuration(),
    _ body: (DownloadManager) async throws -> R
) async throws -> R {
    let manager = try DownloadManager(configuration: configuration)
    do {
        let result = try await body(manager)
        await manager.shutdown()
        return result
    } catch {
        await manager.shutdown()
        throw error
    }
}
