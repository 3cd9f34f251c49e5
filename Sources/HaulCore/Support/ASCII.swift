/// ASCII-only string helpers for protocol text (header names and values). Foundation's
/// `trimmingCharacters(in:)` and `caseInsensitiveCompare` go through NSString on Linux, the top
/// cost in a profile of a thousand small downloads.
extension StringProtocol {
    /// Without leading and trailing spaces, tabs, CRs and LFs.
    package func trimmingASCIIWhitespace() -> String {
        let text = Substring(self)
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
        guard let first = text.utf8.firstIndex(where: { !isSpace($0) }) else { return "" }
        let last = text.utf8.lastIndex(where: { !isSpace($0) })!
        return String(text[first...last])
    }

    /// Equal ignoring ASCII case (header names are ASCII tokens).
    package func equalsIgnoringASCIICase<S: StringProtocol>(_ other: S) -> Bool {
        let a = self.utf8
        let b = other.utf8
        guard a.count == b.count else { return false }
        return zip(a, b).allSatisfy { x, y in
            x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
        }
    }
}
