import Foundation
import HaulTestTraits
import Testing

@testable import HaulCLI
@testable import HaulCore

@Suite("Ctrl-C handling", .fewAtOnce)
struct InterruptsTests {
    /// A signal that came while no download had its handler registered (between two downloads of
    /// a list, or before `-j` registered its own) was spent on nothing: the command went on, and
    /// only a second Ctrl-C stopped it (a CLI test once saw exit 0 instead of 130 under load,
    /// which this would explain; not proven).
    @Test func aSignalBeforeAnyHandlerStillStopsTheNextOne() {
        let interrupts = Interrupts(signals: [])
        interrupts.fire()
        let called = Locked(0)
        let token = interrupts.onInterrupt { called.withLock { $0 += 1 } }
        #expect(called.get() == 1, "a handler registered after the signal runs at once")
        interrupts.remove(token)
    }

    @Test func aHandlerRunsOnceForItsSignal() {
        let interrupts = Interrupts(signals: [])
        let called = Locked(0)
        let token = interrupts.onInterrupt { called.withLock { $0 += 1 } }
        #expect(called.get() == 0)
        interrupts.fire()
        #expect(called.get() == 1)
        interrupts.remove(token)
    }
}
