#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The decisions of a download over several connections, as events in and actions out; the
/// engine (``SegmentedRun``) does the requests and the waits. Pure: tested without sockets.
///
/// The connections share one ``RetryBudget`` (credited with every range's bytes as its fetch
/// ends, whatever the end). After a range's fetch ends (``rangeEnded(_:slowStreak:)``): take the
/// next range; ask again at once on a new connection when the watch replaced a slow one (a range
/// slow on more tries in a row than the retries allow fails the download); leave the range to
/// the others when this connection was turned away before its first byte while others fetch
/// (the server admits fewer connections than asked for); retry after the budget's delay; or
/// fail. Every answer is judged by ``RangeAnswer``.
package struct RangesStateMachine: Sendable {
    private var budget: RetryBudget

    package init(retry: RetryPolicy) { budget = RetryBudget(retry) }

    /// How a range's fetch ended.
    package enum FetchEnd: Equatable, Sendable {
        case fetched
        /// The slow-connection watch replaced it (its bytes stay written).
        case replaced(HaulError)
        /// It failed; `flowing`: whether its bytes had begun; `othersFlowing`: whether another
        /// connection's had.
        case failed(HaulError, flowing: Bool, othersFlowing: Bool)
    }

    /// What the connection does next.
    package enum Next: Equatable, Sendable {
        /// Take the next range (or what is left of this one).
        case takeNext
        /// Ask again at once: the `attempt`-th replacement in a row.
        case replace(attempt: Int, error: HaulError)
        /// This connection ends; its range goes back to the plan for the others.
        case leave
        /// Wait `delay`, then ask again (`attempt`: the retry's number).
        case retry(attempt: Int, delay: Double, error: HaulError)
        case fail(HaulError)
    }

    /// A fetch wrote `bytes` into the partial (whatever its end).
    package mutating func fetched(_ bytes: Int64) { budget.progressed(bytes) }

    /// A fetch ended; `slowStreak` counts this connection's replacements in a row.
    package mutating func rangeEnded(_ end: FetchEnd, slowStreak: inout Int) -> Next {
        switch end {
        case .fetched:
            slowStreak = 0
            return .takeNext
        case .replaced(let error):
            slowStreak += 1
            guard slowStreak <= budget.policy.maxRetries else {
                var final = error
                final.isTransient = false
                return .fail(final)
            }
            return .replace(attempt: slowStreak, error: error)
        case .failed(let error, let flowing, let othersFlowing):
            guard error.isTransient else { return .fail(error) }
            slowStreak = 0
            // Retrying a connection the server turned away would use up the download's budget
            // in a second (many mirrors allow two connections per client) and fail it.
            if !flowing && othersFlowing { return .leave }
            do throws(HaulError) {
                let (attempt, delay) = try budget.failed(error)
                return .retry(attempt: attempt, delay: delay, error: error)
            } catch {
                return .fail(error)
            }
        }
    }
}
