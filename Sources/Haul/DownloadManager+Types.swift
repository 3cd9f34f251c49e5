import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension DownloadManager {
    /// Where ``DownloadManager/move(_:_:)`` puts a queued item in the run order (as
    /// Transmission's queue-move-top, -up, -down and -bottom).
    public enum QueueMove: String, Sendable, CaseIterable {
        /// First: it starts next.
        case top
        /// Before the queued item ahead of it.
        case up
        /// After the queued item behind it.
        case down
        /// Last.
        case bottom

        /// `order` (ids with their priorities, in run order) with `id` moved, and the priority
        /// it takes: that of its new neighbour where its own would break the order (priority
        /// first). Nil when `id` is not in `order`; `order` itself where it already is.
        package func apply<ID: Equatable>(to order: [(ID, Int)], moving id: ID) -> ([ID], Int)? {
            guard let from = order.firstIndex(where: { $0.0 == id }) else { return nil }
            var rest = order
            var priority = rest.remove(at: from).1
            let to =
                switch self {
                case .top: 0
                case .up: max(0, from - 1)
                case .down: min(rest.count, from + 1)
                case .bottom: rest.count
                }
            if to == from { return (order.map(\.0), priority) }
            if to < rest.count { priority = max(priority, rest[to].1) }
            if to > 0 { priority = min(priority, rest[to - 1].1) }
            rest.insert((id, priority), at: to)
            return (rest.map(\.0), priority)
        }
    }

    /// How the manager behaves.
    public struct Configuration: Sendable {
        /// What survives a restart.
        public enum Persistence: Sendable, Equatable {
            /// The list of downloads is kept in ``Configuration/stateDirectory`` under
            /// ``Configuration/identifier`` and reloaded by the next manager with the same
            /// identifier; unfinished items continue from their bytes.
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
        /// Names the list a persisted manager keeps (as a background `URLSessionConfiguration`'s
        /// identifier does): managers with the same identifier continue each other's list, one
        /// at a time (a second at once, in this process or another, is refused with
        /// ``HaulError/Code/listInUse``, so two copies of one program need identifiers of their
        /// own); another identifier is another list. Default: the program's name. Any bytes, at
        /// most 200 once encoded for the file's name (bytes other than `A-Z a-z 0-9 - _ .`
        /// take three).
        public var identifier = ProcessInfo.processInfo.processName
        /// Where the lists are kept: default `$XDG_STATE_HOME/haul` (else `~/.local/state/haul`);
        /// each in `managers/<identifier>.json`.
        public var stateDirectory: URL?
        /// Finished (completed or failed) items kept in the list, in memory and on disk; past it
        /// the oldest leave first. ``DownloadManager/remove(_:)`` takes one out sooner.
        public var maxFinishedItems = 1000
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
        /// Whether the network policy holds it (not a loopback host, unless the configuration
        /// says so).
        var needsNetwork: Bool
        /// When it last finished (the order in which finished items leave the list).
        var finishStamp = 0
        /// When it was last queued: an entry of the run queue from before (it was paused while
        /// queued, then resumed) no longer counts.
        var queueStamp = 0
    }
}
