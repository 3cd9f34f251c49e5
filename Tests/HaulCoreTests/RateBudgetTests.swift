import HaulTestTraits
import Testing

@testable import HaulCore

/// Token buckets (times given, no clock): a transfer under two budgets (its download's limit and
/// the overall one) spends from both or from neither.
@Suite(.fewAtOnce) struct RateBudgetTests {
    @Test func aBudgetInDebtMakesItsTakersWaitUntilItIsPaidBack() {
        let budget = RateBudget(bytesPerSecond: 1000)
        #expect(budget.take(1000, at: 0) == nil, "a chunk may go into debt")
        #expect(budget.take(10, at: 0.5) == 0.5)
        #expect(budget.take(10, at: 1) == nil)
    }

    /// The overall budget said wait after the download's own had already been charged: each
    /// try charged it again, and with both limits set a download ran below its own limit
    /// (4 x 4 MiB under --limit-rate 2M and --max-overall-rate 4M took 4.39 s, not 4).
    @Test func aTransferWaitingForOneBudgetIsNotChargedByTheOther() {
        let own = RateBudget(bytesPerSecond: 100)
        let shared = RateBudget(bytesPerSecond: 1000)
        #expect(shared.take(1000, at: 0) == nil)  // another transfer's chunk: in debt for 1 s
        #expect(RateBudget.take(100, from: own, shared, at: 0.5) == 0.5)
        // Paid back at 1 s: the transfer goes on, its own budget untouched by the refused try.
        #expect(RateBudget.take(100, from: own, shared, at: 1) == nil)
        // And both were charged for the chunk that went through (own: 25 bytes refilled, its
        // cap, less 100 is 75 in debt at 100 B/s).
        #expect(RateBudget.take(1, from: own, nil, at: 1) == 0.75)
        #expect(RateBudget.take(1, from: nil, shared, at: 1) == 0.1)
    }
}
