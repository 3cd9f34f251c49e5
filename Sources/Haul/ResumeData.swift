import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What a cancelled download needs to continue later, in this process or another one.
///
/// It is the documented resume record (docs/resume-record.md) plus where the partial file is:
/// `Codable`, versioned, and free of credentials (URLs are stored without user and password,
/// headers not at all). Store it anywhere; ``HaulSession/downloadTask(withResumeData:options:)``
/// continues with a `Range` request at ``bytesOnDisk``. If the file changed on the server in the
/// meantime, the download restarts from zero instead of splicing two versions. It continues only
/// the partial file it was made from (by device, inode and birth time): a `.part` put in its
/// place, or copied from elsewhere, is refused as any `.part` haul cannot vouch for.
///
/// ```swift
/// let data = await task.cancelProducingResumeData()
/// try data?.encoded().write(to: saved)
/// // later, maybe after a restart:
/// let resumed = session.downloadTask(withResumeData: try ResumeData(data: Data(contentsOf: saved)))
/// resumed.resume()
/// ```
public struct ResumeData: Codable, Sendable, Equatable {
    /// The format version this library writes.
    public static let currentVersion = 1

    /// Format version.
    public var version: Int
    /// The URL, without credentials.
    public var url: URL
    /// The final file; the partial data is at `<destination>.part`.
    public var destination: URL
    /// Validators the bytes on disk belong to.
    public var etag: String?
    /// Validators the bytes on disk belong to.
    public var lastModified: String?
    /// The full size, when known.
    public var totalBytes: Int64?
    /// Bytes durably on disk in the partial file.
    public var bytesOnDisk: Int64
    /// The partial file the data was made from (device, inode, birth time): a `.part` found in
    /// its place without a record is continued only if it is that file.
    var partialFile: ResumeRecord.FileIdentity?

    init(record: ResumeRecord, destination: String) {
        version = Self.currentVersion
        url = URL(string: record.url) ?? URL(fileURLWithPath: "/")
        self.destination = URL(fileURLWithPath: destination)
        etag = record.etag
        lastModified = record.lastModified
        totalBytes = record.totalLength
        bytesOnDisk = record.contiguousBytes
        partialFile = record.partial
    }

    var record: ResumeRecord {
        var r = ResumeRecord(
            url: ResumeRecord.redacted(url), etag: etag, lastModified: lastModified, totalLength: totalBytes,
            ranges: bytesOnDisk > 0 ? [ByteRange(0, bytesOnDisk)] : [])
        r.updatedAt = nil
        r.partial = partialFile
        return r
    }

    /// JSON, for storing.
    public func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)) ?? Data()
    }

    /// Decodes stored resume data.
    /// - Throws: ``HaulError/Code/usage`` for data that is not resume data of a known version.
    public init(data: Data) throws(HaulError) {
        guard let decoded = try? JSONDecoder().decode(ResumeData.self, from: data) else {
            throw HaulError(.usage, "not Haul resume data")
        }
        guard decoded.version == Self.currentVersion else {
            throw HaulError(.usage, "resume data version \(decoded.version) is not supported")
        }
        self = decoded
    }
}
