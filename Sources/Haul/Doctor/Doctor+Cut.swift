import HaulCore

/// Cancels a body at a deadline unless stopped first, and tells afterwards whether it did: a
/// check tells its own deadline from another cancel by this flag, not by reading the clock
/// (which a preempted thread reads late).
final class Cut: Sendable {
    /// The seconds from its making to its deadline (for the message of a timeout).
    let seconds: Double
    private let fired = Locked(false)
    private let task = Locked<Task<Void, Never>?>(nil)

    /// Cancels `body` `seconds` from now, or at `limit` if that comes first.
    init(_ body: BodyStream, after seconds: Double, by limit: ContinuousClock.Instant? = nil) {
        let now = ContinuousClock.now
        let own = now + Self.duration(seconds)
        let deadline = limit.map { min($0, own) } ?? own
        self.seconds = max(0, Seconds.of(now.duration(to: deadline)))
        let fired = self.fired
        task.withLock {
            $0 = Task {
                guard (try? await Task.sleep(until: deadline, clock: .continuous)) != nil else { return }
                fired.withLock { $0 = true }
                body.cancel()
            }
        }
    }

    /// Whether the deadline came and the body was cancelled.
    var hasFired: Bool { fired.withLock { $0 } }

    /// No cancel from now on (one under way still counts: ``hasFired``).
    func stop() { task.withLock { $0?.cancel() } }

    /// `seconds` (at most 10,000, as the clamped options are) as a Duration.
    static func duration(_ seconds: Double) -> Duration {
        .milliseconds(Int64(min(max(seconds, 0), 10_000) * 1000))
    }
}
