import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension TestContent {
    /// The SHA-256 (hex) of the server's body for `seed`/`version`, `count` bytes long, worked out
    /// 4 MiB at a time.
    public static func sha256(seed: Int = 1, version: Int = 0, count: Int) -> String {
        var hasher = SHA256()
        let block = 4 << 20
        var offset = 0
        while offset < count {
            let n = min(block, count - offset)
            bytes(seed: seed, version: version, offset: offset, count: n).withUnsafeBytes { hasher.update($0) }
            offset += n
        }
        return hasher.hexDigest()
    }

    /// The digest of `count` bytes of the body for `seed`/`version` from `offset` (or of
    /// `stored`'s), worked out 4 MiB at a time.
    public static func digest(
        _ algorithm: Checksum.Algorithm, seed: Int = 1, version: Int = 0, offset: Int = 0, count: Int,
        stored: [UInt8]? = nil
    ) -> [UInt8] {
        var hasher = MultiHasher([algorithm])
        var at = 0
        while at < count {
            let n = min(4 << 20, count - at)
            let chunk =
                stored.map { Array($0[(offset + at)..<(offset + at + n)]) }
                ?? bytes(seed: seed, version: version, offset: offset + at, count: n)
            chunk.withUnsafeBytes { hasher.update($0, at: Int64(at)) }
            at += n
        }
        return hasher.digests()[algorithm] ?? []
    }

    /// The SHA-256 (hex) of the file at `path`.
    public static func sha256(ofFile path: String) throws -> String {
        do throws(Errno) { return try SHA256.hexDigest(ofFile: path) } catch {
            throw POSIXError(.init(rawValue: error.rawValue) ?? .EIO)
        }
    }
}
