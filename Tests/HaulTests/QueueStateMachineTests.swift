import Foundation
import HaulCore
import HaulTestTraits
import Testing

@testable import Haul

/// The manager's queue without a socket, a file or a thread: events in, actions out.
@Suite("QueueStateMachine: the manager's rules as events and actions", .fewAtOnce)
struct QueueStateMachineTests {
    final class FakeTask: Sendable {}
    typealias Queue = QueueStateMachine<FakeTask>

    /// What an action list asks for, in words the tests compare.
    enum Step: Equatable {
        case create(String)
        case resume(String)
        case suspend, cancel, cancelKeepingBytes
        case success(String)
        case failure(String, HaulError.Code)
        case forget(String)
    }

    /// A queue and the names of its items (the URL's last component).
    struct Harness {
        var queue: Queue
        var ids: [String: UUID] = [:]
        var tasks: [String: FakeTask] = [:]

        init(_ policy: Queue.Policy = Queue.Policy()) { queue = Queue(policy: policy) }

        func name(_ id: UUID) -> String { ids.first { $0.value == id }?.key ?? "?" }

        func steps(_ actions: [Queue.Action]) -> [Step] {
            actions.map { action in
                switch action {
                case .create(let id, _, _, _): return .create(name(id))
                case .resume(let id, _): return .resume(name(id))
                case .suspend: return .suspend
                case .cancel: return .cancel
                case .cancelKeepingBytes: return .cancelKeepingBytes
                case .deliver(let id, .success, _): return .success(name(id))
                case .deliver(let id, .failure(let e), _): return .failure(name(id), e.code)
                case .forget(let id): return .forget(name(id))
                }
            }
        }

        /// Carries out the `create` actions (a task for each, which the queue takes) and
        /// reports deliveries as delivered; the other steps.
        mutating func run(_ actions: [Queue.Action]) -> [Step] {
            var delivered = 0
            for case .create(let id, _, _, _) in actions {
                let task = FakeTask()
                if queue.created(task, for: id) { tasks[name(id)] = task }
            }
            for case .deliver in actions { delivered += 1 }
            queue.delivered(delivered)
            return steps(actions)
        }

        mutating func add(
            _ name: String, host: String = "a", priority: Int = 0, needsNetwork: Bool = true
        ) -> [Step] {
            let item = item(
                name, host: host, priority: priority, sequence: queue.nextSequence(), needsNetwork: needsNetwork)
            return run(queue.add(item, options: DownloadOptions()))
        }

        /// An item named `name` (its id noted), not yet added.
        mutating func item(
            _ name: String, host: String = "a", priority: Int = 0, state: Queue.Item.State = .queued, sequence: Int,
            needsNetwork: Bool = true
        ) -> Queue.Item {
            let id = UUID()
            ids[name] = id
            let url = URL(string: "http://\(host)/\(name)")!
            return Queue.Item(
                id: id, url: url, target: .directory(URL(fileURLWithPath: "/tmp")), priority: priority, state: state,
                sequence: sequence, origin: url.originKey, needsNetwork: needsNetwork)
        }

        mutating func complete(_ name: String) -> [Step] {
            let url = URL(fileURLWithPath: "/tmp/" + name)
            return run(queue.completed(ids[name]!, from: tasks[name]!, at: url, result: nil, progress: nil))
        }

        mutating func fail(_ name: String, _ error: HaulError, lostNetwork: Bool = false) -> [Step] {
            run(queue.failed(ids[name]!, from: tasks[name]!, error, lostNetwork: lostNetwork).actions)
        }

        func state(_ name: String) -> Queue.Item.State? { queue.items[ids[name]!]?.state }
    }

    static let wifi = FakeNetwork.path(.wifi)
    static let offline = FakeNetwork.path(nil)

    @Test func startsUpToTheCapsAndTheNextWhenOneEnds() {
        var h = Harness(Queue.Policy(maxRunning: 2, maxPerHost: 2))
        #expect(h.add("1") == [.create("1")])
        #expect(h.add("2") == [.create("2")])
        #expect(h.add("3") == [])
        #expect(h.complete("1") == [.success("1"), .create("3")])
        #expect(h.state("1") == .completed && h.state("3") == .running)
    }

    @Test func theHostCapHoldsOnlyThatHost() {
        var h = Harness(Queue.Policy(maxRunning: 3, maxPerHost: 1))
        #expect(h.add("1", host: "a") == [.create("1")])
        #expect(h.add("2", host: "a") == [])
        #expect(h.add("3", host: "b") == [.create("3")])
        #expect(h.complete("1") == [.success("1"), .create("2")])
    }

    @Test func higherPriorityStartsFirstAndEqualOnesInTheOrderAdded() {
        var h = Harness(Queue.Policy(maxRunning: 1))
        _ = h.add("first")
        _ = h.add("low")
        _ = h.add("high", priority: 5)
        _ = h.add("low2")
        #expect(h.complete("first") == [.success("first"), .create("high")])
        #expect(h.complete("high") == [.success("high"), .create("low")])
        #expect(h.complete("low") == [.success("low"), .create("low2")])
    }

    @Test func aPauseBeforeTheTaskComesBackDropsIt() {
        var h = Harness()
        let item = h.item("x", state: .queued, sequence: 1)
        let id = item.id
        let actions = h.queue.add(item)
        #expect(h.steps(actions) == [.create("x")])
        #expect(h.queue.pause(id).isEmpty)
        let wanted = h.queue.created(FakeTask(), for: id)
        #expect(!wanted, "the task made for it is not resumed")
        #expect(h.state("x") == .paused)
    }

    @Test func aPausedItemContinuesWithTheSameTask() throws {
        var h = Harness()
        _ = h.add("x")
        let task = try #require(h.tasks["x"])
        #expect(h.steps(h.queue.pause(h.ids["x"]!)) == [.suspend])
        let resumed = h.queue.resume(h.ids["x"]!)
        #expect(h.steps(resumed) == [.resume("x")])
        if case .resume(_, let again) = resumed.first { #expect(again === task) }
        #expect(h.queue.isCurrent(task, for: h.ids["x"]!))
    }

    @Test func aCancelledPausedItemStartsAgainOnlyAfterItsOldTaskHasEnded() throws {
        var h = Harness()
        _ = h.add("x")
        let old = try #require(h.tasks["x"])
        let id = h.ids["x"]!
        _ = h.queue.pause(id)
        #expect(h.run(h.queue.cancel(id)) == [.failure("x", .cancelled), .cancel])
        #expect(h.queue.resume(id).isEmpty, "its old task is still removing the files")
        #expect(h.state("x") == .queued)
        let ended = h.queue.failed(id, from: old, HaulError(.cancelled, "cancelled"), lostNetwork: false)
        #expect(h.steps(ended.actions) == [.create("x")])
    }

    @Test func aStoppedTaskThatHadEveryByteCompletesItsPausedItem() throws {
        var h = Harness()
        _ = h.add("x")
        let id = h.ids["x"]!
        _ = h.queue.pause(id)
        #expect(h.complete("x") == [.success("x")])
        #expect(h.state("x") == .completed)
    }

    @Test func aLostNetworkSuspendsAndItsReturnResumesTheSameTasks() {
        var h = Harness()
        _ = h.add("remote")
        _ = h.add("local", host: "localhost", needsNetwork: false)
        #expect(h.steps(h.queue.networkChanged(allowed: false, path: Self.offline)) == [.suspend])
        #expect(h.state("remote") == .waitingForNetwork && h.state("local") == .running)
        #expect(h.queue.blockedPath == Self.offline)
        #expect(h.add("later") == [], "queued while offline: it waits too")
        #expect(h.state("later") == .waitingForNetwork)
        #expect(
            h.steps(h.queue.networkChanged(allowed: true, path: Self.wifi)) == [.resume("remote"), .create("later")])
        #expect(h.queue.blockedPath == nil)
    }

    @Test func withoutWaitingALostNetworkFailsKeepingTheBytes() {
        var h = Harness(Queue.Policy(waitsForConnectivity: false))
        _ = h.add("x")
        #expect(
            h.run(h.queue.networkChanged(allowed: false, path: Self.offline)) == [
                .failure("x", .networkUnavailable), .cancelKeepingBytes,
            ])
    }

    @Test func aTransientFailureWithThePathGoneWaitsAndAsksForARecheck() {
        var h = Harness()
        _ = h.add("x")
        var error = HaulError(.network, "reset")
        error.isTransient = true
        let answer = h.queue.failed(h.ids["x"]!, from: h.tasks["x"]!, error, lostNetwork: true)
        #expect(answer.actions.isEmpty && answer.recheck)
        #expect(h.state("x") == .waitingForNetwork)
        #expect(h.fail("x", error) == [], "a second report of the same task changes nothing")
    }

    @Test func aFailureIsDeliveredAndTheQueueIsIdleOnlyOnceItHasRun() {
        var h = Harness()
        _ = h.add("x")
        let actions = h.queue.failed(
            h.ids["x"]!, from: h.tasks["x"]!, HaulError(.httpStatus, "404"), lostNetwork: false
        )
        .actions
        #expect(h.steps(actions) == [.failure("x", .httpStatus)])
        #expect(!h.queue.isIdle, "the completion handler has not run yet")
        h.queue.delivered(1)
        #expect(h.queue.isIdle)
    }

    @Test func theOldestFinishedItemsLeaveTheListPastTheBound() {
        var h = Harness(Queue.Policy(maxRunning: 1, maxFinished: 2))
        for name in ["1", "2", "3", "4"] { _ = h.add(name) }
        #expect(h.complete("1") == [.success("1"), .create("2")])
        #expect(h.fail("2", HaulError(.httpStatus, "404")) == [.failure("2", .httpStatus), .create("3")])
        // Resumed, it is no longer finished; when it fails again it is the newest.
        _ = h.queue.resume(h.ids["2"]!)
        #expect(h.complete("3") == [.success("3"), .create("4")])
        #expect(h.complete("4") == [.success("4"), .create("2"), .forget("1")])
        #expect(h.fail("2", HaulError(.httpStatus, "404")) == [.failure("2", .httpStatus), .forget("3")])
        #expect(Set(h.queue.items.values.map { h.name($0.id) }) == ["2", "4"])
    }

    @Test func onlyAFinishedItemCanBeRemoved() {
        var h = Harness(Queue.Policy(maxRunning: 1))
        _ = h.add("1")
        _ = h.add("2")
        let running = h.queue.remove(h.ids["1"]!)
        let queued = h.queue.remove(h.ids["2"]!)
        #expect(!running && !queued)
        _ = h.complete("1")
        let finished = h.queue.remove(h.ids["1"]!)
        #expect(finished)
        #expect(h.queue.items[h.ids["1"]!] == nil)
        let again = h.queue.remove(h.ids["1"]!)
        #expect(!again, "already gone")
    }

    @Test func aShutdownHandsBackEveryTaskAndStartsNothingMore() {
        var h = Harness(Queue.Policy(maxRunning: 1))
        _ = h.add("1")
        _ = h.add("2")
        _ = h.run(h.queue.pause(h.ids["1"]!))
        // The pause started "2"; both tasks are handed back.
        #expect(h.queue.shutdown().count == 2)
        #expect(h.add("3") == [])
        #expect(!h.queue.isIdle, "the cancels have not ended")
        h.queue.shutdownEnded()
        #expect(h.queue.isIdle)
    }

    /// A task made while the shutdown ran is not taken (nobody would stop it).
    @Test func aTaskMadeDuringTheShutdownIsNotTaken() {
        var h = Harness()
        let item = h.item("x", state: .queued, sequence: 1)
        let id = item.id
        let actions = h.queue.add(item)
        #expect(h.steps(actions) == [.create("x")])
        #expect(h.queue.shutdown().isEmpty)
        let taken = h.queue.created(FakeTask(), for: id)
        #expect(!taken)
    }

    @Test func reloadedItemsThatWereRunningAreQueuedAgain() {
        var h = Harness()
        let actions = h.queue.add(h.item("x", state: .running, sequence: 7))
        #expect(h.steps(actions) == [.create("x")])
        #expect(h.queue.nextSequence() == 8, "new items come after the reloaded ones")
    }
}
