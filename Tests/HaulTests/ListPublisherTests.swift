import Foundation
import HaulCore
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import Haul

@Suite("The manager's list publisher: idle waiters", .fewAtOnce)
struct ListPublisherTests {
    /// A flush that looked while the queue was idle must not let go a waiter that came after
    /// items were added: `haul get -j` once exited 0 with nothing run that way, when the network
    /// watcher's first change was flushed just as it added its URLs and waited.
    @Test func aWaiterThatCameAfterAnAddIsNotLetGoByAnEarlierLook() async throws {
        // The first two looks (the change's and its flush's) still see the empty queue; every
        // later one sees the items just added.
        let looks = Locked(0)
        let idleForGood = Locked(false)
        let publisher = ListPublisher(file: nil) { _ in
            let n = looks.withLock { n -> Int in
                n += 1
                return n
            }
            return (idleForGood.get() || n <= 2, [])
        }
        let released = Locked(false)
        // The waiter comes while the queue is busy (its own look sees items).
        looks.set(100)
        let waiter = Task {
            await publisher.waitUntilIdle()
            released.set(true)
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(!released.get(), "busy: still waiting")
        // A change whose looks come out idle, as if taken before the add.
        looks.set(0)
        publisher.changed(persist: false)
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(!released.get(), "let go by a look older than the add")
        // The queue really goes idle: the next change lets it go.
        idleForGood.set(true)
        publisher.changed(persist: false)
        _ = await eventually(timeout: 10) { released.get() }
        #expect(released.get())
        waiter.cancel()
    }
}
