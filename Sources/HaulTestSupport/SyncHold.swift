import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// Holds every fsync of the chosen paths, as a slow disk would, until ``release()`` (each for at
/// most 60 s), through fault injection; a sync of `failing` fails with EIO instead. Call
/// ``remove()`` when done (in a `defer`).
package final class SyncHold: Sendable {
    private let heldNow: Locked<Set<String>>
    private let released: Locked<Bool>
    private let id: Int

    package init(_ paths: Set<String>, failing: String? = nil) {
        let (heldNow, released) = (Locked(Set<String>()), Locked(false))
        self.heldNow = heldNow
        self.released = released
        id = FaultInjection.add { call, _, path in
            guard call == .fsync, let path else { return nil }
            if paths.contains(path) {
                heldNow.withLock { _ = $0.insert(path) }
                let deadline = Date().addingTimeInterval(60)
                while !released.get() && Date() < deadline { usleep(1000) }
                heldNow.withLock { _ = $0.remove(path) }
            }
            return path == failing ? Errno(EIO) : nil
        }
    }

    /// The paths whose sync is being held right now.
    package var held: Set<String> { heldNow.get() }

    /// Lets every held sync (and those to come) go on.
    package func release() { released.set(true) }

    /// Releases what is held and removes the fault-injection hook (a test that ends early
    /// leaves no sync waiting out its 60 s).
    package func remove() {
        release()
        FaultInjection.remove(id)
    }
}
