#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value behind a pthread mutex.
///
/// Used instead of `Synchronization.Mutex` because on Linux that one is built on raw futex calls
/// that ThreadSanitizer cannot see, so every access it protects is reported as a race
/// (`swift test --sanitize=thread`); pthread mutexes are understood by TSan.
/// Unchecked Sendable: every access to `value` holds the mutex, which also makes it exclusive:
/// the runtime's own check of each access is left out. `withLock` is inlinable, so that other
/// modules' calls are specialised and their closures inlined (it runs dozens of times for each
/// download); that makes `mutex` and `value` visible to the module, and nothing but `withLock`
/// may touch `value` (no check would catch an access without the lock).
package final class Locked<Value: Sendable>: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline @exclusivity(unchecked) var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @inlinable
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// A copy of the value.
    @inlinable
    package func get() -> Value { withLock { $0 } }

    /// Replaces the value.
    @inlinable
    package func set(_ newValue: Value) { withLock { $0 = newValue } }

    /// The value, leaving nil in its place: what is handed out once (a completion, a pending
    /// note) goes to the first caller only.
    @inlinable
    package func take<Wrapped>() -> Wrapped? where Value == Wrapped? {
        withLock { value in
            defer { value = nil }
            return value
        }
    }
}

/// A lock guarding no value of its own (state kept beside it): Foundation's `NSLock`.
extension Locked where Value == Void {
    package convenience init() { self.init(()) }

    /// Runs `body` holding the lock. It touches no stored value: going through the generic
    /// `withLock` passed the empty value `inout`, which ThreadSanitizer took for a race.
    @inlinable
    package func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Takes the lock, for a hold that spans code a closure cannot wrap (a typed throw).
    package func lock() { pthread_mutex_lock(mutex) }

    /// Gives back what ``lock()`` took.
    package func unlock() { pthread_mutex_unlock(mutex) }
}
