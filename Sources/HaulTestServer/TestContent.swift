import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The deterministic bytes the test server serves: byte `i` of a file with a given seed and
/// version is `pattern[(i) % period]`, where the pattern is pseudo-random per (seed, version).
/// Different versions differ at almost every offset, so any splice of two versions is caught.
public enum TestContent {
    /// Length of the repeating pattern (a prime, so patterns never align with block sizes).
    public static let period = 1_000_003

    private static let cache = Locked<[Int: [UInt8]]>([:])

    /// The pattern for a seed and version.
    public static func pattern(seed: Int, version: Int) -> [UInt8] {
        let key = seed &* 1_000 &+ version
        if let p = cache.withLock({ $0[key] }) { return p }
        var state = UInt64(truncatingIfNeeded: key) &* 0x9E37_79B9_7F4A_7C15 | 1
        var bytes = [UInt8](repeating: 0, count: (period + 7) / 8 * 8)
        var i = 0
        while i < bytes.count {
            state ^= state >> 12
            state ^= state << 25
            state ^= state >> 27
            var v = state &* 0x2545_F491_4F6C_DD1D
            for _ in 0..<8 {
                bytes[i] = UInt8(truncatingIfNeeded: v)
                v >>= 8
                i += 1
            }
        }
        let p = Array(bytes[0..<period])
        cache.withLock { $0[key] = p }
        return p
    }

    /// Bytes `[offset, offset + count)` of a file.
    public static func bytes(seed: Int = 1, version: Int = 0, offset: Int = 0, count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { fill($0, seed: seed, version: version, offset: offset) }
        return out
    }

    /// Fills `buffer` with the file's bytes starting at `offset`.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer, seed: Int, version: Int, offset: Int) {
        let p = pattern(seed: seed, version: version)
        p.withUnsafeBytes { src in
            var done = 0
            var pos = offset % period
            while done < buffer.count {
                let n = min(buffer.count - done, period - pos)
                (buffer.baseAddress! + done).copyMemory(from: src.baseAddress! + pos, byteCount: n)
                done += n
                pos = 0
            }
        }
    }

    /// Nil when the file at `path` holds exactly `expected`; otherwise a one-line description
    /// (sizes and the first differing offset), for test failures that do not print megabytes.
    public static func difference(file path: String, expected: [UInt8]) -> String? {
        let actual = FileManager.default.contents(atPath: path).map { Array($0) } ?? []
        return difference(actual, expected).map { "\(path): \($0)" }
    }

    /// Nil when `actual` equals `expected`, else one line: both sizes and the first differing
    /// offset. Tests compare bodies through this: a failed `#expect(a == b)` on megabytes makes
    /// the testing library compute a diff of them, which takes hours.
    public static func difference(_ actual: [UInt8], _ expected: [UInt8]) -> String? {
        guard actual != expected else { return nil }
        let first = zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        return "\(actual.count) bytes, expected \(expected.count); first difference at "
            + (first.map(String.init) ?? "the end of the shorter")
    }

    /// A gzip member holding `data` in stored (uncompressed) deflate blocks: valid gzip that
    /// needs no zlib to produce.
    public static func gzip(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]
        var offset = 0
        repeat {
            let n = min(65_535, data.count - offset)
            let final: UInt8 = offset + n == data.count ? 1 : 0
            out.append(final)
            out += [UInt8(n & 0xff), UInt8(n >> 8), UInt8(~n & 0xff), UInt8((~n >> 8) & 0xff)]
            out += data[offset..<offset + n]
            offset += n
        } while offset < data.count
        let crc = crc32(data)
        for v in [crc, UInt32(truncatingIfNeeded: data.count)] {
            out += [UInt8(v & 0xff), UInt8((v >> 8) & 0xff), UInt8((v >> 16) & 0xff), UInt8(v >> 24)]
        }
        return out
    }

    static func crc32(_ data: [UInt8]) -> UInt32 {
        var table = [UInt32](repeating: 0, count: 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            table[i] = c
        }
        var crc: UInt32 = 0xFFFF_FFFF
        for b in data { crc = table[Int((crc ^ UInt32(b)) & 0xff)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
