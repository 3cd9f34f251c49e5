import Foundation
import HaulCore

/// The network state on Linux, from sysfs, procfs and getifaddrs: which interfaces exist, of
/// which kind (Wi-Fi, wired, cellular), and whether a default route makes the path usable.
///
/// ```swift
/// let monitor = NetworkMonitor()
/// print(monitor.currentPath.status, monitor.currentPath.primary?.kind ?? .other)
/// for await path in monitor.paths { … }   // each change once
/// ```
///
/// Changes are found by re-reading the state every `interval` seconds (the fallback of
/// docs/network.md; rtnetlink events are the next step), and each distinct path is delivered
/// once.
public final class NetworkMonitor: NetworkPathSource, Sendable {
    /// Interface names treated as expensive (metered), on top of cellular ones.
    public let meteredInterfaces: Set<String>
    /// Seconds between two looks.
    public let interval: Double

    /// Creates a monitor.
    public init(meteredInterfaces: Set<String> = [], interval: Double = 2) {
        self.meteredInterfaces = meteredInterfaces
        self.interval = interval
    }

    /// The path now.
    public var currentPath: NetworkPath { NetworkProbe.path(metered: meteredInterfaces) }

    /// The current path, then every change.
    public var paths: AsyncStream<NetworkPath> {
        let metered = meteredInterfaces
        let interval = interval
        return AsyncStream(bufferingPolicy: .bufferingNewest(8)) { continuation in
            let task = Task {
                var last: NetworkPath?
                while !Task.isCancelled {
                    let path = NetworkProbe.path(metered: metered)
                    if path != last {
                        continuation.yield(path)
                        last = path
                    }
                    try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
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
}
