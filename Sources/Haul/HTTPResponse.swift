import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A response's status line and headers.
public struct HTTPResponse: Sendable, Equatable {
    /// The status code.
    public var statusCode: Int
    /// Header fields in the order received.
    public var headers: [HTTPField]
    /// The URL that answered (after redirects).
    public var url: URL

    /// One header field.
    public struct HTTPField: Sendable, Equatable {
        /// The field name as sent.
        public var name: String
        /// The field value.
        public var value: String
    }

    /// The first value of a header, compared case-insensitively.
    public func value(forHeader name: String) -> String? {
        headers.first { $0.name.equalsIgnoringASCIICase(name) }?.value
    }

    /// `Content-Length`, when sent.
    public var expectedContentLength: Int64? { value(forHeader: "Content-Length").flatMap { Int64($0) } }

    init(_ r: TransportResponse, url: URL) { self.init(status: r.status, headers: r.headers, url: url) }

    init(status: Int, headers: HTTPHeaders, url: URL) {
        statusCode = status
        self.headers = headers.map { HTTPField(name: $0.name, value: $0.value) }
        self.url = url
    }
}

/// A GET request with extra headers, for ``HaulSession/data(for:maxBytes:)`` and
/// ``HaulSession/bytes(for:window:)``.
public struct HaulRequest: Sendable {
    /// The URL.
    public var url: URL
    /// Extra headers (on top of the configuration's).
    public var headers: [String: String] = [:]
    /// Ask for a compressed body (gzip, deflate, …) and decode it: the default. False asks for
    /// the body as stored (`Accept-Encoding: identity`) and passes on whatever encoding the
    /// server applies anyway, as file downloads do.
    public var decodesContent = true
    /// How the session's ``HaulConfiguration/cache`` answers it; nil: the configuration's
    /// ``HaulConfiguration/requestCachePolicy``.
    public var cachePolicy: CachePolicy?
    /// Creates a request.
    public init(url: URL, headers: [String: String] = [:]) {
        self.url = url
        self.headers = headers
    }
}
