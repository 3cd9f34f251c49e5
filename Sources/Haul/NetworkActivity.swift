import HaulCore
import Observation

/// The network activity indicator: how many transfers are on the wire right now.
///
/// Observable both ways: with Observation (`withObservationTracking`, or SwiftUI on Apple
/// platforms) through ``activeTransfers``, and as an `AsyncStream` through ``updates``.
///
/// ```swift
/// for await count in session.activity.updates { spinner.isAnimating = count > 0 }
/// ```
///
/// Every ``HaulSession`` has its own (``HaulSession/activity``, which a ``DownloadManager``
/// shares as ``DownloadManager/activity``); ``shared`` counts the whole process. A transfer
/// counts from its request until its last byte or failure; retries wait outside the count.
public final class NetworkActivity: Observable, Sendable {
    /// Every transfer of every session in this process.
    public static let shared = NetworkActivity(parent: nil)

    private let registrar = ObservationRegistrar()
    private let state = Locked<(count: Int, subscribers: [Int: AsyncStream<Int>.Continuation], next: Int)>((0, [:], 0))
    private let parent: NetworkActivity?

    init(parent: NetworkActivity?) { self.parent = parent }

    /// Transfers in flight now.
    public var activeTransfers: Int {
        registrar.access(self, keyPath: \.activeTransfers)
        return state.withLock { $0.count }
    }

    /// Whether any transfer is in flight (the spinner spins).
    public var isActive: Bool { activeTransfers > 0 }

    /// The count now, then every change.
    public var updates: AsyncStream<Int> {
        AsyncStream(bufferingPolicy: .bufferingNewest(16)) { continuation in
            let id = state.withLock { s -> Int in
                s.next += 1
                s.subscribers[s.next] = continuation
                continuation.yield(s.count)
                return s.next
            }
            continuation.onTermination = { [weak self] _ in
                _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
            }
        }
    }

    func change(by delta: Int) {
        registrar.withMutation(of: self, keyPath: \.activeTransfers) {
            // Yielded under the lock, so subscribers see the counts in order.
            state.withLock { s in
                s.count += delta
                for subscriber in s.subscribers.values { subscriber.yield(s.count) }
            }
        }
        parent?.change(by: delta)
    }
}
