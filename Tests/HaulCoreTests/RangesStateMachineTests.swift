import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

/// A segmented download's decisions after each range's fetch, without a socket.
@Suite("Ranged download decisions (no I/O)", .fewAtOnce)
struct RangesStateMachineTests {
    func transient(_ message: String = "connection reset") -> HaulError {
        var error = HaulError(.network, message)
        error.isTransient = true
        return error
    }

    @Test func aReplacedConnectionAsksAgainAtOnceUntilTheRetriesRunOut() {
        var m = RangesStateMachine(retry: RetryPolicy(maxRetries: 2))
        var streak = 0
        let slow = transient("slow")
        #expect(m.rangeEnded(.replaced(slow), slowStreak: &streak) == .replace(attempt: 1, error: slow))
        #expect(m.rangeEnded(.replaced(slow), slowStreak: &streak) == .replace(attempt: 2, error: slow))
        guard case .fail(let final) = m.rangeEnded(.replaced(slow), slowStreak: &streak) else {
            Issue.record("a range slow on every try did not fail")
            return
        }
        #expect(!final.isTransient)
        var fresh = 0
        #expect(m.rangeEnded(.fetched, slowStreak: &fresh) == .takeNext && fresh == 0)
    }

    @Test func aFetchedRangeEndsTheStreak() {
        var m = RangesStateMachine(retry: RetryPolicy(maxRetries: 1))
        var streak = 0
        _ = m.rangeEnded(.replaced(transient()), slowStreak: &streak)
        #expect(m.rangeEnded(.fetched, slowStreak: &streak) == .takeNext)
        #expect(m.rangeEnded(.replaced(transient()), slowStreak: &streak) == .replace(attempt: 1, error: transient()))
    }

    /// Turned away before its first byte while others fetch: this connection leaves its range
    /// to them instead of spending the download's retries.
    @Test func aConnectionTurnedAwayWhileOthersFetchLeavesItsRange() {
        var m = RangesStateMachine(retry: RetryPolicy(maxRetries: 1))
        var streak = 0
        let busy = transient("HTTP 503")
        #expect(m.rangeEnded(.failed(busy, flowing: false, othersFlowing: true), slowStreak: &streak) == .leave)
        #expect(m.rangeEnded(.failed(busy, flowing: false, othersFlowing: true), slowStreak: &streak) == .leave)
        guard
            case .retry(1, _, _) = m.rangeEnded(.failed(busy, flowing: true, othersFlowing: true), slowStreak: &streak)
        else {
            Issue.record("a dropped range with bytes flowing was not retried")
            return
        }
    }

    /// One budget for all connections: failures in a row give up, bytes that came refill it.
    @Test func theConnectionsShareOneBudgetThatBytesRefill() {
        var m = RangesStateMachine(retry: RetryPolicy(maxRetries: 2))
        var a = 0
        var b = 0
        let drop = transient()
        guard case .retry(1, _, _) = m.rangeEnded(.failed(drop, flowing: true, othersFlowing: false), slowStreak: &a),
            case .retry(2, _, _) = m.rangeEnded(.failed(drop, flowing: true, othersFlowing: false), slowStreak: &b)
        else {
            Issue.record("not retried")
            return
        }
        m.fetched(1 << 20)
        guard case .retry(1, _, _) = m.rangeEnded(.failed(drop, flowing: true, othersFlowing: false), slowStreak: &a)
        else {
            Issue.record("1 MiB did not refill the budget")
            return
        }
        _ = m.rangeEnded(.failed(drop, flowing: true, othersFlowing: false), slowStreak: &b)
        guard case .fail = m.rangeEnded(.failed(drop, flowing: true, othersFlowing: false), slowStreak: &a) else {
            Issue.record("the shared budget did not run out")
            return
        }
        let gone = HaulError(.httpStatus, "HTTP 404", httpStatus: 404)
        #expect(m.rangeEnded(.failed(gone, flowing: false, othersFlowing: true), slowStreak: &a) == .fail(gone))
    }
}
