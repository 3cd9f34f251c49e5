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

    /// The SHA-256 (hex) of the file at `path`.
    public static func sha256(ofFile path: String) throws -> String {
        do throws(Errno) { return try SHA256.hexDigest(ofFile: path) } catch {
            throw POSIXError(.init(rawValue: error.rawValue) ?? .EIO)
        }
    }
}
