import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Whether a file already at the destination is the download.
extension PartialFile {
    /// A file at `path` with the server's size and no record is taken as the download already
    /// done; with an expected SHA-256 (hex, any case) only if it matches, checked on a Dispatch
    /// worker. A mismatch throws ``HaulError/Code/checksumMismatch`` and leaves the file alone:
    /// it was there before, not ours to delete.
    package static func confirmComplete(
        _ path: String, bytes: Int64, sha256: String?
    ) async throws(HaulError) -> DownloadOutcome {
        if let expected = sha256?.lowercased() {
            let actual = try await Sys.offload { () throws(HaulError) -> String in
                do throws(Errno) { return try SHA256.hexDigest(ofFile: path) } catch {
                    throw .fileSystem(error, "read", path: path)
                }
            }
            guard actual == expected else {
                throw HaulError(
                    .checksumMismatch,
                    "\(path) exists with the server's size, but its SHA-256 is \(actual), expected \(expected);"
                        + " use --overwrite to replace it", path: path)
            }
        }
        return DownloadOutcome(path: path, bytes: bytes, alreadyComplete: true)
    }

}
