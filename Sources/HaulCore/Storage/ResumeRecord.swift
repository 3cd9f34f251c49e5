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

/// A half-open byte range `[start, end)` of the file.
package struct ByteRange: Codable, Equatable, Sendable {
    package var start: Int64
    package var end: Int64
    package init(_ start: Int64, _ end: Int64) {
        self.start = start
        self.end = end
    }
    package var count: Int64 { end - start }

    /// `ranges` merged: sorted, overlapping or touching ones joined, empty ones dropped.
    package static func union(_ ranges: [ByteRange]) -> [ByteRange] {
        var out: [ByteRange] = []
        for r in ranges.filter({ $0.count > 0 }).sorted(by: { $0.start < $1.start }) {
            if let last = out.last, r.start <= last.end {
                out[out.count - 1].end = max(last.end, r.end)
            } else {
                out.append(r)
            }
        }
        return out
    }

    /// The parts of `[0, total)` that `covered` leaves out, in order.
    package static func gaps(in total: Int64, leftBy covered: [ByteRange]) -> [ByteRange] {
        var out: [ByteRange] = []
        var at: Int64 = 0
        for r in union(covered) where r.start < total {
            if r.start > at { out.append(ByteRange(at, r.start)) }
            at = max(at, r.end)
        }
        if at < total { out.append(ByteRange(at, total)) }
        return out
    }
}

/// The id of this boot of the machine, which a record keeps to tell a process crash (same boot:
/// every completed write is in the page cache) from a power loss or reboot (only what was
/// synced survives). A debug `haul` takes `HAUL_BOOT_ID` instead, so that a test can simulate a
/// reboot.
package enum BootID {
    private static let system: String? = {
        #if DEBUG
            if let value = getenv("HAUL_BOOT_ID") { return String(cString: value) }
        #endif
        guard let bytes = try? Sys.readSmallFile("/proc/sys/kernel/random/boot_id") else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingASCIIWhitespace()
        return text.isEmpty ? nil : text
    }()

    /// This boot's id, read once; nil where the system gives none (then only synced ranges count).
    package static var current: String? { system }
}

/// The sidecar `<dest>.haul`: what Haul needs to resume `<dest>.part` safely.
///
/// Format: small JSON, versioned (see docs/resume-record.md). The record only ever claims bytes
/// that were fsync()ed to the partial file before the record was written. URLs are stored without
/// user name and password; request headers (and so `Authorization` and cookies) are never stored.
package struct ResumeRecord: Codable, Equatable, Sendable {
    package static let currentVersion = 2
    package static let fileExtension = ".haul"

    /// The file a record was written with (its partial, or the finished file it was renamed
    /// to): device, inode number and, where the file system keeps one, birth time (an inode
    /// number freed and given to a new file at the same name has another), so that a record
    /// counts only for its own partial.
    package struct FileIdentity: Codable, Equatable, Sendable {
        package var device: UInt64
        package var inode: UInt64
        /// Nanoseconds since 1970; nil where the file system keeps no birth time.
        package var birth: Int64?
        package init(_ status: Sys.FileStatus) {
            device = status.device
            inode = status.inode
            birth = status.birth
        }
        /// Inode and birth time; the device number only where there is no birth time (it can
        /// change across a reboot or remount: btrfs subvolumes, overlayfs, NFS).
        package func isSame(as status: Sys.FileStatus) -> Bool {
            guard inode == status.inode, birth == status.birth else { return false }
            return birth != nil || device == status.device
        }
    }

    /// Format version; readers refuse versions they do not know.
    package var version: Int = ResumeRecord.currentVersion
    /// The URL the user asked for, without credentials.
    package var url: String
    /// The URL after redirects, without credentials.
    package var finalURL: String?
    /// The strong or weak ETag the bytes on disk belong to.
    package var etag: String?
    /// The Last-Modified date the bytes on disk belong to.
    package var lastModified: String?
    /// The full length of the file, when the server said.
    package var totalLength: Int64?
    /// False when the server gave nothing to confirm the version with (no strong ETag, no date):
    /// resuming then requires the same total length and compares bytes before the offset. Kept
    /// in the record for its readers; decisions judge ``fileVersion`` itself.
    package var validated: Bool
    /// The byte ranges durably on disk in the partial file.
    package var ranges: [ByteRange]
    /// When the record was last written (ISO 8601).
    package var updatedAt: String?
    /// The partial file this record describes; set by ``PartialFile`` when it writes the record.
    package var partial: FileIdentity?
    /// The boot the record was written in (`/proc/sys/kernel/random/boot_id`).
    package var bootID: String?
    /// Ranges written to the partial when the record was written, synced or not: in the same
    /// boot every completed write is in the page cache, so a process that died (kill -9) lost
    /// none of them; after a reboot only ``ranges`` (synced) count.
    package var written: [ByteRange]?
    /// The mount the partial was written through (``Sys/FileStatus/mount``): ``written`` counts
    /// only through the same one (a disk pulled out and back loses what was in its page cache).
    package var mountID: UInt64?
    /// The hashes a download with checksums computed while writing, each at its last whole
    /// block within the synced bytes: a resume goes on from them and reads again only the bytes
    /// after (docs/integrity.md). Nil when no hash was asked for or the bytes were not written in
    /// order.
    package var hashes: [HashState]?

    package init(
        url: String, finalURL: String? = nil, etag: String? = nil, lastModified: String? = nil,
        totalLength: Int64? = nil, ranges: [ByteRange] = []
    ) {
        self.url = url
        self.finalURL = finalURL
        self.etag = etag
        self.lastModified = lastModified
        self.totalLength = totalLength
        self.validated = (etag.map { !$0.hasPrefix("W/") } ?? false) || lastModified != nil
        self.ranges = ranges
    }

    /// Whether `other` claims the same bytes of the same version (all but the time of writing,
    /// the hashes so far, and what the partial file stamps on every record it writes: identity,
    /// boot, written ranges).
    package func claimsTheSame(as other: ResumeRecord?) -> Bool {
        guard var other else { return false }
        other.updatedAt = updatedAt
        other.partial = partial
        other.bootID = bootID
        other.written = written
        other.mountID = mountID
        other.hashes = hashes
        return self == other
    }

    /// The record as a resume on `boot` may trust it: in the boot it was written in, the ranges
    /// written as well as those synced; after a reboot, only the synced ones.
    /// With `mount` (the partial's, as the reader sees it), the written ranges also need the
    /// record's mount to be that one.
    package func trusted(onBoot boot: String?, mount: UInt64? = nil) -> ResumeRecord {
        var record = self
        if let boot, bootID == boot, mount == nil || mountID == mount, let written {
            record.ranges = ByteRange.union(ranges + written)
        }
        record.written = nil
        return record
    }

    /// Whether every range it claims lies within a partial of `size` bytes.
    package func fits(size: Int64) -> Bool { ranges.allSatisfy { $0.end <= size } }

    /// The bytes from the start of the file that are on disk without a gap.
    package var contiguousBytes: Int64 {
        var end: Int64 = 0
        for r in ranges.sorted(by: { $0.start < $1.start }) where r.start <= end { end = max(end, r.end) }
        return end
    }

    package func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Encoding plain strings and integers cannot fail.
        return Array((try? encoder.encode(self)) ?? Data()) + [0x0A]
    }

    /// Decodes a record; nil for anything unreadable or of an unknown version.
    package static func decode(_ bytes: [UInt8]) -> ResumeRecord? {
        guard let record = try? JSONDecoder().decode(ResumeRecord.self, from: Data(bytes)),
            record.version == currentVersion
        else { return nil }
        return record
    }

    /// Whether its validators can be sent back as they are (no CR, LF or NUL in their bytes):
    /// a record whose validators cannot is not resumed from (its If-Range could not be sent).
    package var hasSendableValidators: Bool {
        (etag.map(HTTPHeaders.isSendable) ?? true) && (lastModified.map(HTTPHeaders.isSendable) ?? true)
    }

    /// Where a download's redirects led, as a record keeps it (``finalURL``): without
    /// credentials, query or fragment. A storage service's pre-signed link carries its signature
    /// and the key's id in the query; the field only shows people where the download went, and
    /// resuming never reads it.
    package static func location(_ url: URL) -> String { text(of: url, keepingQuery: false) }

    /// `url` with user name and password removed, for storing and printing.
    package static func redacted(_ url: URL) -> String {
        // Nearly every URL has neither: it is its own text, not parsed again by URLComponents
        // (each download asks four times). The one difference: an empty or zero-padded port
        // (`http://h:/f`, `:080`) stays as written.
        if url.user == nil && url.password == nil { return url.absoluteString }
        return text(of: url, keepingQuery: true)
    }

    /// How a message names `url`, asked for on the way to `origin` (the URL the caller gave):
    /// that one as ``redacted(_:)`` writes it; any other (where a redirect led) without its
    /// query and fragment as well, `?…` saying a query was left out. A storage service's
    /// pre-signed link carries its signature and the key's id in the query, and a message ends up
    /// in logs and bug reports; the user's own URL keeps its query, which tells which download it
    /// was.
    package static func shown(_ url: URL, origin: URL) -> String {
        if url.absoluteString == origin.absoluteString { return redacted(url) }
        let location = location(url)
        return url.query == nil ? location : location + "?…"
    }

    /// `url` without user name and password (and, unless `keepingQuery`, query and fragment);
    /// itself when it cannot be taken apart.
    private static func text(of url: URL, keepingQuery: Bool) -> String {
        guard var c = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url.absoluteString }
        c.user = nil
        c.password = nil
        if !keepingQuery {
            c.query = nil
            c.fragment = nil
        }
        return c.string ?? url.absoluteString
    }
}
