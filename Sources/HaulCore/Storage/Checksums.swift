#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A digest a downloaded file must have: one the caller gave (`--checksum sha-256=HEX`), or one
/// the server sent (`Repr-Digest`, RFC 9530). A file that does not match is never put in place.
///
/// ```swift
/// var options = DownloadOptions()
/// options.checksums = [try Checksum("sha-256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")]
/// ```
public struct Checksum: Sendable, Hashable, CustomStringConvertible {
    /// The hash functions a checksum can name.
    public enum Algorithm: String, Sendable, CaseIterable, Codable {
        case sha256 = "sha-256"
        case sha512 = "sha-512"
        /// For legacy mirrors only: SHA-1 and MD5 do not resist a deliberate collision.
        case sha1 = "sha-1"
        case md5

        /// Bytes of a digest.
        public var digestSize: Int {
            switch self {
            case .sha256: 32
            case .sha512: 64
            case .sha1: 20
            case .md5: 16
            }
        }

        /// How messages name it: `SHA-256`, `MD5`.
        public var displayName: String { rawValue.uppercased() }

        /// The algorithm `name` means: aria2's and RFC 9530's names (`sha-256`), coreutils'
        /// (`sha256`), in any case; nil for any other.
        public init?(named name: some StringProtocol) {
            let folded = String(decoding: name.utf8.map { $0 | (($0 >= 0x41 && $0 <= 0x5A) ? 0x20 : 0) }, as: UTF8.self)
            guard let found = Self.allCases.first(where: { $0.rawValue == folded || $0.compactName == folded })
            else { return nil }
            self = found
        }

        private var compactName: String { String(rawValue.filter { $0 != "-" }) }
    }

    /// Where an expected digest came from, for messages.
    public enum Source: Sendable, Hashable {
        /// The caller (`--checksum`, `checksums`).
        case given
        /// The server's `Repr-Digest` header (the whole representation).
        case reprDigest
        /// The server's `Content-Digest` header, on a whole (200) answer without a content coding.
        case contentDigest
    }

    public let algorithm: Algorithm
    /// The digest's bytes (``Algorithm/digestSize`` of them).
    public let digest: [UInt8]
    /// ``Source/given`` for every checksum made by a caller.
    public let source: Source

    /// A checksum from its digest's bytes; nil when they are not the algorithm's size.
    public init?(_ algorithm: Algorithm, digest: [UInt8]) {
        self.init(algorithm, digest: digest, source: .given)
    }

    package init?(_ algorithm: Algorithm, digest: [UInt8], source: Source) {
        guard digest.count == algorithm.digestSize else { return nil }
        self.algorithm = algorithm
        self.digest = digest
        self.source = source
    }

    /// Parses `ALGORITHM=HEX` (`sha-256=…`, `sha512=…`, `md5=…`: hex in any case, of the
    /// algorithm's size; spaces around it are dropped); throws ``HaulError/Code/usage`` naming
    /// what is wrong.
    public init(_ text: String) throws(HaulError) {
        let trimmed = text.trimmingASCIIWhitespace()
        guard !trimmed.isEmpty else { throw HaulError(.usage, "an empty checksum") }
        let parts = trimmed.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map {
            $0.trimmingASCIIWhitespace()
        }
        let names = Algorithm.allCases.map(\.rawValue).joined(separator: ", ")
        guard parts.count == 2, let algorithm = Algorithm(named: parts[0]) else {
            let shown =
                parts.count != 2
                ? "'\(trimmed.prefix(140))' is not ALGORITHM=HEX"
                : parts[0].isEmpty ? "no algorithm before '='" : "'\(parts[0].prefix(20))' is not an algorithm"
            throw HaulError(.usage, "\(shown) (\(names))")
        }
        guard let digest = Self.hexBytes(Substring(parts[1])), digest.count == algorithm.digestSize else {
            throw HaulError(
                .usage,
                "\(algorithm.rawValue) checksum needs \(algorithm.digestSize * 2) hex digits, not '\(parts[1].prefix(140))'"
            )
        }
        self.init(algorithm, digest: digest)!
    }

    /// Lower-case hex of the digest.
    public var hex: String { Hex.string(digest) }

    /// `sha-256=HEX`, as ``init(_:)`` reads it.
    public var description: String { "\(algorithm.rawValue)=\(hex)" }

    /// What says the digest is the file's, in a message: "expected", "the server's Repr-Digest
    /// says".
    package var origin: String {
        switch source {
        case .given: "expected"
        case .reprDigest: "the server's Repr-Digest (not checked with --no-server-digest) says"
        case .contentDigest: "the server's Content-Digest (not checked with --no-server-digest) says"
        }
    }

    /// The bytes hex digits (any case) spell; nil for anything else (an empty text too).
    static func hexBytes(_ text: Substring) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0, !utf8.isEmpty else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x41...0x46: c - 0x41 + 10
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        for i in stride(from: 0, to: utf8.count, by: 2) {
            guard let hi = value(utf8[i]), let lo = value(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
        }
        return out
    }
}

extension Checksum {
    /// The digests a response vouches for the whole file with (RFC 9530): `Repr-Digest`, and
    /// `Content-Digest` on a 200 without a content coding (there the content is the file).
    /// Only SHA-256 and SHA-512, the algorithms RFC 9530 registers as active; a field that does
    /// not parse as a dictionary of byte sequences is ignored, as RFC 8941 says (a server cannot
    /// fail a download with a malformed one, only with a wrong one).
    package static func vouched(by headers: HTTPHeaders, status: Int) -> [Checksum] {
        var out: [Checksum] = []
        // Field lines of one name are one field (RFC 9110 5.3), parsed together.
        func combined(_ name: String) -> String? {
            let lines = headers.values(name)
            return lines.isEmpty ? nil : lines.joined(separator: ", ")
        }
        out += combined("Repr-Digest").flatMap { parseDigestField($0, source: .reprDigest) } ?? []
        let coding = headers["Content-Encoding"]?.trimmingASCIIWhitespace().lowercased()
        if status == 200, coding == nil || coding == "identity" || coding == "" {
            out += combined("Content-Digest").flatMap { parseDigestField($0, source: .contentDigest) } ?? []
        }
        return out
    }

    /// `sha-256=:BASE64:, sha-512=:BASE64:;param` as checksums (unknown keys and digests of the
    /// wrong size skipped; a key given twice counts once, its last value, as RFC 8941 says); nil
    /// when the field is not a dictionary whose members are byte sequences.
    static func parseDigestField(_ value: String, source: Source) -> [Checksum]? {
        var out: [Checksum] = []
        for member in value.utf8.split(separator: 0x2C, omittingEmptySubsequences: false) {
            let bytes = Array(
                member.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
            guard let eq = bytes.firstIndex(of: 0x3D), eq > 0 else { return nil }
            let key = bytes[..<eq]
            // A key: lower-case letter or `*`, then lower-case letters, digits, `_-.*`.
            guard
                key.allSatisfy({
                    (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || [0x5F, 0x2D, 0x2E, 0x2A].contains($0)
                }),
                (0x61...0x7A).contains(key.first!) || key.first == 0x2A
            else { return nil }
            let rest = bytes[(eq + 1)...]
            guard rest.first == 0x3A, let close = rest.dropFirst().firstIndex(of: 0x3A) else { return nil }
            let encoded = rest[(rest.startIndex + 1)..<close]
            let after = rest[(close + 1)...]
            guard after.isEmpty || after.first == 0x3B else { return nil }  // parameters follow `;`
            guard encoded.allSatisfy({ Self.isBase64Byte($0) }),
                let decoded = Data(base64Encoded: Data(encoded))
            else { return nil }
            let name = String(decoding: key, as: UTF8.self)
            guard name == "sha-256" || name == "sha-512", let algorithm = Algorithm(rawValue: name) else { continue }
            guard let checksum = Checksum(algorithm, digest: Array(decoded), source: source) else { continue }
            out.removeAll { $0.algorithm == algorithm }
            out.append(checksum)
        }
        return out
    }

    private static func isBase64Byte(_ b: UInt8) -> Bool {
        (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) || (0x30...0x39).contains(b) || b == 0x2B || b == 0x2F
            || b == 0x3D
    }
}

/// Several hashes over the same bytes, each at its own offset: a download feeds every byte it
/// writes, in order, and a hash that was given a gap stops (the file is then hashed again at the
/// end).
package struct MultiHasher: Sendable {
    private enum One: Sendable {
        case sha256(SHA256)
        case sha512(SHA512)
        case sha1(SHA1)
        case md5(MD5)
    }
    private var hashers: [(algorithm: Checksum.Algorithm, hasher: One)]

    /// Fresh hashes of the `algorithms` (each once).
    package init(_ algorithms: some Sequence<Checksum.Algorithm>) {
        var seen: Set<Checksum.Algorithm> = []
        hashers = algorithms.filter { seen.insert($0).inserted }.map { ($0, Self.fresh($0)) }
    }

    /// The algorithms, from the `states` a resume record kept where one is valid (the right size,
    /// on a block boundary, no further than `limit`), else fresh from byte 0.
    package init(_ algorithms: some Sequence<Checksum.Algorithm>, resuming states: [HashState], upTo limit: Int64) {
        self.init(algorithms)
        for i in hashers.indices {
            let algorithm = hashers[i].algorithm
            guard let state = states.first(where: { $0.algorithm == algorithm.rawValue }), state.offset <= limit,
                let chain = state.chainValue, let restored = Self.restore(algorithm, offset: state.offset, chain)
            else { continue }
            hashers[i].hasher = restored
        }
    }

    package var algorithms: [Checksum.Algorithm] { hashers.map(\.algorithm) }
    package var isEmpty: Bool { hashers.isEmpty }

    /// The fewest bytes any hash has taken: what must be read again before the next write.
    package var hashedFrom: Int64 { hashers.map { Self.count($0.hasher) }.min() ?? 0 }

    /// Whether every hash has taken exactly the first `bytes` bytes.
    package func covers(exactly bytes: Int64) -> Bool { hashers.allSatisfy { Self.count($0.hasher) == bytes } }

    /// Feeds the bytes at `offset` to each hash that has taken the bytes before them (the part
    /// it has not taken yet); a hash short of `offset` stops.
    package mutating func update(_ data: UnsafeRawBufferPointer, at offset: Int64) {
        var i = 0
        while i < hashers.count {
            let have = Self.count(hashers[i].hasher)
            if have < offset {
                hashers.remove(at: i)
                continue
            }
            let skip = have - offset
            if skip < Int64(data.count) {
                let part = UnsafeRawBufferPointer(rebasing: data[Int(skip)...])
                switch hashers[i].hasher {
                case .sha256(var h):
                    h.update(part)
                    hashers[i].hasher = .sha256(h)
                case .sha512(var h):
                    h.update(part)
                    hashers[i].hasher = .sha512(h)
                case .sha1(var h):
                    h.update(part)
                    hashers[i].hasher = .sha1(h)
                case .md5(var h):
                    h.update(part)
                    hashers[i].hasher = .md5(h)
                }
            }
            i += 1
        }
    }

    /// Brings every hash up to `end` with the bytes of the open file `fd`.
    package mutating func catchUp(reading fd: Int32, to end: Int64) throws(Errno) {
        var offset = hashedFrom
        try FileDigest.read(fd, from: offset, to: end) { chunk in
            update(chunk, at: offset)
            offset += Int64(chunk.count)
        }
    }

    /// The digests of the bytes taken (the hashes are spent).
    package func digests() -> [Checksum.Algorithm: [UInt8]] {
        var out: [Checksum.Algorithm: [UInt8]] = [:]
        for (algorithm, one) in hashers {
            switch one {
            case .sha256(var h): out[algorithm] = h.finalize()
            case .sha512(var h): out[algorithm] = h.finalize()
            case .sha1(var h): out[algorithm] = h.finalize()
            case .md5(var h): out[algorithm] = h.finalize()
            }
        }
        return out
    }

    /// Each hash's state at its last whole block, for a resume record.
    package var states: [HashState] {
        hashers.map { algorithm, one in
            let (offset, chain) =
                switch one {
                case .sha256(let h): h.blockState
                case .sha512(let h): h.blockState
                case .sha1(let h): h.blockState
                case .md5(let h): h.blockState
                }
            return HashState(algorithm: algorithm.rawValue, offset: offset, state: Hex.string(chain))
        }
    }

    private static func fresh(_ algorithm: Checksum.Algorithm) -> One {
        switch algorithm {
        case .sha256: .sha256(SHA256())
        case .sha512: .sha512(SHA512())
        case .sha1: .sha1(SHA1())
        case .md5: .md5(MD5())
        }
    }

    private static func restore(_ algorithm: Checksum.Algorithm, offset: Int64, _ chain: [UInt8]) -> One? {
        switch algorithm {
        case .sha256: SHA256(offset: offset, chainValue: chain).map(One.sha256)
        case .sha512: SHA512(offset: offset, chainValue: chain).map(One.sha512)
        case .sha1: SHA1(offset: offset, chainValue: chain).map(One.sha1)
        case .md5: MD5(offset: offset, chainValue: chain).map(One.md5)
        }
    }

    private static func count(_ one: One) -> Int64 {
        switch one {
        case .sha256(let h): h.count
        case .sha512(let h): h.count
        case .sha1(let h): h.count
        case .md5(let h): h.count
        }
    }

    /// The digests of the open file `fd`'s bytes, in one read.
    package static func digests(
        ofFileAt fd: Int32, _ algorithms: [Checksum.Algorithm]
    ) throws(Errno) -> [Checksum
        .Algorithm: [UInt8]]
    {
        var hasher = MultiHasher(algorithms)
        try hasher.catchUp(reading: fd, to: .max)
        return hasher.digests()
    }

    /// The digests of the file at `path`.
    package static func digests(
        ofFile path: String, _ algorithms: [Checksum.Algorithm]
    ) throws(Errno) -> [Checksum
        .Algorithm: [UInt8]]
    {
        let fd = try Sys.open(path, O_RDONLY)
        defer { Sys.close(fd) }
        return try digests(ofFileAt: fd, algorithms)
    }
}

/// A hash's state as a resume record keeps it (`hashes`, docs/integrity.md): the bytes it has
/// taken, up to a block boundary, and its chaining value in hex.
package struct HashState: Codable, Equatable, Sendable {
    package var algorithm: String
    package var offset: Int64
    package var state: String

    /// The chaining value's bytes; nil when `state` is not hex.
    var chainValue: [UInt8]? {
        state.utf8.count <= 256 ? Checksum.hexBytes(Substring(state)) : nil
    }
}

extension [Checksum] {
    /// The first expected digest `digests` contradicts (or lacks: then `actual` is empty), with
    /// what the file has.
    package func mismatch(in digests: [Checksum.Algorithm: [UInt8]]) -> (Checksum, actual: [UInt8])? {
        for expected in self {
            let actual = digests[expected.algorithm] ?? []
            if actual != expected.digest { return (expected, actual) }
        }
        return nil
    }

    /// The message for a mismatch: `SHA-256 of FILE is HEX, expected HEX` (without `of FILE`
    /// for nil).
    package static func mismatchMessage(_ expected: Checksum, actual: [UInt8], of what: String?) -> String {
        let subject = expected.algorithm.displayName + (what.map { " of " + $0 } ?? "")
        let found = actual.isEmpty ? "was not computed" : "is \(Hex.string(actual))"
        return "\(subject) \(found), \(expected.origin) \(expected.hex)"
    }

    /// The checksums a caller gave, once each; a second, different digest for one algorithm
    /// (which no file could match) is an error naming the algorithm.
    package static func merging(_ checksums: [Checksum]) throws(HaulError) -> [Checksum] {
        var out: [Checksum] = []
        for checksum in checksums {
            if let same = out.first(where: { $0.algorithm == checksum.algorithm }) {
                guard same.digest == checksum.digest else {
                    throw HaulError(
                        .usage, "two different \(checksum.algorithm.rawValue) checksums: no file can have both")
                }
                continue
            }
            out.append(checksum)
        }
        return out
    }
}

/// What a finished file is checked against before it is put in place, and the digests already
/// known of its bytes (hashed while they were written); the others are read from the file.
package struct Verification: Sendable {
    package var expected: [Checksum]
    package var computed: [Checksum.Algorithm: [UInt8]]

    package init(_ expected: [Checksum] = [], computed: [Checksum.Algorithm: [UInt8]] = [:]) {
        self.expected = expected
        self.computed = computed
    }

    package var isEmpty: Bool { expected.isEmpty }

    /// The algorithms the expected digests need that were not computed.
    package var toRead: [Checksum.Algorithm] {
        var seen: Set<Checksum.Algorithm> = []
        return expected.map(\.algorithm).filter { computed[$0] == nil && seen.insert($0).inserted }
    }

    /// The first expected digest the bytes contradict, with the actual one: read from `fd`
    /// where not computed. Nil when all match. A mismatch found with computed digests is
    /// checked once more on the file's bytes before it counts: a hash state from a record that
    /// was wrong (stale, damaged) must not delete a right file.
    package func mismatch(readingFile fd: Int32) throws(Errno) -> (Checksum, actual: [UInt8])? {
        var digests = computed
        let missing = toRead
        if !missing.isEmpty { digests.merge(try MultiHasher.digests(ofFileAt: fd, missing)) { a, _ in a } }
        guard let found = expected.mismatch(in: digests) else { return nil }
        guard computed[found.0.algorithm] != nil else { return found }
        return expected.mismatch(in: try MultiHasher.digests(ofFileAt: fd, expected.map(\.algorithm)))
    }

    /// The same for bytes in memory.
    package func mismatch(of body: [UInt8]) -> (Checksum, actual: [UInt8])? {
        guard !isEmpty else { return nil }
        var hasher = MultiHasher(toRead)
        body.withUnsafeBytes { hasher.update($0, at: 0) }
        return expected.mismatch(in: computed.merging(hasher.digests()) { a, _ in a })
    }
}
