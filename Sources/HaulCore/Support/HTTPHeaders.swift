#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Response or request header fields in order, looked up case-insensitively.
package struct HTTPHeaders: Sendable, Equatable, Sequence {
    package private(set) var fields: [(name: String, value: String)] = []

    package init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    package static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool {
        a.fields.elementsEqual(b.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    package mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }

    package mutating func remove(_ name: String) {
        fields.removeAll { $0.name.equalsIgnoringASCIICase(name) }
    }

    package mutating func replace(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    /// The first value of `name`.
    package subscript(_ name: String) -> String? {
        firstIndex(of: name, from: 0, length: name.utf8.count).map { fields[$0].value }
    }

    package func contains(_ name: String) -> Bool { self[name] != nil }

    /// Every value of `name`, in order (its field lines, untrimmed).
    package func values(_ name: String) -> [String] {
        let length = name.utf8.count
        var out: [String] = []
        var next = 0
        while let i = firstIndex(of: name, from: next, length: length) {
            out.append(fields[i].value)
            next = i + 1
        }
        return out
    }

    /// The first field named `name` (of `length` bytes) at `start` or after. A plain loop by
    /// index, lengths first: `first(where:)` or a `for field in fields` retains and releases
    /// each field it passes, and a small download looks up about ten names; most fields differ
    /// from the name in length.
    private func firstIndex(of name: String, from start: Int, length: Int) -> Int? {
        var i = start
        while i < fields.count {
            if fields[i].name.utf8.count == length && fields[i].name.equalsIgnoringASCIICase(name) { return i }
            i += 1
        }
        return nil
    }

    /// `Content-Length` as a byte count; nil when absent or not a decimal number (``decimal(_:)``).
    package var contentLength: Int64? {
        self["Content-Length"].flatMap { Self.decimal(bytes: Substring($0).utf8.trimmingASCIIWhitespace()) }
    }

    /// `text` as a byte count or offset: ASCII digits only (no sign, no space, no hex), within
    /// Int64. `Int64(_:)` alone takes `+37` and `-0`.
    package static func decimal<S: StringProtocol>(_ text: S) -> Int64? { decimal(bytes: text.utf8) }

    /// ``decimal(_:)`` read from UTF-8 bytes, with no String made.
    package static func decimal<C: Collection<UInt8>>(bytes digits: C) -> Int64? {
        guard !digits.isEmpty else { return nil }
        var n: Int64 = 0
        for b in digits {
            guard b >= 0x30 && b <= 0x39 else { return nil }
            let (times, o1) = n.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(Int64(b - 0x30))
            if o1 || o2 { return nil }
            n = sum
        }
        return n
    }

    /// Why a header cannot be sent as given, nil when it can: its name must be an RFC 9110 token,
    /// its value free of CR, LF and NUL (which would smuggle another header or request).
    package static func problem(name: String, value: String) -> String? {
        guard isToken(name) else {
            return
                "header name '\(name)' is not valid (letters, digits and \(String(decoding: tokenSymbols, as: UTF8.self)))"
        }
        guard isSendable(value) else { return "header \(name) has a line break or NUL in its value" }
        return nil
    }

    private static let tokenSymbols = Array("!#$%&'*+-.^_`|~".utf8)

    /// Whether `name` is an RFC 9110 token, judged on its bytes.
    package static func isToken(_ name: String) -> Bool {
        !name.utf8.isEmpty
            && name.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) || tokenSymbols.contains(b)
            }
    }

    /// Whether `value` can stand in a request header as it is: none of its bytes is CR, LF or
    /// NUL. Judged on bytes: `"\r\n"` is one `Character`, which a search for `"\r"` or `"\n"`
    /// does not find.
    package static func isSendable(_ value: String) -> Bool {
        !value.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 }
    }

    /// The `ETag`, when it could be sent back as it is (``isSendable(_:)``): a validator that
    /// could not is never stored, and a download without one resumes by size alone or restarts.
    package var etag: String? { self["ETag"].flatMap { Self.isSendable($0) ? $0 : nil } }

    /// ``etag`` unless it is weak (`W/`): only a strong one may go in `If-Range`.
    package var strongETag: String? { etag.flatMap { $0.hasPrefix("W/") ? nil : $0 } }

    /// The `Last-Modified` date, when it could be sent back as it is (``isSendable(_:)``).
    package var lastModified: String? { self["Last-Modified"].flatMap { Self.isSendable($0) ? $0 : nil } }

    /// The values of `Content-Length` when they disagree (several fields, or a list in one,
    /// naming different numbers), in order; nil when there is at most one distinct value. RFC
    /// 9112 6.3: such a message has no trustworthy framing.
    package var conflictingContentLengths: [String]? {
        var values: [String] = []
        for line in self.values("Content-Length") {
            for part in line.split(separator: ",") {
                let value = part.trimmingASCIIWhitespace()
                if !values.contains(value) { values.append(value) }
            }
        }
        return values.count > 1 ? values : nil
    }

    /// Why the `Content-Length` fields cannot frame the body, nil when they can (or there are
    /// none): each value must be a decimal number of bytes within Int64 (RFC 9110 8.6: `0x25`,
    /// `-5` or a number past 2^63 are not lengths, and a reader that takes `0x25` as 0, or ignores
    /// an overflow, saves the wrong bytes), and several must agree (RFC 9112 6.3).
    package var contentLengthProblem: String? {
        // The usual answer, checked first: one field, one number.
        let lines = values("Content-Length")
        if lines.count <= 1 && lines.allSatisfy({ Self.decimal($0) != nil }) { return nil }
        for line in lines {
            for part in line.split(separator: ",", omittingEmptySubsequences: false) {
                let value = part.trimmingASCIIWhitespace()
                guard Self.decimal(value) != nil else {
                    return "Content-Length \(value.prefix(40)) is not a number of bytes"
                }
            }
        }
        return conflictingContentLengths.map { "conflicting Content-Length (\($0.joined(separator: ", ")))" }
    }

    package func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }
}

/// Parsing of the header values the engine decides on.
package enum HTTPParsing {
    /// `Content-Range: bytes a-b/total` (total may be `*`), or `bytes */total` for 416.
    package struct ContentRange: Equatable, Sendable {
        package var start: Int64?
        package var end: Int64?
        package var total: Int64?
    }

    package static func contentRange(_ value: String) -> ContentRange? {
        // Parsed on the bytes in place, with no String made: it is read for every answer to a
        // range.
        var value = value
        return value.withUTF8(contentRange(bytes:))
    }

    private static func contentRange(bytes b: UnsafeBufferPointer<UInt8>) -> ContentRange? {
        var (lo, hi) = (0, b.count)
        while lo < hi && isASCIISpace(b[lo]) { lo += 1 }
        while hi > lo && isASCIISpace(b[hi - 1]) { hi -= 1 }
        guard hi - lo >= 6 else { return nil }
        for (i, c) in zip(lo..., "bytes ".utf8) where b[i] != c && !(b[i] | 0x20 == c && c >= 0x61) { return nil }
        lo += 6
        while lo < hi && isASCIISpace(b[lo]) { lo += 1 }
        guard let slash = (lo..<hi).first(where: { b[$0] == UInt8(ascii: "/") }) else { return nil }
        let range = b[lo..<slash]
        let total = b[(slash + 1)..<hi]
        let star = UInt8(ascii: "*")
        var result = ContentRange()
        if !(total.count == 1 && total.first == star) {
            guard let t = HTTPHeaders.decimal(bytes: total) else { return nil }
            result.total = t
        }
        if !(range.count == 1 && range.first == star) {
            guard let dash = range.firstIndex(of: UInt8(ascii: "-")),
                let s = HTTPHeaders.decimal(bytes: range[..<dash]),
                let e = HTTPHeaders.decimal(bytes: range[(dash + 1)...]), e >= s
            else { return nil }
            if let total = result.total, e >= total { return nil }
            result.start = s
            result.end = e
        }
        return result
    }

    /// `Retry-After`: delay seconds or an HTTP date. Returns seconds from `now`, never negative.
    package static func retryAfter(_ value: String, now: Date = Date()) -> Double? {
        let v = value.trimmingASCIIWhitespace()
        if let seconds = Double(v), seconds >= 0, seconds.isFinite { return seconds }
        if let date = HTTPDate.parse(v) { return max(0, Double(date) - now.timeIntervalSince1970) }
        return nil
    }

    /// The file name from `Content-Disposition` (RFC 6266): `filename*` (RFC 8187, UTF-8 or
    /// ISO-8859-1) wins over `filename`; nil when the value breaks the grammar, so the caller falls
    /// back to the URL. The result is raw: pass it through ``SafeFileName``.
    package static func contentDispositionFilename(_ value: String) -> String? {
        ContentDisposition.filename(value)
    }

    /// `s` with each `%` and two hex digits as the byte they name; any other `%` is kept as it is.
    package static func percentDecodedBytes(_ s: String) -> [UInt8] {
        // Digits only: `UInt8(_:radix:)` would also take a sign, and make `%-0` a NUL.
        func hex(_ b: UInt8) -> UInt8? {
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        let bytes = Array(s.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count, let high = hex(bytes[i + 1]),
                let low = hex(bytes[i + 2])
            {
                out.append(high << 4 | low)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return out
    }
}

/// Turns a name suggested by a server or a URL into a safe file name inside the target directory.
package enum SafeFileName {
    /// The longest name Haul writes, in UTF-8 bytes (leaves room for `.part`/`.haul` on 255-byte
    /// file systems).
    package static let maxBytes = 200

    /// Returns a file name with no directory parts, no `..`, no NUL, control or bidi control
    /// characters, no leading dot or dash, at most ``maxBytes`` bytes (keeping the extension);
    /// nil when nothing usable is left.
    package static func sanitize(_ raw: String) -> String? {
        if isPlainName(raw) { return raw }
        // Only the last path component counts, with either separator, split on bytes: a "/" or
        // "\\" followed by a combining mark is one Character, and still a separator to the kernel.
        let lastComponent =
            raw.utf8.split(whereSeparator: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }).last.map {
                String(decoding: $0, as: UTF8.self)
            } ?? ""
        var name: String
        if lastComponent.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            // Printable ASCII, the usual case: no controls to drop, only ASCII spaces to trim
            // (the Unicode path below looks at every scalar's properties).
            name = lastComponent.trimmingASCIIWhitespace()
        } else {
            name = String(
                String.UnicodeScalarView(
                    lastComponent.unicodeScalars.filter {
                        // Bidi controls too (U+202E shows "evil\u{202E}fdp.exe" as "evilexe.pdf");
                        // other format characters stay (the joiner inside an emoji).
                        !($0.properties.generalCategory == .control || $0 == "\u{7F}" || $0.value == 0
                            || $0.properties.isBidiControl)
                    }))
            name = name.trimmingUnicodeWhitespace()
        }
        // Leading dots and dashes go on bytes, in one pass: ".\u{301}x" begins with a Character
        // that is not ".", and with a "." all the same (a hidden file).
        name = String(
            decoding: name.utf8.drop { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }, as: UTF8.self)
        if name.isEmpty || name == "." || name == ".." { return nil }
        name = cut(name, to: maxBytes)
        // A download's side files are haul's alone: a name that ends like one (judged after the
        // cut, which can make one) gets a `_`, so that no download writes another's partial or
        // record.
        if isSideFileName(name) { name = cut(name, to: maxBytes - 1) + "_" }
        return name.isEmpty ? nil : name
    }

    /// Whether `raw` is a name that `sanitize` returns as it is, in one pass over its bytes:
    /// printable ASCII with no separator, no space at either end, no leading dot or dash, within
    /// ``maxBytes``, not ending like a side file. Most URLs' names are, and skip the general
    /// path's split, trim, drop and cut (callgrind: about 5,000 instructions a name).
    private static func isPlainName(_ raw: String) -> Bool {
        let plain = raw.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            guard let first = bytes.first, let last = bytes.last, bytes.count <= maxBytes,
                first != UInt8(ascii: " "), first != UInt8(ascii: "."), first != UInt8(ascii: "-"),
                last != UInt8(ascii: " ")
            else { return false }
            for b in bytes where b < 0x20 || b >= 0x7F || b == UInt8(ascii: "/") || b == UInt8(ascii: "\\") {
                return false
            }
            return true
        }
        return plain == true && !isSideFileName(raw)
    }

    /// `name` at most `limit` bytes, keeping its extension.
    private static func cut(_ name: String, to limit: Int) -> String {
        guard name.utf8.count > limit else { return name }
        let ext = extensionPart(of: name)
        var stem = String(name.dropLast(ext.count))
        while stem.utf8.count + ext.utf8.count > limit, !stem.isEmpty { stem.removeLast() }
        return stem + ext
    }

    /// The endings of a download's side files: `<file>.part`, its record `<file>.haul` and the
    /// record's temporary `<file>.haul.tmp`.
    package static let sideFileSuffixes = [".part", ".haul", ".haul.tmp"]

    /// Whether `name` ends like a side file (compared on bytes, ASCII letters in any case: a
    /// case-insensitive file system takes `.PART` for `.part`).
    package static func isSideFileName(_ name: String) -> Bool {
        func endsLikeSideFile(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
            sideFileSuffixBytes.contains { tail in
                guard bytes.count > tail.count else { return false }
                let start = bytes.count - tail.count
                for i in 0..<tail.count {
                    let b = bytes[start + i]
                    if (b >= 0x41 && b <= 0x5A ? b | 0x20 : b) != tail[i] { return false }
                }
                return true
            }
        }
        var name = name
        return name.withUTF8(endsLikeSideFile)
    }

    private static let sideFileSuffixBytes = sideFileSuffixes.map { Array($0.utf8) }

    /// The name for a download: the Content-Disposition name if usable, else the URL's last path
    /// segment (percent-decoded), else `index.html`.
    package static func suggestedName(contentDisposition: String?, url: URL) -> String {
        if let cd = contentDisposition, let raw = HTTPParsing.contentDispositionFilename(cd), let safe = sanitize(raw) {
            return safe
        }
        // The percent-encoded path's last segment, decoded once: `lastPathComponent` is decoded
        // already, and decoding it again would make `%2541` an `A` and `%252F` a separator.
        // `url.path` drops a trailing slash; the percent-encoded path keeps it.
        let path = url.path(percentEncoded: true)
        if !path.hasSuffix("/"),
            let safe = sanitize(String(decoding: HTTPParsing.percentDecodedBytes(Sys.name(of: path)), as: UTF8.self))
        {
            return safe
        }
        return "index.html"
    }

    private static func extensionPart(of name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        let ext = String(name[dot...])
        return ext.utf8.count <= 16 ? ext : ""
    }
}
