import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The network state on Linux, from sysfs, procfs and getifaddrs: which interfaces exist, of
/// which kind (Wi-Fi, wired, cellular), and whether a default route makes the path usable.
///
/// ```swift
/// let monitor = NetworkMonitor()
/// print(monitor.currentPath.status, monitor.currentPath.primary?.kind ?? .other)
/// for await path in monitor.paths { … }   // each change once
/// ```
///
/// Changes arrive as events from an rtnetlink socket (links, addresses, routes): each burst of
/// kernel messages makes the monitor re-read the state once, and each distinct path is
/// delivered once. Where netlink is unavailable it re-reads every `interval` seconds instead.
public final class NetworkMonitor: NetworkPathSource, Sendable {
    /// Interface names treated as expensive (metered), on top of cellular ones.
    public let meteredInterfaces: Set<String>
    /// Seconds between two looks when netlink events are unavailable.
    public let interval: Double

    /// Creates a monitor.
    public init(meteredInterfaces: Set<String> = [], interval: Double = 2) {
        self.meteredInterfaces = meteredInterfaces
        self.interval = interval
    }

    /// The path now.
    public var currentPath: NetworkPath { NetworkProbe.path(metered: meteredInterfaces) }

    /// ``currentPath``.
    public var pathNow: NetworkPath? { currentPath }

    /// The current path, then every change.
    public var paths: AsyncStream<NetworkPath> {
        let metered = meteredInterfaces
        let interval = interval
        return AsyncStream(bufferingPolicy: .bufferingNewest(8)) { continuation in
            let last = Locked<NetworkPath?>(nil)
            let look: @Sendable () -> Void = {
                // Read and yield under the lock, so two looks cannot deliver out of order.
                last.withLock { last in
                    let path = NetworkProbe.path(metered: metered)
                    if path != last {
                        continuation.yield(path)
                        last = path
                    }
                }
            }
            if let events = RouteEvents(onChange: look) {
                look()
                continuation.onTermination = { _ in events.stop() }
                return
            }
            let task = Task {
                while !Task.isCancelled {
                    look()
                    try? await Task.sleep(nanoseconds: Seconds.nanoseconds(interval))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

/// Something that reports network paths: the current one first, then each change.
/// ``NetworkMonitor`` is the real one; tests and apps can supply their own.
public protocol NetworkPathSource: Sendable {
    /// The current path, then every change.
    var paths: AsyncStream<NetworkPath> { get }
    /// The path now, read without waiting; nil when the source cannot tell (the default). A
    /// manager asks when a transfer fails, since the failure can arrive before the change does.
    var pathNow: NetworkPath? { get }
}

extension NetworkPathSource {
    /// Unknown.
    public var pathNow: NetworkPath? { nil }
}
