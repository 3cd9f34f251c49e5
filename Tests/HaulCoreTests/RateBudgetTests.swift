import HaulTestTraits
import Testing

@testable import HaulCore

/// Token buckets (times given, no clock): a transfer under two budgets (its download's limit and
/// the overall one) spends from both or from neither.
@Suite(.fewAtOnce) struct RateBudgetTests {
    @Test func aBudgetInDebtMakesItsTakersWaitUntilItIsPaidBack() {
        let budget = RateBudget(bytesPerSecond: 1000)
        #expect(budget.take(1000, at: 0) == nil, "a chunk may go into debt")
        // 0.5 s of debt left: a pause of at most a quarter second, then ask again.
        #expect(budget.take(10, at: 0.5) == RateBudget.longestWait)
        #expect(budget.take(10, at: 0.875) == 0.125)
        #expect(budget.take(10, at: 1) == nil)
    }

    /// `haul serve`'s speed limit changes while transfers draw on the budget: a new rate forgives
    /// the old one's debt, no rate never pauses, and a rate set later paces from then on.
    @Test func aBudgetsRateChangesWhileItIsSpent() {
        let budget = RateBudget(bytesPerSecond: 100)
        #expect(budget.take(1000, at: 0) == nil)
        #expect(budget.take(10, at: 1) == RateBudget.longestWait, "9 s of debt at 100 B/s")
        budget.setRate(nil)
        #expect(budget.rate == nil)
        for n in 0..<100 { #expect(budget.take(1 << 20, at: 1 + Double(n) / 1000) == nil) }
        budget.setRate(1000)
        #expect(budget.rate == 1000)
        #expect(budget.take(1000, at: 2) == nil)
        #expect(budget.take(10, at: 2.1) == RateBudget.longestWait)
        #expect(budget.take(10, at: 3.5) == nil)
        budget.setRate(0)
        #expect(budget.rate == nil && budget.take(1 << 30, at: 3) == nil && budget.take(1, at: 3) == nil)
        #expect(RateBudget(bytesPerSecond: nil).take(1 << 30, at: 0) == nil)
    }

    /// The overall budget said wait after the download's own had already been charged: each
    /// try charged it again, and with both limits set a download ran below its own limit
    /// (4 x 4 MiB under --limit-rate 2M and --max-overall-rate 4M took 4.39 s, not 4).
    @Test func aTransferWaitingForOneBudgetIsNotChargedByTheOther() {
        let own = RateBudget(bytesPerSecond: 100)
        let shared = RateBudget(bytesPerSecond: 1000)
        #expect(shared.take(1000, at: 0) == nil)  // another transfer's chunk: in debt for 1 s
        #expect(RateBudget.take(100, from: own, shared, at: 0.5) == RateBudget.longestWait)
        // Paid back at 1 s: the transfer goes on, its own budget untouched by the refused try.
        #expect(RateBudget.take(100, from: own, shared, at: 1) == nil)
        // And both were charged for the chunk that went through (own: 25 bytes refilled, its
        // cap, less 100 is 75 in debt at 100 B/s).
        #expect(RateBudget.take(1, from: own, nil, at: 1) == RateBudget.longestWait)
        #expect(RateBudget.take(1, from: own, nil, at: 1.625) == 0.125)
        #expect(RateBudget.take(1, from: nil, shared, at: 1) == 0.1)
    }
}
