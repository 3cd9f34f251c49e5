import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Where a download stands, as the runner saw it last.
package struct RunReport: Sendable, Equatable {
    package var id: Int64
    package var state: StoredDownload.State
    package var error: String?
    /// The file it writes (its final name; the partial is beside it), once known.
    package var file: String?
    package var done: Int64 = 0
    package var total: Int64?
    /// A completed download whose file was there already (the server's size, no record): not
    /// written by haul, so never deleted by it.
    package var foundComplete = false
}

/// How far a running download is.
package struct RunProgress: Sendable, Equatable {
    package var done: Int64
    package var total: Int64?
    /// Bytes per second, smoothed.
    package var speed: Double
}

/// The network as the daemon's downloads see it (the page's banner).
package struct NetworkState: Codable, Sendable, Equatable {
    /// `satisfied` or `unsatisfied`.
    package var status: String
    /// The primary interface's kind: `wifi`, `wired`, `cellular` or `other`.
    package var kind: String?
    package var interface: String?
    package var expensive: Bool
    package var reason: String?

    package init(_ path: NetworkPath) {
        status = path.status.rawValue
        kind = path.primary?.kind.rawValue
        interface = path.primary?.name
        expensive = path.isExpensive
        reason = path.reason
    }
}

/// Where a download goes: a file, or a directory for the server's suggested name.
package enum RunTarget: Sendable, Equatable {
    case file(String)
    case directory(String)
}

/// What the daemon asks of whatever runs its downloads: the daemon's `DownloadManager`
/// (``ManagerRunner``), or nothing in tests of the API alone. Calls come from the HTTP loop's
/// thread; reports go back through the closure given to ``onReport(_:)``, from any thread.
package protocol ServeRunner: AnyObject, Sendable {
    /// Starts `download` (queued behind the others), or continues it when it was paused or failed.
    func run(_ download: StoredDownload, into target: RunTarget, options: DownloadOptions)
    /// Stops it, keeping its bytes.
    func pause(_ id: Int64)
    /// Stops it and removes its partial file; false when it does not run here.
    func cancel(_ id: Int64) -> Bool
    /// Lets go of an ended download.
    func forget(_ id: Int64)
    /// How far it is, while it is known.
    func progress(_ id: Int64) -> RunProgress?
    /// Where reports of changes go.
    func onReport(_ body: @escaping @Sendable ([RunReport]) -> Void)
    /// The network now, when watched.
    var network: NetworkState? { get }
    /// Where changes of the network go.
    func onNetwork(_ body: @escaping @Sendable (NetworkState) -> Void)
    /// Stops every transfer, keeping its bytes; returns once they have ended.
    func shutdown() async
    /// Downloads at once, from now on.
    func setMaxConcurrent(_ n: Int)
    /// Moves queued download `id` in the run order.
    func move(_ id: Int64, _ move: DownloadManager.QueueMove)
    /// The speed limit all downloads share, running ones included (nil: none).
    func setMaxOverallRate(_ bytesPerSecond: Int64?)
}

/// The daemon's one `DownloadManager`, keyed by the store's ids. The store is the list that
/// survives (the manager keeps none of its own: `.ephemeral` persistence); the partial files and
/// their records are what a restarted daemon continues from. The manager's observable list is
/// read once per change (at most ten times a second) and turned into reports of what changed.
package final class ManagerRunner: ServeRunner {
    let manager: DownloadManager
    private struct Books {
        var uuid: [Int64: UUID] = [:]
        var id: [UUID: Int64] = [:]
        /// What was last reported of each, to report changes only.
        var reported: [Int64: RunReport] = [:]
        var progress: [Int64: RunProgress] = [:]
        /// The file each transfer writes, from its `started` event.
        var files: [Int64: String] = [:]
        /// Completed downloads whose completion handler has run: whether the file was found
        /// complete (not written by haul).
        var completed: [Int64: Bool] = [:]
        var report: (@Sendable ([RunReport]) -> Void)?
        var network: NetworkState?
        var onNetwork: (@Sendable (NetworkState) -> Void)?
    }
    private let books = Locked(Books())
    private let watcher = Locked<Task<Void, Never>?>(nil)
    private let networkWatcher = Locked<Task<Void, Never>?>(nil)

    package init(configuration: DownloadManager.Configuration) throws(HaulError) {
        var configuration = configuration
        configuration.persistence = .ephemeral
        manager = try DownloadManager(configuration: configuration)
        let updates = manager.updates
        watcher.set(
            Task { [weak self] in
                for await items in updates {
                    guard let self else { return }
                    self.saw(items)
                }
            })
        guard let source = configuration.network else { return }
        networkWatcher.set(
            Task { [weak self] in
                for await path in source.paths {
                    guard let self else { return }
                    let state = NetworkState(path)
                    let tell = self.books.withLock { b -> (@Sendable (NetworkState) -> Void)? in
                        defer { b.network = state }
                        return b.network == state ? nil : b.onNetwork
                    }
                    tell?(state)
                }
            })
    }

    deinit {
        watcher.withLock { $0?.cancel() }
        networkWatcher.withLock { $0?.cancel() }
    }

    package var network: NetworkState? { books.withLock { $0.network } }

    package func onNetwork(_ body: @escaping @Sendable (NetworkState) -> Void) {
        books.withLock { $0.onNetwork = body }
    }

    package func onReport(_ body: @escaping @Sendable ([RunReport]) -> Void) { books.withLock { $0.report = body } }

    package func run(_ download: StoredDownload, into target: RunTarget, options: DownloadOptions) {
        if let uuid = books.withLock({ $0.uuid[download.id] }), manager.item(uuid) != nil {
            manager.resume(uuid)
            return
        }
        guard let url = URL(string: download.url) else { return }
        let id = download.id
        let destination: DownloadManager.Target =
            switch target {
            case .file(let path): .file(URL(fileURLWithPath: path))
            case .directory(let path): .directory(URL(fileURLWithPath: path))
            }
        // The uuid is booked before the manager can report the item.
        let uuid = UUID()
        books.withLock { b in
            b.uuid[id] = uuid
            b.id[uuid] = id
        }
        manager.add(
            url, to: destination, priority: Int(download.priority), options: options, id: uuid,
            events: { [weak self] event in
                if case .started(let start) = event {
                    self?.books.withLock { $0.files[id] = start.destination.path }
                }
            },
            completion: { [weak self] result in
                // A list that shows it completed before this ran is not reported (the manager
                // publishes another once its handlers have run).
                if case .success(let done) = result {
                    self?.books.withLock { $0.completed[id] = done.alreadyComplete }
                }
            })
    }

    package func pause(_ id: Int64) { if let uuid = books.withLock({ $0.uuid[id] }) { manager.pause(uuid) } }

    package func cancel(_ id: Int64) -> Bool {
        guard let uuid = books.withLock({ $0.uuid[id] }) else { return false }
        manager.cancel(uuid)
        return true
    }

    /// Lets go of `id` once the manager has (an item still running its end stays booked, so
    /// its last report is still heard).
    package func forget(_ id: Int64) {
        guard let uuid = books.withLock({ $0.uuid[id] }), manager.remove(uuid) || manager.item(uuid) == nil else {
            return
        }
        books.withLock { b in
            b.uuid[id] = nil
            b.id[uuid] = nil
            b.completed[id] = nil
            b.reported[id] = nil
            b.progress[id] = nil
            b.files[id] = nil
        }
        manager.remove(uuid)
    }

    package func progress(_ id: Int64) -> RunProgress? { books.withLock { $0.progress[id] } }

    package func setMaxConcurrent(_ n: Int) { manager.setMaxConcurrentDownloads(n) }

    package func move(_ id: Int64, _ move: DownloadManager.QueueMove) {
        if let uuid = books.withLock({ $0.uuid[id] }) { manager.move(uuid, move) }
    }

    // The manager runs on curl, which paces: the only refusal is for a transport that cannot.
    package func setMaxOverallRate(_ bytesPerSecond: Int64?) {
        try? manager.setMaxOverallBytesPerSecond(bytesPerSecond)
    }

    package func shutdown() async {
        watcher.withLock { $0?.cancel() }
        networkWatcher.withLock { $0?.cancel() }
        await manager.shutdown()
    }

    /// One list from the manager: the progress of each, and a report of each that changed.
    private func saw(_ items: [DownloadManager.Item]) {
        let (changes, report) = books.withLock { b -> ([RunReport], (@Sendable ([RunReport]) -> Void)?) in
            var changes: [RunReport] = []
            for item in items {
                guard let id = b.id[item.id], item.state != .completed || b.completed[id] != nil else { continue }
                let p = item.progress
                if let p {
                    b.progress[id] = RunProgress(
                        done: p.completedBytes, total: p.totalBytes, speed: p.smoothedBytesPerSecond)
                }
                let now = RunReport(
                    id: id, state: Self.state(item), error: item.error?.message,
                    file: item.fileURL?.path ?? b.files[id], done: p?.completedBytes ?? 0, total: p?.totalBytes,
                    foundComplete: b.completed[id] ?? false)
                let last = b.reported[id]
                // Bytes alone are not a change worth a write: they go with the next change of state.
                if last?.state != now.state || last?.file != now.file || last?.error != now.error {
                    b.reported[id] = now
                    changes.append(now)
                }
            }
            return (changes, b.report)
        }
        if !changes.isEmpty { report?(changes) }
    }

    static func state(_ item: DownloadManager.Item) -> StoredDownload.State {
        switch item.state {
        case .queued: .queued
        case .running: .running
        case .paused: .paused
        case .waitingForNetwork: .waiting
        case .completed: .completed
        case .failed: item.error?.code == .cancelled ? .cancelled : .failed
        }
    }
}
