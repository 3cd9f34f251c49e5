/// When and how long to wait before retrying a transient failure: exponential backoff with
/// jitter, or the server's `Retry-After` when it gave one.
package struct RetryPolicy: Sendable, Equatable {
    /// Retries after the first attempt; the budget is refilled whenever an attempt makes progress.
    package var maxRetries: Int
    /// The first delay, in seconds; doubled on each further failure.
    package var baseDelay: Double
    /// The longest backoff delay, in seconds.
    package var maxDelay: Double
    /// The longest `Retry-After` Haul honours; a server asking for more fails the download.
    package var maxRetryAfter: Double

    package init(maxRetries: Int = 5, baseDelay: Double = 1, maxDelay: Double = 30, maxRetryAfter: Double = 300) {
        self.maxRetries = maxRetries
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxRetryAfter = maxRetryAfter
    }

    /// The decision after the `failures`-th consecutive failure (1-based).
    package enum Decision: Equatable, Sendable {
        case retry(after: Double)
        case giveUp
    }

    /// The wait before the next try after `error`, the `failures`-th failure in a row; throws
    /// the error to give up with when the policy says so (``decide(failures:retryAfter:random:)``).
    package func delay(after error: HaulError, failures: Int) throws(HaulError) -> Double {
        guard case .retry(let delay) = decide(failures: failures, retryAfter: error.retryAfter) else {
            throw givingUp(error, failures: failures)
        }
        return delay
    }

    /// `error` as the final one after ``decide(failures:retryAfter:random:)`` gave up: when it was
    /// the server's Retry-After over ``maxRetryAfter`` rather than the count, the message says so.
    private func givingUp(_ error: HaulError, failures: Int) -> HaulError {
        guard failures <= maxRetries, let wait = error.retryAfter, wait > maxRetryAfter else { return error }
        var explained = HaulError(
            error.code,
            error.message + "; the server asks to wait \(Seconds.text(wait)) s, longer than the "
                + "\(Seconds.text(maxRetryAfter)) s retries wait",
            httpStatus: error.httpStatus, errno: error.errno, path: error.path, retryAfter: error.retryAfter)
        explained.isTransient = error.isTransient
        return explained
    }

    package func decide(failures: Int, retryAfter: Double?, random: Double = Double.random(in: 0..<1)) -> Decision {
        guard failures <= maxRetries else { return .giveUp }
        if let retryAfter {
            return retryAfter <= maxRetryAfter ? .retry(after: retryAfter) : .giveUp
        }
        let exponential = min(maxDelay, baseDelay * Double(1 << min(failures - 1, 30)))
        // "Equal jitter": half fixed, half random, so concurrent clients spread out but never
        // retry at once.
        return .retry(after: exponential / 2 + exponential / 2 * random)
    }
}

/// One transfer's retries: the failures in a row, and the bytes that arrived (or were sent)
/// since the last failure. Attempts that bring at least ``refillBytes`` between two failures
/// refill the budget, so a transfer that keeps making progress keeps going; attempts that bring
/// less count as failures in a row, so a server that drops every connection after a few bytes
/// cannot keep a transfer retrying once per connection for ever. Every retry loop (one
/// connection, ranges, streams, uploads) spends from one of these.
package struct RetryBudget: Sendable {
    /// The progress between two failures that refills the budget.
    package static let refillBytes: Int64 = 64 << 10

    package let policy: RetryPolicy
    /// Failures in a row so far (the attempt number of the last retry).
    package private(set) var failures = 0
    private var gained: Int64 = 0

    /// A budget with `failures` tries already spent (a probe that got a busy answer and waited).
    package init(_ policy: RetryPolicy, failures: Int = 0) {
        self.policy = policy
        self.failures = failures
    }

    /// `bytes` arrived (or were sent) since the last failure.
    package mutating func progressed(_ bytes: Int64) { gained += max(0, bytes) }

    /// A transient failure: the retry's number and the wait before it (the server's Retry-After,
    /// else backoff with jitter).
    /// - Throws: `error` (explained when a too-long Retry-After is the reason) to give up with.
    package mutating func failed(_ error: HaulError) throws(HaulError) -> (attempt: Int, delay: Double) {
        if gained >= Self.refillBytes { failures = 0 }
        gained = 0
        failures += 1
        return (failures, try policy.delay(after: error, failures: failures))
    }
}
