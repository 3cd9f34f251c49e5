import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Segment planning and work stealing (no I/O)", .fewAtOnce)
struct SegmentPlannerTests {
    @Test func splitsEvenlyUpToTheConnectionCount() {
        let p = SegmentPlanner(total: 8_000, connections: 4, minSplit: 1_000)
        #expect(p.segments.map { [$0.start, $0.end] } == [[0, 2000], [2000, 4000], [4000, 6000], [6000, 8000]])
    }

    @Test func theProbesAnswerStartsTheFirstShareAndItsConnectionTakesTheRest() {
        // Four equal shares of 2250; the probe's 1000 bytes start the first, the other 1250 of it
        // wait as a spare piece for the probe's connection.
        let p = SegmentPlanner(total: 9_000, connections: 4, minSplit: 1_000, first: 1_000)
        #expect(
            p.segments.map { [$0.start, $0.end] } == [
                [0, 1000], [1000, 2250], [2250, 4500], [4500, 6750], [6750, 9000],
            ])
        #expect(p.segments.map(\.active) == [true, false, false, false, false], "the first is already running")
        // The other connections take the full shares; the spare is left for the probe's connection,
        // so each carries 2250 bytes (before: the first free connection took the spare).
        var taking = p
        let taken = (0..<3).compactMap { _ in taking.assign() }.map { [$0.start, $0.end] }
        #expect(taken.sorted { $0[0] < $1[0] } == [[2250, 4500], [4500, 6750], [6750, 9000]])
        taking.advance(0, to: 1000)
        taking.release(0)
        #expect(taking.assign().map { [$0.start, $0.end] } == [1000, 2250])
        // A spare below the minimum is not planned: the rest goes to the other connections.
        let q = SegmentPlanner(total: 8_000, connections: 4, minSplit: 1_000, first: 2_000)
        #expect(q.segments.map { [$0.start, $0.end] } == [[0, 2000], [2000, 4000], [4000, 6000], [6000, 8000]])
        // A resume (some bytes done) plans no such first range.
        let resumed = SegmentPlanner(
            total: 8_000, completed: [ByteRange(0, 500)], connections: 4, minSplit: 1_000, first: 2_000)
        #expect(resumed.segments.first.map { [$0.start, $0.end, $0.cursor] } == [0, 500, 500])
    }

    @Test func respectsTheMinimumSplitSize() {
        #expect(
            SegmentPlanner(total: 3_000, connections: 8, minSplit: 1_000).segments.map { [$0.start, $0.end] } == [
                [0, 1000], [1000, 2000], [2000, 3000],
            ])
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

    @Test func onlyRunningRangesTooSmallToSplitMayBeRacedAndEachOnce() {
        var p = SegmentPlanner(total: 8_000, connections: 2, minSplit: 1_000)
        let a = p.assign()!
        #expect(p.hedgeable.isEmpty, "an untaken range is work: no race")
        let b = p.assign()!
        p.advance(a.id, to: 4_000)
        p.release(a.id)
        p.advance(b.id, to: 5_000)  // 3_000 left: half of it is worth a steal
        #expect(p.hedgeable.isEmpty)
        let stolen = p.assign()!  // [6_500, 8_000)
        p.advance(b.id, to: 5_500)
        // b has 1_000 left, the stolen one 1_500: neither splits; the one with most left first.
        #expect(p.hedgeable == [stolen.id, b.id])
        let race = p.hedge(b.id)!
        #expect(race.id == b.id && race.cursor == 5_500 && race.end == 6_500, "its rest, as it stands")
        #expect(p.hedge(b.id) == nil, "raced once")
        #expect(p.hedgeable == [stolen.id])
        // Either connection's bytes count; one stopping leaves the other on it.
        p.advance(b.id, to: 6_000)
        p.release(b.id)
        #expect(p.segments.first { $0.id == b.id }?.active == true)
        #expect(p.assign() == nil, "still running: not free work")
        let complete = p.advance(b.id, to: 6_500)
        #expect(complete)
    }

    @Test func aRangeIsRacedOnlyWhenANewRequestIsAtLeastTwiceAsFast() {
        var p = SegmentPlanner(total: 4_000, connections: 2, minSplit: 1_000)
        let a = p.assign()!
        let b = p.assign()!
        p.advance(a.id, to: 2_000)
        p.release(a.id)
        p.advance(b.id, to: 2_500)  // 1_500 left: too little to split
        #expect(p.race(fresh: 1_000, speeds: [b.id: 1_000]) == nil, "connections at one pace")
        #expect(p.race(fresh: 1_900, speeds: [b.id: 1_000]) == nil, "not twice as fast")
        #expect(p.race(fresh: 5_000, speeds: [:]) == nil, "no speed known for it yet")
        #expect(p.race(fresh: 2_000, speeds: [b.id: 1_000])?.id == b.id)
        #expect(p.race(fresh: 1e9, speeds: [b.id: 1]) == nil, "raced once")
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

@Suite("Slow connection detection", .fewAtOnce)
struct SlowConnectionDetectorTests {
    /// Feeds `speeds` (bytes/s per fetch) for `seconds` in quarter-second steps; returns the
    /// verdicts of the last step.
    func feed(
        _ detector: inout SlowConnectionDetector, _ speeds: [Int: Int64], from start: Double = 0, seconds: Double,
        remaining: Int64 = 100_000_000
    ) -> [SlowConnectionDetector.Verdict] {
        var verdicts: [SlowConnectionDetector.Verdict] = []
        var t = start
        while t <= start + seconds + 1e-9 {
            let running = speeds.mapValues { (written: Int64(Double($0) * t), remaining: remaining) }
            verdicts += detector.observe(running, at: t)
            t += 0.25
        }
        return verdicts
    }

    @Test func aConnectionUnderAQuarterOfTheOthersIsNamedOnceItsWindowIsFull() {
        var d = SlowConnectionDetector(window: 3)
        let early = feed(&d, [1: 1_000_000, 2: 1_000_000, 3: 100_000], seconds: 2.5)
        #expect(early.isEmpty, "not watched for a full window yet")
        let verdicts = feed(&d, [1: 1_000_000, 2: 1_000_000, 3: 100_000], from: 2.75, seconds: 0.5)
        #expect(verdicts.map(\.fetch) == [3])
        #expect(verdicts.first?.reason == "much slower than the other connections")
    }

    @Test func evenSpeedsAndModeratelySlowerOnesAreLeftAlone() {
        var d = SlowConnectionDetector(window: 3)
        #expect(feed(&d, [1: 1_000_000, 2: 900_000, 3: 400_000], seconds: 6).isEmpty)
    }

    @Test func theOthersMayHaveFinishedRecently() {
        var d = SlowConnectionDetector(window: 3)
        _ = feed(&d, [1: 2_000_000, 2: 50_000], seconds: 1)  // 1 finishes after a second
        let verdicts = feed(&d, [2: 50_000], from: 1.25, seconds: 2.5)
        #expect(verdicts.map(\.fetch) == [2], "compared with the one that just finished")
    }

    @Test func aFastRangeSeenOnlyTwiceIsAReference() {
        var d = SlowConnectionDetector(window: 3)
        _ = feed(&d, [1: 4_000_000, 2: 20_000], seconds: 0.25)  // two samples of 1, then it ends
        let verdicts = feed(&d, [2: 20_000], from: 0.5, seconds: 3)
        #expect(verdicts.map(\.fetch) == [2])
    }

    @Test func aRangeThatEndedBetweenSamplesStillCounts() {
        var d = SlowConnectionDetector(window: 3)
        d.ended(1, bytes: 1_500_000, seconds: 0.2, at: 0.2)  // never sampled while running
        let verdicts = feed(&d, [2: 20_000], from: 0.25, seconds: 3)
        #expect(verdicts.map(\.fetch) == [2])
        var expired = SlowConnectionDetector(window: 3)
        expired.ended(1, bytes: 1_500_000, seconds: 0.2, at: 0.2)
        #expect(feed(&expired, [2: 20_000], from: 7, seconds: 3).isEmpty, "a reference from long ago is gone")
    }

    /// Ranges that end within 50 ms (a fast server on a short path) were not kept as references:
    /// a connection stalled beside them was left to the idle timeout (36 s in a CLI run here).
    @Test func aRangeThatEndedAlmostAtOnceIsAReferenceToo() {
        var d = SlowConnectionDetector(window: 3)
        d.ended(1, bytes: 1_000_000, seconds: 0.01, at: 0.05)
        d.ended(2, bytes: 1_000_000, seconds: 0, at: 0.05)
        let verdicts = feed(&d, [3: 0], from: 0.25, seconds: 3, remaining: 1_000_000)
        #expect(verdicts.map(\.fetch) == [3])
        #expect(verdicts.first?.speed == 0)
        var empty = SlowConnectionDetector(window: 3)
        empty.ended(1, bytes: 0, seconds: 0.01, at: 0.05)
        #expect(feed(&empty, [3: 0], from: 0.25, seconds: 3).isEmpty, "a range that wrote nothing is no reference")
    }

    @Test func aNearlyFinishedRangeIsNotReplaced() {
        var d = SlowConnectionDetector(window: 3)
        // 200 kB left at 100 kB/s: done within the next window anyway.
        #expect(feed(&d, [1: 1_000_000, 2: 100_000], seconds: 4, remaining: 200_000).isEmpty)
    }

    @Test func theFloorAppliesEvenWhenAllAreEquallySlowAndTheRelativeRuleIsOff() {
        var d = SlowConnectionDetector(window: 3, lowestSpeed: 200_000, relative: false)
        let verdicts = feed(&d, [1: 100_000, 2: 100_000], seconds: 3)
        #expect(Set(verdicts.map(\.fetch)) == [1, 2])
        #expect(verdicts.allSatisfy { $0.reason == "below the lowest speed limit" })
        var paced = SlowConnectionDetector(window: 3, relative: false)
        #expect(feed(&paced, [1: 1_000_000, 2: 10_000], seconds: 5).isEmpty, "paced: no relative rule")
    }
}
