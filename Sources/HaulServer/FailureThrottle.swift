/// Slows down wrong tokens, whoever sends them: after `free` failures within a window of
/// `window` seconds, the answer to each further wrong token is held back twice as long as the
/// one before (from `base`, at most `cap` seconds), until a window passes without failures.
///
/// One count for the whole daemon, never per caller: every loopback caller has the same
/// address (and a local process can pick any of 127/8), so a per-caller count is easy to dodge,
/// and refusing a caller would let any web page lock the user's own page out. A right token is
/// never held back or refused; requests a browser marks as from another site are refused
/// before the token is looked at and not counted. The clock is given (tests; one for the
/// daemon). With 256-bit tokens this is a brake on noise, not what keeps the token secret.
package struct FailureThrottle: Sendable {
    package var free = 5
    package var window: Double = 60
    package var base: Double = 0.25
    package var cap: Double = 30

    private var windowStart: Double = -.infinity
    private var failures = 0

    package init() {}

    /// Counts a wrong token at `now`; the seconds to hold its 401 back.
    package mutating func failed(now: Double) -> Double {
        if now - windowStart >= window {
            windowStart = now
            failures = 0
        }
        failures += 1
        let over = failures - free
        return over > 0 ? min(cap, base * Double(1 << min(over - 1, 20))) : 0
    }
}
