/// Conversions of seconds (from the configuration, or a server's Retry-After) to the integers
/// sleeps and libcurl take. `Int(.infinity)` traps, and `.infinity` is how a caller says "no
/// timeout": every conversion goes through here and saturates instead.
package enum Seconds {
    /// The longest wait or timeout given to the system: about 31 years.
    package static let longest: Double = 1e9

    /// `seconds` clamped to `0...longest` (NaN and negative values: 0; infinity: `longest`).
    package static func clamped(_ seconds: Double) -> Double {
        guard seconds > 0 else { return 0 }  // NaN compares false
        return min(seconds, longest)
    }

    /// `duration` in seconds.
    package static func of(_ duration: Duration) -> Double {
        let c = duration.components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }

    /// Whole nanoseconds, for `Task.sleep`.
    package static func nanoseconds(_ seconds: Double) -> UInt64 { UInt64(clamped(seconds) * 1e9) }

    /// Whole milliseconds, for libcurl.
    package static func milliseconds(_ seconds: Double) -> Int { Int(clamped(seconds) * 1000) }

    /// Whole seconds, rounded up, at least 1, for libcurl.
    package static func wholeUp(_ seconds: Double) -> Int { max(1, Int(clamped(seconds).rounded(.up))) }

    /// For messages: `30`, `2.5`, `1e+20`.
    package static func text(_ seconds: Double) -> String {
        guard seconds.isFinite, abs(seconds) < longest else { return "\(seconds)" }
        return seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}
