import Testing

@testable import HaulCore

@Suite("Segment planning and work stealing (no I/O)")
struct SegmentPlannerTests {
    @Test func splitsEvenlyUpToTheConnectionCount() {
        let p = SegmentPlanner(total: 8_000, connections: 4, minSplit: 1_000)
        #expect(p.segments.map { [$0.start, $0.end] } == [[0, 2000], [2000, 4000], [4000, 6000], [6000, 8000]])
    }

    @Test func respectsTheMinimumSplitSize() {
        #expect(SegmentPlanner(total: 3_000, connections: 8, minSplit: 1_000).segments.count == 2)
        #expect(SegmentPlanner(total: 1_500, connections: 8, minSplit: 1_000).segments.count == 1)
    }

    @Test func resumesOnlyTheGaps() {
        let p = SegmentPlanner(
            total: 10_000, completed: [ByteRange(0, 3_000), ByteRange(5_000, 6_000)], connections: 2, minSplit: 500)
        let todo = p.segments.filter { !$0.isDone }.map { [$0.start, $0.end] }
        #expect(todo == [[3000, 5000], [6000, 10000]])
        #expect(p.completedBytes == 4_000)
        #expect(p.writtenRanges == [ByteRange(0, 3_000), ByteRange(5_000, 6_000)])
    }

    @Test func aFreeConnectionStealsHalfOfTheLargestRemainder() {
        var p = SegmentPlanner(total: 8_000, connections: 2, minSplit: 1_000)
        let a = p.assign()!
        let b = p.assign()!
        p.advance(a.id, to: 4_000)  // a is done
        p.release(a.id)
        p.advance(b.id, to: 4_500)  // b has 3_500 left
        let stolen = p.assign()!
        #expect(stolen.start == 6_250 && stolen.end == 8_000)
        #expect(p.end(of: b.id) == 6_250)
        p.advance(b.id, to: 7_000)  // past its new end: clamped
        #expect(p.segments.first { $0.id == b.id }?.cursor == 6_250)
    }

    @Test func noStealingBelowTwiceTheMinimumSplit() {
        var p = SegmentPlanner(total: 4_000, connections: 2, minSplit: 1_000)
        let a = p.assign()!
        let b = p.assign()!
        p.advance(a.id, to: 2_000)
        p.release(a.id)
        p.advance(b.id, to: 2_500)  // 1_500 left < 2_000
        #expect(p.assign() == nil)
    }

    @Test func releasedWorkIsHandedOutAgainFromItsCursor() {
        var p = SegmentPlanner(total: 4_000, connections: 1, minSplit: 1_000)
        let a = p.assign()!
        p.advance(a.id, to: 1_234)
        p.release(a.id)  // connection dropped
        let again = p.assign()!
        #expect(again.id == a.id && again.cursor == 1_234)
        p.advance(a.id, to: 4_000)
        #expect(p.isComplete && p.writtenRanges == [ByteRange(0, 4_000)])
    }
}
