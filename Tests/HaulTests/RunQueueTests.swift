import Foundation
import HaulTestTraits
import Testing

@testable import Haul

/// The manager's run queue: order kept across removals from the front (which move a start
/// index and, now and then, give the spent slots back) and from the middle.
@Suite(.fewAtOnce) struct RunQueueTests {
    /// The queued ids from first to last.
    private func contents(_ queue: RunQueue<UUID>) -> [UUID] {
        (queue.startIndex..<queue.endIndex).map { queue[$0] }
    }

    @Test func removingFromTheFrontKeepsTheRestInOrderPastCompaction() {
        var queue = RunQueue<UUID>()
        let ids = (0..<1000).map { _ in UUID() }
        for id in ids { queue.append(id) }
        var index = queue.startIndex
        for expected in ids.prefix(700) {
            #expect(queue[index] == expected)
            index = queue.remove(at: index)
        }
        #expect(index == queue.startIndex)
        #expect(contents(queue) == Array(ids.suffix(300)))
        #expect(queue.last == ids.last)
    }

    @Test func removingFromTheMiddleReturnsTheFollowingItem() {
        var queue = RunQueue<UUID>()
        let ids = (0..<5).map { _ in UUID() }
        for id in ids { queue.append(id) }
        _ = queue.remove(at: queue.startIndex)
        let next = queue.remove(at: queue.startIndex + 1)  // ids[2]
        #expect(queue[next] == ids[3])
        #expect(contents(queue) == [ids[1], ids[3], ids[4]])
    }

    @Test func insertGoesBeforeTheFirstThatRunsAfterAndIgnoresSpentSlots() {
        var queue = RunQueue<UUID>()
        let ids = (0..<4).map { _ in UUID() }
        for id in ids { queue.append(id) }
        _ = queue.remove(at: queue.startIndex)  // ids[0] is spent, still in the array
        let urgent = UUID()
        queue.insert(urgent) { _ in true }
        #expect(contents(queue) == [urgent, ids[1], ids[2], ids[3]])
        let late = UUID()
        queue.insert(late) { _ in false }
        #expect(contents(queue) == [urgent, ids[1], ids[2], ids[3], late])
    }

    @Test func anEmptiedQueueHasNoLast() {
        var queue = RunQueue<UUID>()
        queue.append(UUID())
        _ = queue.remove(at: queue.startIndex)
        #expect(queue.last == nil)
        #expect(queue.startIndex == queue.endIndex)
    }
}
