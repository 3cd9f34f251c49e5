/// The number formats of the output (`%.1f`, `%02d`, `%3d`), without `String(format:)`, which
/// needs Foundation proper (and its ICU data) loaded at every start.
package enum Format {
    /// `value` with `decimals` digits after the point (`%.Nf`): the nearest, a tie to even
    /// (0.25 is "0.2"), judged on the scaled double, so a value a hair from a tie may round the
    /// other way than printf's exact expansion (0.35 gives "0.4", printf "0.3"); "nan", "inf"
    /// or "-inf" when not finite.
    package static func fixed(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return value.isNaN ? "nan" : (value < 0 ? "-inf" : "inf") }
        let decimals = min(max(decimals, 0), 9)
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (value.magnitude * scale).rounded(.toNearestOrEven)
        guard scaled < 9e18 else { return "\(value)" }  // past Int64: Swift's shortest form
        let n = UInt64(scaled)
        let unit = UInt64(scale)
        let sign = value < 0 && n > 0 ? "-" : ""
        guard decimals > 0 else { return sign + String(n) }
        return sign + String(n / unit) + "." + zeroPadded(Int(n % unit), decimals)
    }

    /// `n` with at least `width` digits, zeros in front (`%0Nd`).
    package static func zeroPadded(_ n: Int, _ width: Int) -> String {
        let digits = String(n.magnitude)
        let padding = String(repeating: "0", count: max(0, width - digits.count))
        return (n < 0 ? "-" : "") + padding + digits
    }

    /// `text` with spaces in front up to `width` characters (`%3d`).
    package static func rightAligned(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }

    /// `text` with spaces after it up to `width` characters, or cut to `width`.
    package static func leftAligned(_ text: String, _ width: Int) -> String {
        text.count >= width
            ? String(text.prefix(max(0, width))) : text + String(repeating: " ", count: width - text.count)
    }

    /// Hex, at least `width` digits (`%04x`; `%02X` when `uppercase`).
    package static func hex(_ n: UInt32, _ width: Int, uppercase: Bool = false) -> String {
        let digits = String(n, radix: 16, uppercase: uppercase)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
