import Foundation
import Synchronization
import Testing

/// At most a few test cases run at once, however many Swift Testing would start: on two busy
/// cores, all of them at once (a few hundred servers, curl threads and `haul` processes) starve
/// each of them for tens of seconds, past any bound a test could keep. Applied to every suite,
/// so `swift test` itself keeps the limit (no runner flag or environment needed). The width is
/// twice the active cores, at least 2; `HAUL_TEST_WIDTH=N` sets it.
public struct FewAtOnce: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // A case inside two suites that both carry the trait takes one slot, not two.
        if Self.holding {
            try await function()
            return
        }
        await Self.slots.acquire()
        defer { Self.slots.release() }
        try await Self.$holding.withValue(true) { try await function() }
    }

    @TaskLocal static var holding = false

    static let slots = Slots(
        width: ProcessInfo.processInfo.environment["HAUL_TEST_WIDTH"].flatMap { Int($0) }
            ?? max(2, 2 * ProcessInfo.processInfo.activeProcessorCount))
}

extension Trait where Self == FewAtOnce {
    /// At most a few test cases at once (``FewAtOnce``).
    public static var fewAtOnce: FewAtOnce { FewAtOnce() }
}

/// A counting semaphore for async callers: waiters are resumed in the order they came.
final class Slots: Sendable {
    private struct State {
        var free: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state: Mutex<State>

    init(width: Int) { state = Mutex(State(free: max(1, width))) }

    func acquire() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.free > 0 {
                    s.free -= 1
                    return true
                }
                s.waiters.append(waiter)
                return false
            }
            if now { waiter.resume() }
        }
    }

    func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty {
                s.free += 1
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }
}
