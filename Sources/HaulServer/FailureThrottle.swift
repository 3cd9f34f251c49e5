/// Slows down a caller that keeps presenting wrong tokens: after `free` failures within
/// `window` seconds, each further attempt must wait twice as long as the last (from `base`, at
/// most `cap` seconds). The clock is given (tests, and one clock for the whole daemon); a
/// success clears the count. Keyed by whatever identifies a caller (the peer address).
package struct FailureThrottle: Sendable {
    package var free = 5
    package var window: Double = 60
    package var base: Double = 0.25
    package var cap: Double = 30

    private struct Entry {
        var failures: [Double] = []
        var blockedUntil: Double = 0
    }
    private var entries: [String: Entry] = [:]

    package init() {}

    /// Seconds `caller` must still wait before an attempt is looked at; 0 when it may go on.
    package func wait(for caller: String, now: Double) -> Double {
        max(0, (entries[caller]?.blockedUntil ?? 0) - now)
    }

    /// Counts a failed attempt at `now`.
    package mutating func failed(_ caller: String, now: Double) {
        var e = entries[caller] ?? Entry()
        e.failures = e.failures.filter { now - $0 < window } + [now]
        let over = e.failures.count - free
        if over > 0 { e.blockedUntil = now + min(cap, base * Double(1 << min(over - 1, 20))) }
        entries[caller] = e
        if entries.count > 4096 { entries = entries.filter { now - ($0.value.failures.last ?? 0) < window } }
    }

    /// A successful attempt: the caller's count starts again.
    package mutating func succeeded(_ caller: String) { entries[caller] = nil }
}
