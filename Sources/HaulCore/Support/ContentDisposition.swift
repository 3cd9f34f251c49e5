/// The `Content-Disposition` header field (RFC 6266 section 4.1, with RFC 8187 for `filename*`),
/// parsed strictly as the tc2231 test cases expect: a value that breaks the grammar is ignored as
/// a whole, so the file is named from the URL rather than from a guess at what a server meant.
package enum ContentDisposition {
    /// The raw file name in a `Content-Disposition` value: `filename*` when its charset is UTF-8
    /// or ISO-8859-1, else `filename`. Nil when the value does not parse, when it names no file,
    /// and when `filename` holds an RFC 2047 encoded word (not decoded there, junk if taken as is).
    /// Works on UTF-8 bytes: a Swift `Character` can join a delimiter with its neighbour.
    package static func filename(_ value: String) -> String? {
        let bytes = Array(value.utf8)
        guard !bytes.contains(where: { ($0 < 0x20 && $0 != tab) || $0 == 0x7F }) else { return nil }
        var scanner = Scanner(bytes: bytes)
        scanner.skipWhitespace()
        guard scanner.token() != nil else { return nil }
        var seen: Set<String> = []
        var plain: String?
        var extended: String?
        scanner.skipWhitespace()
        while !scanner.atEnd {
            guard scanner.take(semicolon) else { return nil }
            scanner.skipWhitespace()
            guard let token = scanner.token() else { return nil }
            let name = String(decoding: token.map(lowercased), as: UTF8.self)
            guard seen.insert(name).inserted else { return nil }
            scanner.skipWhitespace()
            guard scanner.take(equals) else { return nil }
            scanner.skipWhitespace()
            if name.hasSuffix("*") {
                guard let ext = scanner.extValue() else { return nil }
                if name == "filename*" {
                    switch String(decoding: ext.charset.map(lowercased), as: UTF8.self) {
                    case "utf-8":
                        guard let text = String(validating: ext.bytes, as: UTF8.self) else { return nil }
                        extended = text
                    case "iso-8859-1":
                        // 0x80-0x9F are no ISO-8859-1 characters: most likely UTF-8 mislabelled.
                        guard !ext.bytes.contains(where: { $0 >= 0x80 && $0 < 0xA0 }) else { return nil }
                        extended = String(String.UnicodeScalarView(ext.bytes.map { Unicode.Scalar($0) }))
                    default:
                        break
                    }
                }
            } else {
                let raw = scanner.peek == quote ? scanner.quotedString() : scanner.token().map { Array($0) }
                guard let raw else { return nil }
                if name == "filename" {
                    guard !containsEncodedWord(raw) else { return nil }
                    plain = String(decoding: raw, as: UTF8.self)
                }
            }
            scanner.skipWhitespace()
        }
        guard let name = extended ?? plain, !name.isEmpty else { return nil }
        return name
    }

    private static let tab = UInt8(ascii: "\t")
    private static let space = UInt8(ascii: " ")
    private static let quote = UInt8(ascii: "\"")
    private static let backslash = UInt8(ascii: "\\")
    private static let semicolon = UInt8(ascii: ";")
    private static let equals = UInt8(ascii: "=")
    private static let apostrophe = UInt8(ascii: "'")
    private static let percent = UInt8(ascii: "%")
    private static let question = UInt8(ascii: "?")

    private static func lowercased(_ b: UInt8) -> UInt8 {
        b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z") ? b | 0x20 : b
    }

    private static func isAlphaNumeric(_ b: UInt8) -> Bool {
        let lower = b | 0x20
        return (lower >= UInt8(ascii: "a") && lower <= UInt8(ascii: "z")) || (b >= 0x30 && b <= 0x39)
    }

    /// RFC 9110 tchar.
    private static func isTokenChar(_ b: UInt8) -> Bool {
        isAlphaNumeric(b) || "!#$%&'*+-.^_`|~".utf8.contains(b)
    }

    /// RFC 8187 attr-char: a tchar other than `*`, `'` and `%`.
    private static func isAttrChar(_ b: UInt8) -> Bool {
        isAlphaNumeric(b) || "!#$&+-.^_`|~".utf8.contains(b)
    }

    /// RFC 2978 mime-charsetc.
    private static func isCharsetChar(_ b: UInt8) -> Bool {
        isAlphaNumeric(b) || "!#$%&+-^_`{}~".utf8.contains(b)
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Whether `text` holds an RFC 2047 encoded word, `=?charset?Q-or-B?text?=`.
    private static func containsEncodedWord(_ text: [UInt8]) -> Bool {
        var start = 0
        while start + 1 < text.count {
            defer { start += 1 }
            guard text[start] == equals, text[start + 1] == question else { continue }
            var i = start + 2
            let charsetStart = i
            while i < text.count, text[i] != question, text[i] != space { i += 1 }
            guard i > charsetStart, i + 2 < text.count, text[i] == question, text[i + 2] == question,
                "bBqQ".utf8.contains(text[i + 1])
            else { continue }
            i += 3
            while i < text.count, text[i] != question, text[i] != space { i += 1 }
            if i + 1 < text.count, text[i] == question, text[i + 1] == equals { return true }
        }
        return false
    }

    /// A cursor over the bytes of a header value.
    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }
        var peek: UInt8? { atEnd ? nil : bytes[index] }

        /// Consumes `byte` if it comes next.
        mutating func take(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            index += 1
            return true
        }

        /// Skips OWS: spaces and tabs.
        mutating func skipWhitespace() {
            while let b = peek, b == space || b == tab { index += 1 }
        }

        /// Consumes bytes while `accept` holds and returns them.
        mutating func run(while accept: (UInt8) -> Bool) -> ArraySlice<UInt8> {
            let start = index
            while let b = peek, accept(b) { index += 1 }
            return bytes[start..<index]
        }

        /// A non-empty token, nil (consuming nothing) when none comes next.
        mutating func token() -> ArraySlice<UInt8>? {
            let token = run(while: isTokenChar)
            return token.isEmpty ? nil : token
        }

        /// A quoted-string, unescaped; nil when it does not start here or is not closed.
        mutating func quotedString() -> [UInt8]? {
            guard take(quote) else { return nil }
            var out: [UInt8] = []
            while let b = peek {
                index += 1
                if b == quote { return out }
                if b == backslash {
                    guard let escaped = peek else { return nil }
                    index += 1
                    out.append(escaped)
                } else {
                    out.append(b)
                }
            }
            return nil
        }

        /// An RFC 8187 ext-value, `charset'[language]'value-chars`: the charset and the
        /// percent-decoded bytes, nil when it breaks that grammar.
        mutating func extValue() -> (charset: ArraySlice<UInt8>, bytes: [UInt8])? {
            let charset = run(while: isCharsetChar)
            guard !charset.isEmpty, take(apostrophe) else { return nil }
            _ = run(while: { isAlphaNumeric($0) || $0 == UInt8(ascii: "-") })
            guard take(apostrophe) else { return nil }
            var out: [UInt8] = []
            while let b = peek, isAttrChar(b) || b == percent {
                index += 1
                if b == percent {
                    guard index + 1 < bytes.count, let high = hexValue(bytes[index]),
                        let low = hexValue(bytes[index + 1])
                    else { return nil }
                    out.append(high << 4 | low)
                    index += 2
                } else {
                    out.append(b)
                }
            }
            return (charset, out)
        }
    }
}
