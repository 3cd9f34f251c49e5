import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The network policy: which paths a manager may use, which downloads the policy holds, and
/// how a path change, or a failure that shows the path gone, reaches the queue.
extension DownloadManager {
    /// Why downloads wait for the network (or fail without it): the reason of the path the
    /// manager last found unusable, such as "no default route"; nil while the network is usable.
    public var networkUnavailableReason: String? {
        queue.withLock { q in q.blockedPath.map(Queue.unusable) }
    }

    /// Whether the network policy lets a download of `url` start now, as the queue would start
    /// one of its items: no path is watched, the URL needs none, or the watcher's last path is
    /// allowed (nothing is read from the system here). The express way of `haul get -j` asks
    /// before each URL; one held goes to the queue.
    package func mayStartNow(_ url: URL) -> Bool {
        guard configuration.network != nil, Self.needsNetwork(url, configuration) else { return true }
        return queue.withLock { $0.networkAllowed }
    }

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

    /// Whether the policy of `configuration` holds a download of `url`: loopback hosts
    /// (`localhost`, 127.0.0.0/8, `::1`) need no network path unless it says so.
    static func needsNetwork(_ url: URL, _ configuration: Configuration) -> Bool {
        configuration.appliesNetworkPolicyToLoopback || needsNetwork(url)
    }

    /// Whether a non-loopback host is named by `url`.
    package static func needsNetwork(_ url: URL) -> Bool {
        let host = (url.host ?? "").lowercased()
        return
            !(host == "localhost" || host.hasSuffix(".localhost") || host.hasPrefix("127.") || host == "::1"
            || host == "[::1]")
    }

    package static func noPath(_ path: NetworkPath) -> HaulError { Queue.noPath(path) }

    /// The directory of the lists: the configuration's, else `$XDG_STATE_HOME/haul`, else
    /// `~/.local/state/haul`.
    static func stateDirectory(_ configuration: Configuration) -> URL {
        if let directory = configuration.stateDirectory { return directory }
        let base = XDGDirectory.state.path() ?? FileManager.default.temporaryDirectory.path + "/.local/state"
        return URL(fileURLWithPath: base).appendingPathComponent("haul")
    }

    /// Follows `network`'s paths until the manager is gone or shut down.
    func watch(_ network: any NetworkPathSource) {
        let watcher = Task { [weak self] in
            for await path in network.paths {
                guard let self else { return }
                self.networkChanged(path)
            }
        }
        self.watcher.withLock { $0 = watcher }
    }

    func networkChanged(_ path: NetworkPath) {
        let allowed = allows(path)
        act { $0.networkChanged(allowed: allowed, path: path) }
    }

    /// The item's current task failed with `error`. A connection that died with the network
    /// can report before the path change does: the source is asked for the path now (only for
    /// failures that a network loss explains).
    func failed(_ id: UUID, from task: DownloadTask, _ error: HaulError, current: Bool) {
        var pathNow: NetworkPath?
        if current, error.isTransient, configuration.waitsForConnectivity {
            pathNow = configuration.network?.pathNow
        }
        let lostNetwork = pathNow.map { !allows($0) } ?? false
        var recheck = false
        act { q in
            let (actions, again) = q.failed(id, from: task, error, lostNetwork: lostNetwork)
            recheck = again
            return actions
        }
        if recheck, let pathNow {
            networkChanged(pathNow)  // the others stop too
            watchForReturn()
        }
    }

    /// After a failure showed the path gone before the source said so: look every second until
    /// it is back (for a day at most), since the source may never report a change it saw only
    /// in passing. It is the one place the manager looks by itself; it runs only while the
    /// network is down unreported.
    private func watchForReturn() {
        guard let network = configuration.network else { return }
        Task { [weak self] in
            for _ in 0..<86_400 {
                try? await Task.sleep(nanoseconds: 1_000_000_000)
                guard let self, !self.queue.withLock({ $0.shutDown || $0.networkAllowed }) else { return }
                if let path = network.pathNow, self.allows(path) {
                    self.networkChanged(path)
                    return
                }
            }
        }
    }
}
