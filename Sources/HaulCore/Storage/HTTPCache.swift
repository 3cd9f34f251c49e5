#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `Cache-Control` directives as a cache reads them (RFC 9111 5.2), from every field of the
/// name; an unknown directive is ignored, a `max-age` that is not a number counts as 0 (stale).
package struct CacheControl: Equatable, Sendable {
    /// A delta-seconds value (RFC 9111 1.2.2): digits, past what fits 2^31; nil for anything else.
    package static func deltaSeconds(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return min(Int64(text) ?? 1 << 31, 1 << 31)
    }

    package var noStore = false
    package var noCache = false
    package var maxAge: Int64?

    package init(_ headers: HTTPHeaders) {
        for field in headers where field.name.equalsIgnoringASCIICase("Cache-Control") {
            for directive in field.value.split(separator: ",") {
                let parts = directive.split(separator: "=", maxSplits: 1)
                let name = parts.first.map { String($0).trimmingASCIIWhitespace().lowercased() } ?? ""
                let value = parts.count > 1 ? String(parts[1]).trimmingASCIIWhitespace() : nil
                switch name {
                case "no-store": noStore = true
                case "no-cache": noCache = true
                case "max-age":
                    let digits = value.map {
                        $0.hasPrefix("\"") && $0.hasSuffix("\"") ? String($0.dropFirst().dropLast()) : $0
                    }
                    maxAge = min(maxAge ?? .max, digits.flatMap(Self.deltaSeconds) ?? 0)
                default: break
                }
            }
        }
    }
}

/// One stored answer of the HTTP cache (format version 1, docs/http-cache.md): its head, the
/// request header values its `Vary` names, when it was asked for and received, and its body.
package struct CachedResponse: Codable, Equatable, Sendable {
    var version = 1
    /// The URL without user and password, and whether the body is decoded: the entry's key.
    package var url: String
    package var decoded: Bool
    /// The URL that answered, after redirects (without user and password).
    package var finalURL: String
    package var status: Int
    package var headers: [[String]]
    /// The request's values of the fields `Vary` names (nil: the request had none).
    package var vary: [String: String?]
    /// Seconds since 1970.
    package var requestTime: Double
    package var responseTime: Double
    /// The body (decoded when `decoded`); kept after the entry's head on disk, not in its JSON.
    package var body = Data()

    enum CodingKeys: String, CodingKey {
        case version, url, decoded, finalURL, status, headers, vary, requestTime, responseTime
    }

    package var responseHeaders: HTTPHeaders {
        HTTPHeaders(headers.compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil })
    }

    /// Fields never kept: another run's cookies, and those of one connection.
    static let unkept: Set<String> = [
        "set-cookie", "set-cookie2", "connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer",
        "proxy-authenticate", "proxy-authorization", "proxy-connection",
    ]

    package init(
        url: URL, decoded: Bool, finalURL: URL, status: Int, headers: HTTPHeaders, request: HTTPHeaders,
        requestTime: Double, responseTime: Double, body: Data
    ) {
        self.url = ResumeRecord.redacted(url)
        self.decoded = decoded
        self.finalURL = ResumeRecord.redacted(finalURL)
        self.status = status
        self.headers = headers.filter { !Self.unkept.contains($0.name.lowercased()) }.map { [$0.name, $0.value] }
        var vary: [String: String?] = [:]
        for name in Self.varyNames(headers) { vary[name] = request[name] }
        self.vary = vary
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.body = body
    }

    /// The field names of every `Vary`, lowercased; `*` among them when the answer varies on
    /// more than the request's fields.
    static func varyNames(_ headers: HTTPHeaders) -> [String] {
        headers.filter { $0.name.equalsIgnoringASCIICase("Vary") }.flatMap { field in
            field.value.split(separator: ",").map { String($0).trimmingASCIIWhitespace().lowercased() }
        }.filter { !$0.isEmpty }
    }

    /// Whether a request with `request`'s fields may be answered from it (RFC 9111 4.1).
    package func matches(_ request: HTTPHeaders) -> Bool {
        !vary.keys.contains("*") && vary.allSatisfy { name, value in request[name] == value }
    }

    /// Its age at `now` (RFC 9111 4.2.3).
    package func age(at now: Double) -> Double {
        let headers = responseHeaders
        let date = headers["Date"].flatMap { HTTPDate.parse($0) }.map(Double.init) ?? responseTime
        let ageValue = headers["Age"].map { Double(CacheControl.deltaSeconds($0) ?? 1 << 31) } ?? 0
        let apparent = max(0, responseTime - date)
        let corrected = ageValue + max(0, responseTime - requestTime)
        return max(apparent, corrected) + max(0, now - responseTime)
    }

    /// How long it is fresh for: `max-age`, else `Expires` less `Date`; no heuristic (an answer
    /// with neither is stale at once and used only after a revalidation).
    package var freshnessLifetime: Double {
        let headers = responseHeaders
        if let maxAge = CacheControl(headers).maxAge { return Double(maxAge) }
        guard let expires = headers["Expires"] else { return 0 }
        guard let expiry = HTTPDate.parse(expires) else { return 0 }  // an invalid date is in the past
        let date = headers["Date"].flatMap { HTTPDate.parse($0) }.map(Double.init) ?? responseTime
        return Double(expiry) - date
    }

    /// Whether it may be used without asking the server (RFC 9111 4.2), for a request with
    /// `request`'s directives.
    package func isFresh(at now: Double, for request: CacheControl) -> Bool {
        if request.noCache || CacheControl(responseHeaders).noCache { return false }
        let age = age(at: now)
        if let limit = request.maxAge, age > Double(limit) { return false }
        return freshnessLifetime > age
    }

    /// The conditional request's fields for a revalidation.
    package var validatingHeaders: [(String, String)] {
        let headers = responseHeaders
        var fields: [(String, String)] = []
        if let etag = headers.etag { fields.append(("If-None-Match", etag)) }
        if let date = headers.lastModified { fields.append(("If-Modified-Since", date)) }
        return fields
    }

    /// Whether a `304` with `fields` is about it (RFC 9111 4.3.4): a strong ETag in the 304 is
    /// its own (compared weakly, as `If-None-Match` is); a 304 without one names no other.
    package func isConfirmed(by fields: HTTPHeaders) -> Bool {
        guard let theirs = fields.etag else { return true }
        guard let mine = responseHeaders.etag else { return false }
        return Condition.opaque(theirs) == Condition.opaque(mine)
    }

    /// It, after a `304` with `fields` (RFC 9111 4.3.4): the 304's fields replace its own of
    /// the same name (not the body's length or coding, which are of the stored body, nor
    /// `Vary`, which its request values were kept for), and its times are the revalidation's.
    package func refreshed(by fields: HTTPHeaders, requestTime: Double, responseTime: Double) -> CachedResponse {
        var merged = responseHeaders
        for name in Set(fields.map { $0.name.lowercased() })
        where !Self.unkept.contains(name) && !["content-length", "content-encoding", "vary"].contains(name) {
            merged.remove(name)
            for field in fields where field.name.lowercased() == name { merged.add(field.name, field.value) }
        }
        var refreshed = self
        refreshed.headers = merged.map { [$0.name, $0.value] }
        refreshed.requestTime = requestTime
        refreshed.responseTime = responseTime
        return refreshed
    }

    /// Whether an answer may be stored (RFC 9111 3): a `200` to a GET, neither the request nor
    /// the answer saying `no-store`, no `Vary: *`, and something to go on later: a freshness
    /// lifetime or a validator.
    package static func isStorable(status: Int, headers: HTTPHeaders, request: HTTPHeaders) -> Bool {
        guard status == 200, !CacheControl(headers).noStore, !CacheControl(request).noStore else { return false }
        guard !varyNames(headers).contains("*") else { return false }
        let explicit = CacheControl(headers).maxAge != nil || headers.contains("Expires")
        return explicit || headers.etag != nil || headers.lastModified != nil
    }
}
