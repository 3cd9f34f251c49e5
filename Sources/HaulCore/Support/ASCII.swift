/// ASCII-only string helpers for protocol text (header names and values). Foundation's
/// `trimmingCharacters(in:)` and `caseInsensitiveCompare` go through NSString on Linux, the top
/// cost in a profile of a thousand small downloads.
extension StringProtocol {
    /// Without leading and trailing spaces, tabs, CRs and LFs.
    package func trimmingASCIIWhitespace() -> String {
        let text = Substring(self)
        guard let first = text.utf8.firstIndex(where: { !isASCIISpace($0) }) else { return "" }
        let last = text.utf8.lastIndex(where: { !isASCIISpace($0) })!
        return String(text[first...last])
    }

    /// Equal ignoring ASCII case (header names are ASCII tokens).
    package func equalsIgnoringASCIICase<S: StringProtocol>(_ other: S) -> Bool {
        let a = self.utf8
        let b = other.utf8
        guard a.count == b.count else { return false }
        // Native strings (header names and the names looked up) compare as byte buffers: an
        // iterator pair per byte was a tenth of a small download's header handling.
        let fast = a.withContiguousStorageIfAvailable { x in
            b.withContiguousStorageIfAvailable { y in
                for i in 0..<x.count where !sameIgnoringASCIICase(x[i], y[i]) { return false }
                return true
            }
        }
        if let fast, let same = fast { return same }
        return zip(a, b).allSatisfy(sameIgnoringASCIICase)
    }

    /// Without leading and trailing Unicode white space (spaces, line breaks, U+0085, U+00A0,
    /// U+2000-U+200A, U+3000 and the rest of the White_Space property).
    package func trimmingUnicodeWhitespace() -> String {
        let scalars = Substring(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}

extension Substring.UTF8View {
    /// Without leading and trailing spaces, tabs, CRs and LFs; no String made.
    package func trimmingASCIIWhitespace() -> Substring.UTF8View {
        guard let first = firstIndex(where: { !isASCIISpace($0) }) else { return self[endIndex...] }
        return self[first...lastIndex(where: { !isASCIISpace($0) })!]
    }
}

/// A space, tab, CR or LF.
@inline(__always)
func isASCIISpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }

/// Whether two bytes are the same letter in either ASCII case, or the same byte.
@inline(__always)
private func sameIgnoringASCIICase(_ x: UInt8, _ y: UInt8) -> Bool {
    x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
}

/// Hex digits of bytes, for names and logs (what `String(format: "%02x")` gave, without Foundation).
package enum Hex {
    /// Two digits per byte, lower case unless `uppercase`.
    package static func string<C: Collection>(_ bytes: C, uppercase: Bool = false) -> String where C.Element == UInt8 {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension String {
    /// The text of a C buffer up to its first NUL (all of it without one), invalid UTF-8
    /// repaired: what a C function wrote into a `[CChar]` given to it.
    package init(nulTerminated chars: [CChar]) {
        self = String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
