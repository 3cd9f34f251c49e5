#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What ``HaulSession/diagnose(_:options:)`` found out about how a server serves a URL: the
/// facts that decide whether a download of it resumes, splits over connections and goes fast
/// (`haul doctor URL`). URLs in it carry no credentials, and past the first no query.
public struct Diagnosis: Sendable, Equatable, Codable {
    /// One answer on the way to the file.
    public struct Hop: Sendable, Equatable, Codable {
        /// Its HTTP status.
        public var status: Int
        /// The URL that gave it.
        public var url: String
    }

    /// The connection of the file's answer.
    public struct Connection: Sendable, Equatable, Codable {
        /// "HTTP/1.1", "HTTP/2", "HTTP/3"; nil when the transport does not tell.
        public var httpVersion: String?
        /// The TLS protocol ("TLSv1.3"); nil over plain http or when the TLS library does not tell.
        public var tlsVersion: String?
        /// When the server's certificate expires (`2027-03-01T12:00:00Z`); nil when not told.
        public var certificateExpires: String?
        /// Whole days from the diagnosis to that expiry (negative: expired).
        public var certificateDaysLeft: Int?
    }

    /// The file's answer to a plain GET.
    public struct Answer: Sendable, Equatable, Codable {
        /// Its status.
        public var status: Int
        /// Its Content-Length, when it has one.
        public var length: Int64?
        /// Its Content-Type.
        public var contentType: String?
        /// Its Accept-Ranges.
        public var acceptRanges: String?
        /// Its Content-Encoding (asked for `identity`, as a download asks).
        public var contentEncoding: String?
        /// How its body broke off before the first 64 KiB were read (the connection lost),
        /// when it did.
        public var bodyError: String?
    }

    /// The answer's validators, and whether a second request named the same.
    public struct Validators: Sendable, Equatable, Codable {
        /// The ETag of the first answer.
        public var etag: String?
        /// Its Last-Modified.
        public var lastModified: String?
        /// The ETag of a second answer to the same URL.
        public var secondETag: String?
        /// Its Last-Modified.
        public var secondLastModified: String?
        /// Whether both answers named the same validators; nil without any (or without a second answer).
        public var stable: Bool?
        /// Whether the ETag is weak (`W/`), which If-Range cannot use.
        public var weakETag: Bool
    }

    /// How a server answered two small ranges of its file.
    public enum RangeSupport: String, Sendable, Equatable, Codable {
        /// 206 with the bytes of a whole read at those offsets.
        case honoured
        /// 200 with the whole file: no resume, no split.
        case ignored
        /// 206 with other bytes, or another range than asked.
        case wrongBytes = "wrong-bytes"
        /// Another status (416, an error).
        case refused
        /// Not asked (the answer was under two bytes, or not a 2xx).
        case untested
    }

    /// The range check.
    public struct Ranges: Sendable, Equatable, Codable {
        /// What the server did.
        public var support: RangeSupport
        /// How, in one line.
        public var detail: String
    }

    /// HEAD against GET.
    public struct HeadCheck: Sendable, Equatable, Codable {
        /// HEAD's status; nil when HEAD failed.
        public var status: Int?
        /// HEAD's Content-Length.
        public var length: Int64?
        /// HEAD's Content-Type.
        public var contentType: String?
        /// Whether HEAD named GET's status, its length (when both name one) and its media
        /// type; nil when HEAD failed.
        public var agrees: Bool?
    }

    /// How many connections at once the server took.
    public struct Connections: Sendable, Equatable, Codable {
        /// How many were opened (one at a time, each kept open, up to the first refusal).
        public var tried: Int
        /// How many got a 2xx answer.
        public var admitted: Int
        /// What turned the next one away, when one was.
        public var refusal: String?
        /// Of the admitted, how many had their whole answer before the count ended (a small
        /// file: they held no connection, and the count says less).
        public var ended: Int
    }

    /// A speed measurement.
    public struct Speed: Sendable, Equatable, Codable {
        /// Connections used (one range each, above 1).
        public var connections: Int
        /// Bytes received.
        public var bytes: Int64
        /// Over this many seconds.
        public var seconds: Double
        /// `bytes / seconds`.
        public var bytesPerSecond: Double
    }

    /// The URL asked about.
    public var url: String
    /// Every answer, redirects first; the last is the file's.
    public var hops: [Hop]
    /// The file's connection.
    public var connection: Connection
    /// The file's answer.
    public var answer: Answer
    /// Its validators.
    public var validators: Validators
    /// The range check.
    public var ranges: Ranges
    /// HEAD against GET; nil when not asked (the answer was not a 2xx).
    public var head: HeadCheck?
    /// Whether a range asked for with `Accept-Encoding: gzip` came compressed; nil when not asked.
    public var gzipOnRanges: Bool?
    /// The connection count; nil when not asked.
    public var connections: Connections?
    /// The speed on one connection, then on several; empty when not measured.
    public var speeds: [Speed]
    /// One line for each thing that makes a download of the URL slow, unable to resume or
    /// unsafe to split; empty when there is none.
    public var findings: [String]
}

/// What ``HaulSession/diagnose(_:options:)`` tries.
public struct DiagnosisOptions: Sendable, Equatable {
    /// The most connections held open at once to count what the server admits (default 8, at
    /// most 64; 0 skips the count).
    public var maxConnections = 8
    /// Seconds each speed measurement runs (default 3; 0 skips them).
    public var speedSeconds: Double = 3
    /// Connections of the second speed measurement (default 4, 1-16; one range each).
    public var speedConnections = 4
    /// Headers for every request, on top of the session's.
    public var headers: [String: String] = [:]
    /// The longest a check waits for a head past the connect timeout, and reads a body after it.
    var requestSeconds: Double = 10
    /// Creates the defaults.
    public init() {}

    /// These within their ranges: held connections past the session's cap (`cap`) would wait
    /// for a slot none of them gives back; seconds that are NaN or below zero skip the
    /// measurement, infinity or more than ten minutes is ten minutes.
    func clamped(maxConnectionsPerHost cap: Int?) -> DiagnosisOptions {
        var o = self
        o.maxConnections = min(max(maxConnections, 0), 64, cap ?? 64)
        o.speedConnections = max(1, min(speedConnections, 16, cap ?? 16))
        o.speedSeconds = speedSeconds > 0 ? min(speedSeconds, 600) : 0
        o.requestSeconds = requestSeconds > 0 ? min(requestSeconds, 600) : 10
        return o
    }
}
