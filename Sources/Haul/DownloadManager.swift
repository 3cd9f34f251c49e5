import Foundation
import HaulCore

/// A queue of downloads with caps on concurrent downloads and on downloads per host,
/// priorities, per-item progress and completion closures, an observable list, an aggregate
/// progress, and (by default) a list that survives a restart.
///
/// ```swift
/// let manager = DownloadManager()
/// let id = manager.add(url, to: .directory(downloads)) { progress in
///     print(progress.fraction ?? 0)
/// } completion: { result in
///     print(result)
/// }
/// await manager.waitUntilIdle()
/// ```
public final class DownloadManager: Sendable {
    /// How the manager behaves.
    public struct Configuration: Sendable {
        /// What survives a restart.
        public enum Persistence: Sendable, Equatable {
            /// The list of downloads is kept in ``Configuration/stateDirectory`` and reloaded by
            /// the next manager with the same directory; unfinished items continue from their bytes.
            case `default`
            /// Nothing but the output files (and the partial files of unfinished downloads).
            case ephemeral
        }
        /// Downloads running at once (a value below 1 counts as 1).
        public var maxConcurrentDownloads = 3
        /// Downloads running at once against one host (scheme, host and port). Each may use
        /// several connections (``DownloadOptions/connections``); the cap on connections is
        /// ``HaulConfiguration/maxConnectionsPerHost`` in ``session``. A value below 1 counts as 1.
        public var maxDownloadsPerHost = 2
        /// What survives a restart.
        public var persistence = Persistence.default
        /// Where the list is kept: default `$XDG_STATE_HOME/haul` (else `~/.local/state/haul`).
        public var stateDirectory: URL?
        /// The session settings every download uses.
        public var session = HaulConfiguration()
        /// Watches the network when set (e.g. a ``NetworkMonitor``): downloads stop, keeping their
        /// bytes, while the path is unsatisfied or not allowed, and continue when it comes back.
        public var network: (any NetworkPathSource)?
        /// Whether cellular paths may be used (default true).
        public var allowsCellularAccess = true
        /// Whether expensive (cellular or metered) paths may be used (default true).
        public var allowsExpensiveNetworkAccess = true
        /// Whether downloads from loopback hosts (`localhost`, 127.0.0.0/8, `::1`) wait for the
        /// network too (default false: a local server needs no default route).
        public var appliesNetworkPolicyToLoopback = false
        /// Wait for a usable path instead of failing (default true; false fails the running and
        /// queued downloads when the path goes away).
        public var waitsForConnectivity = true
        /// Where ``DownloadManager/add(_:priority:progress:completion:)`` puts a URL (default: the
        /// server-suggested name in ``HaulSession/defaultDownloadDirectory``).
        public var destination: @Sendable (URL) -> Target = { _ in .directory(HaulSession.defaultDownloadDirectory) }
        /// Creates the defaults.
        public init() {}
    }

    /// Where an item goes; a file or a directory (server-suggested name).
    public enum Target: Codable, Sendable, Equatable {
        /// Exactly this file.
        case file(URL)
        /// This directory, under the server-suggested name.
        case directory(URL)
        var destination: DownloadDestination {
            switch self {
            case .file(let u): return .file(u)
            case .directory(let u): return .directory(u)
            }
        }
    }

    /// One download in the queue.
    public struct Item: Sendable, Identifiable, Equatable {
        /// Where the item is.
        public enum State: String, Codable, Sendable, Equatable {
            /// Waiting for a free slot.
            case queued
            /// Downloading.
            case running
            /// Paused by ``DownloadManager/pause(_:)``.
            case paused
            /// Finished; see ``Item/fileURL``.
            case completed
            /// Failed or cancelled; see ``Item/error``.
            case failed
            /// Stopped (bytes kept) because the network is gone or not allowed; it continues by
            /// itself when the path allows it again.
            case waitingForNetwork
        }
        /// Stable identity (also across restarts).
        public let id: UUID
        /// The URL (without credentials once reloaded from disk).
        public var url: URL
        /// Where it goes.
        public var target: Target
        /// Higher runs first; equal priorities run in the order added.
        public var priority: Int
        /// Its state.
        public var state: State
        /// The latest progress.
        public var progress: TransferProgress?
        /// The finished file.
        public var fileURL: URL?
        /// Why it failed.
        public var error: HaulError?
        var sequence: Int
        /// `url.originKey`, worked out once: the per-host count looks it up at every change of
        /// state, and URL parses its text again for each look.
        var origin: String
    }

    private struct Stored: Codable {
        var version = 1
        var items: [StoredItem]
    }

    private struct StoredItem: Codable {
        var id: UUID
        var url: String
        var target: Target
        var priority: Int
        var state: Item.State
        var fileURL: URL?
        var sequence: Int
    }

    private typealias Completion = @Sendable (Result<DownloadResult, HaulError>) -> Void

    private struct Inner {
        var items: [UUID: Item] = [:]
        var tasks: [UUID: DownloadTask] = [:]
        /// Tasks suspended by a pause or a lost network, kept so that the item continues with the
        /// same task: its resume waits until the stopped transfer has ended (and written its
        /// record), where a new task would start a second transfer on the same partial. Tasks
        /// that a lost network cancels (`waitsForConnectivity == false`) stay here until their
        /// cancel has ended, for the same reason.
        var stopped: [UUID: DownloadTask] = [:]
        /// Items whose stopped task is still being cancelled: they start once it has ended (its
        /// end removes the files, which must not be the new task's).
        var awaitingStop: Set<UUID> = []
        var progressHandlers: [UUID: @Sendable (TransferProgress) -> Void] = [:]
        var eventHandlers: [UUID: @Sendable (DownloadEvent) -> Void] = [:]
        var options: [UUID: DownloadOptions] = [:]
        var completionHandlers: [UUID: Completion] = [:]
        var sequence = 0
        var subscribers: [Int: AsyncStream<[Item]>.Continuation] = [:]
        var nextSubscriber = 0
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        var shutDown = false
        var networkAllowed = true
        /// The last path that was not allowed, while it lasts (for its reason).
        var blockedPath: NetworkPath?
        var watcher: Task<Void, Never>?
        // Kept in step with the items so that scheduling never scans or sorts the whole list.
        var counts: [Item.State: Int] = [:]
        var runningByHost: [String: Int] = [:]
        /// Queued items in run order: higher priority first, then the order added.
        var pending = RunQueue()

        /// Completion handlers taken out to be called (outside the lock) and not yet returned:
        /// the manager is not idle before they have run, or a waiter could miss an outcome.
        var completing = 0

        /// Removes `id`'s completion handler, to be called outside the lock by ``deliver(_:)``;
        /// counted in `completing` until then.
        mutating func takeCompletion(_ id: UUID) -> Completion? {
            guard let completion = completionHandlers.removeValue(forKey: id) else { return nil }
            completing += 1
            return completion
        }

        /// Marks `id` completed with its file at `url`; the result for its completion handler:
        /// its task's (`done`), else bytes from its last progress. (Always the latter before: a
        /// file already complete on disk, which sends no progress, was 0 bytes, not already
        /// complete.)
        mutating func complete(_ id: UUID, fileAt url: URL, done: DownloadResult?) -> DownloadResult {
            set(id, .completed)
            items[id]!.fileURL = url
            if var done {
                done.fileURL = url
                return done
            }
            let bytes = items[id]!.progress?.completedBytes ?? 0
            return DownloadResult(fileURL: url, bytes: bytes, alreadyComplete: false)
        }

        /// ``shutdown()`` has stopped every transfer: nothing more will run here.
        var stoppedForGood = false

        var isIdle: Bool {
            if stoppedForGood { return completing == 0 }
            return counts[.queued, default: 0] == 0 && counts[.running, default: 0] == 0
                && counts[.waitingForNetwork, default: 0] == 0 && completing == 0
        }

        mutating func insert(_ item: Item) {
            items[item.id] = item
            counts[item.state, default: 0] += 1
            if item.state == .running { runningByHost[item.origin, default: 0] += 1 }
            if item.state == .queued { enqueue(item.id) }
        }

        mutating func set(_ id: UUID, _ state: Item.State) {
            guard let item = items[id], item.state != state else { return }
            counts[item.state, default: 0] -= 1
            counts[state, default: 0] += 1
            let host = item.origin
            if item.state == .running { runningByHost[host, default: 0] -= 1 }
            if state == .running { runningByHost[host, default: 0] += 1 }
            items[id]!.state = state
            if state == .queued { enqueue(id) }
        }

        private mutating func enqueue(_ id: UUID) {
            let priority = items[id]!.priority
            // The usual case (equal priorities, added in order) appends without a scan: a scan
            // per add made a thousand adds cost half a million dictionary lookups.
            if let last = pending.last, let lastItem = items[last], lastItem.priority >= priority {
                pending.append(id)
                return
            }
            pending.insert(id) { items[$0].map { $0.priority < priority } ?? false }
        }
    }

    /// The manager's settings.
    public let configuration: Configuration
    /// Transfers of this manager on the wire now (the network activity indicator).
    public var activity: NetworkActivity { session.activity }
    private let session: HaulSession
    private let inner = Locked(Inner())
    /// Held while the state file is written; counts the writes. (Not `Locked(())`:
    /// ThreadSanitizer reported the inout access to a zero-sized value as a race.)
    private let saving = Locked(0)
    /// Sorted lists built for `updates` and the state file (tests).
    private let snapshots = Locked(0)
    /// Changes waiting to be published, and the queue that publishes them (``changed(persist:)``).
    private let pending = Locked(Pending())
    private let flushQueue = DispatchQueue(label: "haul.manager.changes")
    /// Held while a list is built and delivered: two flushes at once could write an older list
    /// over a newer one.
    private let flushing = Locked(0)

    /// How many times the state file was written (tests).
    package var stateFileWrites: Int { saving.get() }
    /// How many times the whole list was built for subscribers or the state file (tests).
    package var listSnapshots: Int { snapshots.get() }

    /// Creates a manager; with ``Configuration/Persistence/default`` it reloads the list kept by
    /// an earlier manager and continues unfinished downloads.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        session = HaulSession(configuration: configuration.session)
        if configuration.persistence == .default { load() }
        schedule()
        if let network = configuration.network {
            let watcher = Task { [weak self] in
                for await path in network.paths {
                    guard let self else { return }
                    self.networkChanged(path)
                }
            }
            inner.withLock { $0.watcher = watcher }
        }
    }

    deinit { inner.withLock { $0.watcher?.cancel() } }

    /// Whether this configuration may use `path`.
    func allows(_ path: NetworkPath) -> Bool {
        Self.allows(
            path, cellular: configuration.allowsCellularAccess, expensive: configuration.allowsExpensiveNetworkAccess)
    }

    /// Whether a satisfied `path` is allowed with these settings.
    package static func allows(_ path: NetworkPath, cellular: Bool, expensive: Bool) -> Bool {
        guard path.status == .satisfied, let primary = path.primary else { return false }
        if primary.kind == .cellular && !cellular { return false }
        if path.isExpensive && !expensive { return false }
        return true
    }

    /// Whether `url` needs the network path: loopback hosts (`localhost`, 127.0.0.0/8, `::1`)
    /// do not, so the policy never holds a download from this machine.
    private func needsNetwork(_ url: URL) -> Bool {
        configuration.appliesNetworkPolicyToLoopback || Self.needsNetwork(url)
    }

    /// Whether a non-loopback host is named by `url`.
    package static func needsNetwork(_ url: URL) -> Bool {
        let host = (url.host ?? "").lowercased()
        return
            !(host == "localhost" || host.hasSuffix(".localhost") || host.hasPrefix("127.") || host == "::1"
            || host == "[::1]")
    }

    private func networkChanged(_ path: NetworkPath) {
        let allowed = allows(path)
        let (stop, failed) = inner.withLock {
            s -> ([(UUID, DownloadTask)], [(Completion?, Result<DownloadResult, HaulError>)]) in
            s.blockedPath = allowed ? nil : path
            guard s.networkAllowed != allowed else { return ([], []) }
            s.networkAllowed = allowed
            if allowed {
                for (id, item) in s.items where item.state == .waitingForNetwork { s.set(id, .queued) }
                return ([], [])
            }
            let affected = s.items.values.filter {
                ($0.state == .queued || $0.state == .running) && needsNetwork($0.url)
            }.map(\.id)
            var tasks: [(UUID, DownloadTask)] = []
            var failed: [(Completion?, Result<DownloadResult, HaulError>)] = []
            for id in affected {
                if let task = s.tasks.removeValue(forKey: id) {
                    tasks.append((id, task))
                    s.stopped[id] = task
                }
                if configuration.waitsForConnectivity {
                    s.set(id, .waitingForNetwork)
                } else {
                    let error = Self.noPath(path)
                    s.set(id, .failed)
                    s.items[id]!.error = error
                    failed.append((s.takeCompletion(id), .failure(error)))
                }
            }
            return (tasks, failed)
        }
        // Both keep the partial file and its record: waiting ones continue from them later,
        // failed ones when the caller resumes them (or a later run does).
        if configuration.waitsForConnectivity {
            for (_, task) in stop { task.suspend() }
        } else {
            for (id, task) in stop {
                Task { [weak self] in
                    _ = await task.cancelProducingResumeData()
                    self?.inner.withLock { s in if s.stopped[id] === task { s.stopped[id] = nil } }
                }
            }
        }
        deliver(failed)
        changed(persist: true)
        schedule()
    }

    /// Why downloads wait for the network (or fail without it): the reason of the path the
    /// manager last found unusable, such as "no default route"; nil while the network is usable.
    public var networkUnavailableReason: String? {
        inner.withLock { s in s.blockedPath.map(Self.unusable) }
    }

    /// Why `path` cannot carry downloads.
    private static func unusable(_ path: NetworkPath) -> String { path.reason ?? "the path is not allowed" }

    package static func noPath(_ path: NetworkPath) -> HaulError {
        HaulError(.networkUnavailable, "no usable network: \(unusable(path))")
    }

    /// The state file, when persisting.
    public var stateFile: URL? {
        guard configuration.persistence == .default else { return nil }
        let directory =
            configuration.stateDirectory
            ?? {
                let env = ProcessInfo.processInfo.environment
                if let xdg = env["XDG_STATE_HOME"], xdg.hasPrefix("/") { return URL(fileURLWithPath: xdg) }
                return URL(fileURLWithPath: env["HOME"] ?? NSTemporaryDirectory()).appendingPathComponent(
                    ".local/state")
            }().appendingPathComponent("haul")
        return directory.appendingPathComponent("downloads.json")
    }

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
        let id = UUID.random()
        let origin = url.originKey
        inner.withLock { s in
            s.options[id] = options
            s.sequence += 1
            s.insert(
                Item(
                    id: id, url: url, target: target, priority: priority, state: .queued, sequence: s.sequence,
                    origin: origin))
            if let progress { s.progressHandlers[id] = progress }
            if let events { s.eventHandlers[id] = events }
            if let completion { s.completionHandlers[id] = completion }
        }
        changed(persist: true)
        schedule()
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
    public var items: [Item] { inner.withLock { $0.items.values.sorted { $0.sequence < $1.sequence } } }

    /// One item.
    public func item(_ id: UUID) -> Item? { inner.withLock { $0.items[id] } }

    /// The items in `states`, in the order they were added: the few running ones of a long
    /// list without sorting and copying the rest (the CLI's display, ten times a second).
    package func items(in states: Set<Item.State>) -> [Item] {
        inner.withLock { s in s.items.values.filter { states.contains($0.state) } }
            .sorted { $0.sequence < $1.sequence }
    }

    /// How many items are in `state`.
    package func count(in state: Item.State) -> Int { inner.withLock { $0.counts[state, default: 0] } }

    /// The list as it changes (an observable list): the current list first, then a new one
    /// within 0.1 s of changes; a burst of changes gives one list, the latest.
    public var updates: AsyncStream<[Item]> {
        AsyncStream(bufferingPolicy: .bufferingNewest(16)) { continuation in
            let id = inner.withLock { s -> Int in
                s.nextSubscriber += 1
                s.subscribers[s.nextSubscriber] = continuation
                return s.nextSubscriber
            }
            continuation.yield(items)
            continuation.onTermination = { [weak self] _ in
                _ = self?.inner.withLock { $0.subscribers.removeValue(forKey: id) }
            }
        }
    }

    /// All items together: bytes done and, when every size is known, the total.
    public var aggregateProgress: TransferProgress {
        var done: Int64 = 0
        var total: Int64? = 0
        var speed = 0.0
        // A sum needs no order: the items as stored, not `items` (sorted, and copied, at every
        // call: the CLI asks ten times a second, whatever the length of the list).
        inner.withLock { s in
            for item in s.items.values {
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
    public func pause(_ id: UUID) {
        let task = inner.withLock { s -> DownloadTask? in
            guard let item = s.items[id], [.queued, .running, .waitingForNetwork].contains(item.state) else {
                return nil
            }
            s.set(id, .paused)
            guard let task = s.tasks.removeValue(forKey: id) else { return nil }
            s.stopped[id] = task
            return task
        }
        task?.suspend()
        changed(persist: true)
        schedule()
    }

    /// Puts a paused or failed item back in the queue.
    public func resume(_ id: UUID) {
        inner.withLock { s in
            guard let item = s.items[id], item.state == .paused || item.state == .failed else { return }
            s.set(id, .queued)
            s.items[id]!.error = nil
        }
        changed(persist: true)
        schedule()
    }

    /// Cancels an item and removes its partial file.
    public func cancel(_ id: UUID) {
        let (task, completion) = inner.withLock { s -> (DownloadTask?, Completion?) in
            guard let item = s.items[id], item.state != .completed, item.state != .failed else { return (nil, nil) }
            var completion: Completion?
            if item.state != .running {
                // Not running: no task will report the end; its completion is called here.
                s.set(id, .failed)
                s.items[id]!.error = HaulError(.cancelled, "cancelled")
                completion = s.takeCompletion(id)
            }
            return (s.tasks[id] ?? s.stopped[id], completion)
        }
        task?.cancel()
        deliver([(completion, .failure(HaulError(.cancelled, "cancelled")))])
        changed(persist: true)
        schedule()
    }

    /// Waits until nothing is queued or running, or until ``shutdown()`` has stopped the
    /// manager (its unfinished downloads keep their place, and nothing more runs).
    public func waitUntilIdle() async {
        await withCheckedContinuation { c in
            let idle = inner.withLock { s -> Bool in
                if s.isIdle { return true }
                s.idleWaiters.append(c)
                return false
            }
            if idle { c.resume() }
        }
    }

    /// Stops running downloads, keeping their bytes and (when persisting) their place in the
    /// list; a later manager with the same state directory continues them.
    public func shutdown() async {
        let tasks = inner.withLock { s -> [DownloadTask] in
            s.shutDown = true
            s.watcher?.cancel()
            // Stopped ones too: their transfers may still be writing their records.
            defer { s.stopped = [:] }
            return Array(s.tasks.values) + Array(s.stopped.values)
        }
        for task in tasks { _ = await task.cancelProducingResumeData() }
        inner.withLock { $0.stoppedForGood = true }  // waitUntilIdle() ends: nothing more will run
        changed(persist: true, now: true)  // written before this returns, even with a completion handler running
    }

    // MARK: - Scheduling

    private func schedule() {
        var waits: [(UUID, DownloadTask)] = []
        let starts = inner.withLock { s -> [(UUID, DownloadTask, isNew: Bool)] in
            guard !s.shutDown else { return [] }
            var starts: [(UUID, DownloadTask, isNew: Bool)] = []
            var index = s.pending.startIndex
            while index < s.pending.endIndex,
                s.counts[.running, default: 0] < max(1, configuration.maxConcurrentDownloads)
            {
                let id = s.pending[index]
                guard let item = s.items[id], item.state == .queued else {
                    index = s.pending.remove(at: index)  // paused, cancelled or started elsewhere
                    continue
                }
                if !s.networkAllowed && needsNetwork(item.url) {
                    // Queued while the path went away: it waits with the others.
                    index = s.pending.remove(at: index)
                    s.set(id, configuration.waitsForConnectivity ? .waitingForNetwork : .failed)
                    if !configuration.waitsForConnectivity {
                        s.items[id]!.error =
                            s.blockedPath.map(Self.noPath) ?? HaulError(.networkUnavailable, "no usable network path")
                    }
                    continue
                }
                guard s.runningByHost[item.origin, default: 0] < max(1, configuration.maxDownloadsPerHost) else {
                    index += 1
                    continue
                }
                if let stopped = s.stopped[id], stopped.state != .suspended, stopped.state != .completed {
                    // Still being cancelled: wait for its end, then schedule again.
                    if s.awaitingStop.insert(id).inserted { waits.append((id, stopped)) }
                    index += 1
                    continue
                }
                index = s.pending.remove(at: index)
                s.set(id, .running)
                if let stopped = s.stopped.removeValue(forKey: id), stopped.state == .suspended {
                    s.tasks[id] = stopped
                    starts.append((id, stopped, false))
                    continue
                }
                let task = session.downloadTask(
                    with: item.url, to: item.target.destination, options: s.options[id] ?? DownloadOptions())
                s.tasks[id] = task
                starts.append((id, task, true))
            }
            return starts
        }
        for (id, task, isNew) in starts {
            if isNew {
                let from = ObjectIdentifier(task)
                task.onEvent { [weak self] event in self?.handle(event, for: id, from: from) }
            }
            task.resume()
        }
        for (id, stopping) in waits {
            Task { [weak self] in
                _ = try? await stopping.finished()
                self?.inner.withLock { s in
                    s.awaitingStop.remove(id)
                    if s.stopped[id] === stopping { s.stopped[id] = nil }
                }
                self?.schedule()
            }
        }
        if !starts.isEmpty { changed(persist: true) }
    }

    /// An event of the task `from`; ignored unless that is the item's current task (a task that
    /// was paused and then cancelled reports its end after a new one may have started).
    private func handle(_ event: DownloadEvent, for id: UUID, from: ObjectIdentifier) {
        let current = inner.withLock { s -> (@Sendable (DownloadEvent) -> Void)?? in
            s.tasks[id].map(ObjectIdentifier.init) == from ? .some(s.eventHandlers[id]) : nil
        }
        guard let handler = current else {
            if case .completed(let url) = event { stoppedTaskCompleted(id, url, from: from) }
            return
        }
        handler?(event)
        switch event {
        case .progress(let p):
            let handler = inner.withLock { s -> (@Sendable (TransferProgress) -> Void)? in
                s.items[id]?.progress = p
                return s.progressHandlers[id]
            }
            handler?(p)
            changed(persist: false)
        case .completed(let url):
            finish(id, .success(url))
        case .failed(let error):
            finish(id, .failure(error))
        default:
            break
        }
    }

    /// A stopped task whose transfer had every byte when the stop came completes anyway (see
    /// ``DownloadTask/suspend()``): so does its item, paused, waiting for the network or queued
    /// again behind the stop, since its file is in place. (It stayed paused, and its resume
    /// asked the server again only to find the file complete.)
    private func stoppedTaskCompleted(_ id: UUID, _ url: URL, from: ObjectIdentifier) {
        let call = inner.withLock { s -> (Completion?, Result<DownloadResult, HaulError>)? in
            guard !s.shutDown, let stopped = s.stopped[id], ObjectIdentifier(stopped) == from,
                let item = s.items[id], [.paused, .waitingForNetwork, .queued].contains(item.state)
            else { return nil }
            s.stopped[id] = nil
            s.items[id]!.progress = stopped.progress ?? item.progress
            s.items[id]!.error = nil
            let result = s.complete(id, fileAt: url, done: stopped.result)
            return (s.takeCompletion(id), .success(result))
        }
        guard let call else { return }
        deliver([call])
        changed(persist: true)
        schedule()
    }

    private func finish(_ id: UUID, _ outcome: Result<URL, HaulError>) {
        // A connection that died with the network can report before the path change does: ask
        // the source for the path now (only for failures that a network loss explains).
        var pathNow: NetworkPath?
        if case .failure(let error) = outcome, error.isTransient, configuration.waitsForConnectivity {
            pathNow = configuration.network?.pathNow
        }
        let lostNetwork = pathNow.map { !allows($0) } ?? false
        let (completion, result, recheck) = inner.withLock {
            s -> (Completion?, Result<DownloadResult, HaulError>?, Bool) in
            guard s.items[id]?.state == .running, !s.shutDown else { return (nil, nil, false) }
            let task = s.tasks.removeValue(forKey: id)
            let result: Result<DownloadResult, HaulError>
            switch outcome {
            case .success(let url):
                result = .success(s.complete(id, fileAt: url, done: task?.result))
            case .failure(let error)
            where error.isTransient && configuration.waitsForConnectivity && needsNetwork(s.items[id]!.url)
                && (!s.networkAllowed || lostNetwork):
                // The connection died with the network: wait for it instead of failing (a new
                // task with a fresh retry budget continues from the saved bytes).
                s.set(id, .waitingForNetwork)
                return (nil, nil, s.networkAllowed)
            case .failure(let error):
                s.set(id, .failed)
                s.items[id]!.error = error
                result = .failure(error)
            }
            return (s.takeCompletion(id), result, false)
        }
        if let result { deliver([(completion, result)]) }
        if recheck, let pathNow {
            networkChanged(pathNow)  // the others stop too
            watchForReturn()
        }
        changed(persist: true)
        schedule()
    }

    /// Calls completion handlers taken out with `takeCompletion`, then stops counting them.
    private func deliver(_ calls: [(Completion?, Result<DownloadResult, HaulError>)]) {
        var called = 0
        for case (let completion?, let result) in calls {
            completion(result)
            called += 1
        }
        if called > 0 { inner.withLock { $0.completing -= called } }
    }

    /// After a failure showed the path gone before the source said so: look every second until
    /// it is back, since the source may never report a change it saw only in passing.
    private func watchForReturn() {
        guard let network = configuration.network else { return }
        Task { [weak self] in
            for _ in 0..<86_400 {
                try? await Task.sleep(nanoseconds: 1_000_000_000)
                guard let self, !self.inner.withLock({ $0.shutDown || $0.networkAllowed }) else { return }
                if let path = network.pathNow, self.allows(path) {
                    self.networkChanged(path)
                    return
                }
            }
        }
    }

    /// Changes not yet published to `updates` or written to the state file.
    private struct Pending {
        var publish = false
        var persist = false
        /// A flush is queued on `flushQueue`.
        var scheduled = false
        /// When the state file was last written (monotonic seconds).
        var savedAt = -Double.infinity
    }

    /// Publishes a change: to `updates` within `publishDelay`, to the state file within
    /// `saveInterval`, and both at once when the manager is idle (so the end state is there
    /// when `waitUntilIdle()` returns, whose waiters are resumed after it).
    ///
    /// Each change (a start, a progress event, an end) built the whole sorted list and wrote the
    /// whole state file before: n downloads cost n² (`haul get --json -j16` of 5000 small files
    /// took 29.6 s against 0.37 s without `--json`, 1493 lists and 893 writes for 300 files).
    /// `now`: publish and write at once whatever the state (``shutdown()``).
    private func changed(persist: Bool, now force: Bool = false) {
        let saving = persist && stateFile != nil
        let (idle, publishing) = inner.withLock { s in (s.isIdle, !s.subscribers.isEmpty) }
        let now = pending.withLock { p -> Bool in
            p.publish = p.publish || publishing
            p.persist = p.persist || saving
            if idle || force { return true }
            if (p.publish || p.persist) && !p.scheduled {
                p.scheduled = true
                flushQueue.asyncAfter(deadline: .now() + Self.publishDelay) { [weak self] in self?.flush(force: false) }
            }
            return false
        }
        if now { flush(force: true) }
    }

    /// Seconds a change waits for others before `updates` gets the list.
    private static let publishDelay = 0.1
    /// The shortest interval between two writes of the state file while downloads run.
    private static let saveInterval = 1.0

    /// Builds the list once for what is pending; `force` (idle, or shut down) also writes the
    /// state file whatever the interval, and resumes the idle waiters afterwards.
    private func flush(force: Bool) {
        flushing.withLock { _ in
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
            let (subscribers, waiters, snapshot) = inner.withLock {
                s -> ([AsyncStream<[Item]>.Continuation], [CheckedContinuation<Void, Never>], [Item]) in
                var waiters: [CheckedContinuation<Void, Never>] = []
                if !s.idleWaiters.isEmpty, s.isIdle {
                    waiters = s.idleWaiters
                    s.idleWaiters = []
                }
                let needed = persist || (publish && !s.subscribers.isEmpty)
                return (
                    publish ? Array(s.subscribers.values) : [], waiters,
                    needed ? s.items.values.sorted { $0.sequence < $1.sequence } : []
                )
            }
            if persist || !subscribers.isEmpty { snapshots.withLock { $0 += 1 } }
            for sub in subscribers { sub.yield(snapshot) }
            if persist { save(snapshot) }
            // A save put off by the interval is written when it is due.
            let later = pending.withLock { p -> Double? in
                guard p.scheduled, !force else { return nil }
                return max(0, p.savedAt + Self.saveInterval - clock)
            }
            if let later {
                flushQueue.asyncAfter(deadline: .now() + later) { [weak self] in self?.flush(force: false) }
            }
            for w in waiters { w.resume() }
        }
    }

    // MARK: - Persistence

    private func save(_ items: [Item]) {
        guard let file = stateFile else { return }
        let stored = Stored(
            items: items.map {
                StoredItem(
                    id: $0.id, url: ResumeRecord.redacted($0.url), target: $0.target, priority: $0.priority,
                    state: $0.state, fileURL: $0.fileURL, sequence: $0.sequence)
            })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard let data = try? encoder.encode(stored) else { return }
        saving.withLock { writes in
            // One writer at a time; the file is replaced atomically.
            try? Sys.makeDirectories(file.deletingLastPathComponent().path)
            try? Sys.writeFileAtomically(file.path, Array(data))
            writes += 1
        }
    }

    private func load() {
        guard let file = stateFile else { return }
        // 1 GiB: some three million downloads (16 MiB, about 48,000, was too few to be a limit).
        let bytes: [UInt8]?
        do { bytes = try Sys.readSmallFile(file.path, limit: 1 << 30) } catch { bytes = [] }
        guard let bytes else { return }  // no list yet
        guard let stored = try? JSONDecoder().decode(Stored.self, from: Data(bytes)), stored.version == 1 else {
            // A list this manager cannot read (damaged, too large, of a later version) is kept
            // aside instead of being replaced by the next save.
            try? Sys.rename(file.path, file.path + ".unreadable")
            return
        }
        inner.withLock { s in
            for item in stored.items.sorted(by: { $0.sequence < $1.sequence }) {
                guard let url = URL(string: item.url) else { continue }
                let state: Item.State = [.running, .waitingForNetwork].contains(item.state) ? .queued : item.state
                s.insert(
                    Item(
                        id: item.id, url: url, target: item.target, priority: item.priority, state: state,
                        fileURL: item.fileURL, sequence: item.sequence, origin: url.originKey))
                s.sequence = max(s.sequence, item.sequence)
            }
        }
    }
}

/// Runs `body` with a manager and always shuts it down afterwards (running downloads stop,
/// keeping their bytes), like `withHTTPClient`.
public func withDownloadManager<R>(
    configuration: DownloadManager.Configuration = DownloadManager.Configuration(),
    _ body: (DownloadManager) async throws -> R
) async rethrows -> R {
    let manager = DownloadManager(configuration: configuration)
    do {
        let result = try await body(manager)
        await manager.shutdown()
        return result
    } catch {
        await manager.shutdown()
        throw error
    }
}

extension UUID {
    /// A version 4 UUID from the system generator (two getrandom(2) calls). Foundation's
    /// `UUID()` on Linux opens, reads and closes /dev/urandom for each one: three syscalls per
    /// queued download, a thousand times for a long list.
    static func random() -> UUID {
        var g = SystemRandomNumberGenerator()
        let (high, low) = (g.next(), g.next())  // one getrandom each
        var bytes = (0..<16).map { i in UInt8(truncatingIfNeeded: (i < 8 ? high : low) >> (8 * (i % 8))) }
        bytes[6] = bytes[6] & 0x0F | 0x40  // version 4
        bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}

/// The manager's queued downloads in run order. Starts take them mostly from the front, which
/// moves a start index instead of the rest of the array: `remove(at: 0)` per start made a list
/// of n downloads cost n²/2 element moves (1.6% of a 20,000-file run's CPU, growing with n).
struct RunQueue {
    private var ids: [UUID] = []
    /// The first queued item's index; the slots before it are spent.
    private(set) var startIndex = 0
    /// One past the last queued item's index.
    var endIndex: Int { ids.count }
    /// The last queued item, if any.
    var last: UUID? { startIndex < ids.count ? ids.last : nil }

    subscript(index: Int) -> UUID { ids[index] }

    /// Adds `id` at the end.
    mutating func append(_ id: UUID) { ids.append(id) }

    /// Inserts `id` before the first queued item for which `runsAfter` is true, else at the end.
    mutating func insert(_ id: UUID, before runsAfter: (UUID) -> Bool) {
        ids.insert(id, at: ids[startIndex...].firstIndex(where: runsAfter) ?? ids.count)
    }

    /// Removes the item at `index`; returns the index of the item that followed it.
    mutating func remove(at index: Int) -> Int {
        guard index == startIndex else {
            ids.remove(at: index)
            return index
        }
        startIndex += 1
        // Spent slots are given back once they are most of the array (amortized O(1)).
        if startIndex == ids.count || (startIndex >= 256 && startIndex * 2 >= ids.count) {
            ids.removeFirst(startIndex)
            startIndex = 0
        }
        return startIndex
    }
}
