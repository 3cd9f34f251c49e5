#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The one judge of whether an answer's bytes belong with bytes already had: a resume's 206, a
/// segment's 206, a stream's continuation, and a partial held against a probe or a 200. Pure.
///
/// A 206 continues bytes from `start` of a version when its Content-Range starts there, its
/// total is that version's (a partial without a validator, and a segment, must see it stated),
/// and nothing in it names another version: a strong ETag must come back exactly (RFC 9110
/// 13.1.5: If-Range compares strongly), a weak one must compare weakly, and a Last-Modified
/// must not differ.
package enum RangeAnswer {
    /// What names a version of a file.
    package struct Version: Equatable, Sendable {
        package var etag: String?
        package var lastModified: String?
        package var total: Int64?

        package init(etag: String?, lastModified: String?, total: Int64?) {
            self.etag = etag
            self.lastModified = lastModified
            self.total = total
        }

        /// A strong ETag or a date: something a server can be asked to confirm (`If-Range`). A
        /// weak ETag alone says two bodies mean the same, not that their bytes are the same.
        package var canBeConfirmed: Bool { strongETag != nil || lastModified != nil }

        /// An ETag that is not weak.
        package var strongETag: String? { etag.flatMap { $0.hasPrefix("W/") ? nil : $0 } }
    }

    /// What a 206 means for the bytes it was asked to continue.
    package enum Verdict: Equatable, Sendable {
        /// The asked bytes, of that version: what the answer itself stated.
        case continues(Version)
        /// Other bytes, or another version: never written. The reason, for a message.
        case mismatch(String)
    }

    /// Judges a 206's headers, asked for bytes from `start` of `version`; with `totalRequired`
    /// the answer must state the total (and it must be `version`'s).
    package static func check(
        _ headers: HTTPHeaders, from start: Int64, of version: Version, totalRequired: Bool
    ) -> Verdict {
        guard let range = headers["Content-Range"].flatMap(HTTPParsing.contentRange), let first = range.start else {
            return .mismatch("206 without a usable Content-Range")
        }
        guard first == start else { return .mismatch("server sent bytes from \(first), asked for \(start)") }
        let seen = Version(etag: headers.etag, lastModified: headers.lastModified, total: range.total)
        if let reason = versionMismatch(version, seen) { return .mismatch(reason) }
        if let mine = version.total, let theirs = range.total, mine != theirs {
            return .mismatch("file changed on the server (size \(mine) → \(theirs))")
        }
        if totalRequired && (range.total == nil || version.total == nil) {
            return .mismatch("the size cannot be confirmed (Content-Range \(headers["Content-Range"] ?? ""))")
        }
        return .continues(seen)
    }

    /// Why `seen` (a 206's validators) cannot be of `version`; nil when nothing says it is
    /// another.
    package static func versionMismatch(_ version: Version, _ seen: Version) -> String? {
        if let mine = version.strongETag {
            // A 206 carries the ETag its 200 would (RFC 9110 15.3.7): without it nothing says
            // which version the bytes are of.
            guard let theirs = seen.etag else {
                return "the server's 206 has no ETag to confirm the file is still \(mine)"
            }
            if theirs != mine { return "file changed on the server (ETag \(mine) → \(theirs))" }
            return nil
        }
        if let mine = version.etag, let theirs = seen.etag, opaque(mine) != opaque(theirs) {
            return "file changed on the server (ETag \(mine) → \(theirs))"
        }
        if let mine = version.lastModified, let theirs = seen.lastModified, mine != theirs {
            return "file changed on the server (Last-Modified \(mine) → \(theirs))"
        }
        return nil
    }

    /// Whether `seen` (a 200's or a probe's) is certainly `version`, byte for byte: the same
    /// size, and the same strong ETag, or (without one) the same date and the same ETag or none
    /// on either side (a probe that shows no weak ETag cannot say a weak one is unchanged).
    package static func isSameVersion(_ version: Version, _ seen: Version) -> Bool {
        guard version.canBeConfirmed, version.total == seen.total else { return false }
        if let strong = version.strongETag { return seen.etag == strong }
        return seen.lastModified == version.lastModified && seen.etag == version.etag
    }

    /// An ETag's opaque part (weak comparison, RFC 9110 8.8.3.2, ignores `W/`).
    private static func opaque(_ tag: String) -> Substring { tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag) }
}

extension ResumeRecord {
    /// The version of the file this record's bytes are of.
    package var fileVersion: RangeAnswer.Version {
        RangeAnswer.Version(etag: etag, lastModified: lastModified, total: totalLength)
    }
}

/// What the answer to a probe (`Range: bytes=0-(limit-1)`) holds, judged on its head: all of a
/// small file, the first range of a larger one, or nothing to keep (the status then says the
/// rest: a redirect, an error, a server without ranges). A compressed body or one of no stated
/// length is never kept: its bytes would not be the file's.
package enum ProbeAnswer: Equatable, Sendable {
    /// All of a file of `length` bytes (a 206 for the whole of it, or a 200), at most `limit`.
    case whole(length: Int64)
    /// The first `limit` bytes of a larger file.
    case firstRange
    case nothingToKeep

    package static func judge(status: Int, headers: HTTPHeaders, limit: Int) -> ProbeAnswer {
        let encoded = headers["Content-Encoding"].map { !$0.equalsIgnoringASCIICase("identity") } ?? false
        guard let length = headers.contentLength, !encoded else { return .nothingToKeep }
        let range = headers["Content-Range"].flatMap(HTTPParsing.contentRange)
        switch status {
        case 206 where range?.start == 0 && range?.total == length && length <= limit:
            return .whole(length: length)
        case 206 where range?.start == 0 && length == limit && (range?.total ?? 0) > Int64(limit):
            return .firstRange
        case 200 where length <= limit:
            return .whole(length: length)
        default:
            return .nothingToKeep
        }
    }
}
