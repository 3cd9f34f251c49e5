#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Decides, for each response, whether the bytes on disk can be continued, must be discarded,
/// are already complete, or the download must retry or fail. Pure: no I/O, tested directly.
///
/// Rules (docs/resume.md): resume with `Range` + `If-Range`; accept only a 206 that
/// ``RangeAnswer`` finds continues the record's bytes;
/// a 200 restarts from zero (the partial is truncated, never appended to); 416 with the whole file
/// on disk is done; a partial without validators resumes only when the total length matches.
package struct ResumeStateMachine: Sendable {
    /// What is durably on disk, or nil for nothing.
    package private(set) var record: ResumeRecord?
    /// The URL the download was asked for: messages name it whole, and a redirect target
    /// without its query (``ResumeRecord/shown(_:origin:)``). Nil: every URL is the origin.
    package var origin: URL?
    /// The file at the destination a conditional request asks about (`-N`): sent while no
    /// partial is continued; a 304, or a body of the same version, leaves it as it is.
    package var condition: Condition?

    package init(record: ResumeRecord?, origin: URL? = nil, condition: Condition? = nil) {
        self.record = record
        self.origin = origin
        self.condition = condition
    }

    /// Validators and length a response announced.
    package struct Validators: Equatable, Sendable {
        package var etag: String?
        package var lastModified: String?
        package var totalLength: Int64?
    }

    /// What the engine does with a response.
    package enum Action: Equatable, Sendable {
        /// Take the body and write it at `offset`; when `discardExisting`, truncate the partial first.
        case write(offset: Int64, discardExisting: Bool, validators: Validators)
        /// Follow a redirect to this URL.
        case redirect(URL)
        /// The whole file is already on disk (a 416 for a range starting at its end).
        case alreadyComplete
        /// The file the request asked about is the server's (a 304, or a body of its version):
        /// nothing is written.
        case notModified(Validators)
        /// Drop this response and the partial; ask again from zero without delay.
        case restart(reason: String)
        /// A transient failure: retry after the policy's delay (or the server's Retry-After).
        case retry(HaulError)
        /// A permanent failure.
        case fail(HaulError)
    }

    /// The offset the next request asks for.
    package var resumeOffset: Int64 { record?.contiguousBytes ?? 0 }

    /// Bytes asked again before the resume offset of a partial without a validator.
    package static let overlap: Int64 = 64 << 10

    /// Where the next request's range starts: the resume offset, or, for a partial without a
    /// validator, up to ``overlap`` bytes before it. Those bytes are compared with the disk
    /// before anything is appended: without an ETag or a date nothing else tells that the file
    /// did not change (the same length says little).
    package var requestOffset: Int64 {
        guard let record, !record.fileVersion.canBeConfirmed else { return resumeOffset }
        return max(0, resumeOffset - Self.overlap)
    }

    /// How many leading bytes of a 206 from ``requestOffset`` are compared, not written.
    package var overlapBytes: Int64 { resumeOffset - requestOffset }

    /// Whether the next request asks about the file in place: there is one, and no partial.
    package var asksCondition: Bool { condition != nil && record == nil }

    /// `Range` and `If-Range` for the next request, or the condition's headers when it starts
    /// from zero with a file in place to ask about (none otherwise).
    package func resumeHeaders() -> [(String, String)] {
        if asksCondition, let condition { return condition.headers }
        guard let record, resumeOffset > 0 else { return [] }
        var headers = [("Range", "bytes=\(requestOffset)-")]
        // If-Range needs a strong validator: a weak ETag never matches, so fall back to the date.
        if let etag = record.etag, !etag.hasPrefix("W/") {
            headers.append(("If-Range", etag))
        } else if let lastModified = record.lastModified {
            headers.append(("If-Range", lastModified))
        }
        return headers
    }

    /// A response's status line and headers arrived for a request to `url`.
    package func responseReceived(status: Int, headers: HTTPHeaders, url: URL) -> Action {
        let offset = resumeOffset
        switch status {
        case 301, 302, 303, 307, 308:
            guard let location = headers["Location"], let target = URL(string: location, relativeTo: url)?.absoluteURL
            else {
                return .fail(HaulError(.invalidResponse, "HTTP \(status) without a usable Location from \(show(url))"))
            }
            return .redirect(target)
        case 304 where asksCondition:
            return .notModified(validators(headers, total: nil))
        case 200 where asksCondition && condition?.unchanged(headers, total: headers.contentLength) == true:
            return .notModified(validators(headers, total: headers.contentLength))
        case 200:
            return .write(
                offset: 0, discardExisting: offset > 0, validators: validators(headers, total: headers.contentLength))
        case 204:
            // No Content: the file is empty (as curl saves it), whatever a Content-Length says.
            return .write(offset: 0, discardExisting: offset > 0, validators: validators(headers, total: 0))
        case 206:
            guard offset > 0, let record else {
                return .fail(HaulError(.invalidResponse, "HTTP 206 for a request without Range from \(show(url))"))
            }
            switch RangeAnswer.check(
                headers, from: requestOffset, of: record.fileVersion, totalRequired: !record.fileVersion.canBeConfirmed)
            {
            case .mismatch(let reason):
                return .restart(reason: reason)
            case .continues(let seen):
                return .write(
                    offset: offset, discardExisting: false,
                    validators: Validators(
                        etag: seen.etag ?? record.etag, lastModified: seen.lastModified ?? record.lastModified,
                        totalLength: seen.total ?? record.totalLength))
            }
        case 416:
            if offset > 0, let total = record?.totalLength, offset == total {
                let announced = headers["Content-Range"].flatMap(HTTPParsing.contentRange)?.total
                if announced == nil || announced == total { return .alreadyComplete }
            }
            if offset > 0 { return .restart(reason: "server rejected the range bytes=\(offset)- (416)") }
            return .fail(statusError(status, url, headers))
        case _ where HTTPStatus.isTransient(status):
            return .retry(statusError(status, url, headers))
        case 400...599:
            return .fail(statusError(status, url, headers))
        default:
            // Not a file, a redirect to follow or an error (a 304 to a plain GET, a 300): a
            // status the download cannot use, reported as an HTTP status, not an invalid answer.
            return .fail(statusError(status, url, headers))
        }
    }

    /// The engine took `.write`: the record now describes the new body's file.
    package mutating func accept(offset: Int64, validators: Validators, url: URL, finalURL: URL) {
        var next = ResumeRecord(
            url: ResumeRecord.redacted(url), finalURL: ResumeRecord.location(finalURL), etag: validators.etag,
            lastModified: validators.lastModified, totalLength: validators.totalLength,
            ranges: offset > 0 ? [ByteRange(0, offset)] : [])
        next.updatedAt = record?.updatedAt
        record = next
    }

    /// Bytes up to `bytes` are durable on disk.
    package mutating func advance(to bytes: Int64) {
        guard record != nil else { return }
        record!.ranges = bytes > 0 ? [ByteRange(0, bytes)] : []
    }

    /// The partial was discarded.
    package mutating func reset() { record = nil }

    private func validators(_ headers: HTTPHeaders, total: Int64?) -> Validators {
        Validators(etag: headers.etag, lastModified: headers.lastModified, totalLength: total)
    }

    private func statusError(_ status: Int, _ url: URL, _ headers: HTTPHeaders) -> HaulError {
        .httpStatus(status, from: show(url), headers: headers)
    }

    private func show(_ url: URL) -> String { ResumeRecord.shown(url, origin: origin ?? url) }
}

/// Reason phrases for messages.
package enum HTTPStatus {
    /// Statuses worth retrying: 408, 429, 500, 502, 503, 504.
    package static func isTransient(_ status: Int) -> Bool { [408, 429, 500, 502, 503, 504].contains(status) }

    package static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 300: "Multiple Choices"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 407: "Proxy Authentication Required"
        case 408: "Request Timeout"
        case 410: "Gone"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 416: "Range Not Satisfiable"
        case 421: "Misdirected Request"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: status >= 500 ? "Server Error" : status >= 400 ? "Client Error" : ""
        }
    }
}
