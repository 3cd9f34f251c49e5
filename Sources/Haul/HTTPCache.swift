import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// An HTTP cache on disk for ``HaulSession/data(for:maxBytes:)`` (RFC 9111, as a private
/// cache): a `200` to a GET is kept when it may be (no `no-store`, no `Vary: *`, a lifetime or a
/// validator), is answered from while fresh (`max-age`, else `Expires`; no heuristic
/// freshness), and is revalidated with `If-None-Match`/`If-Modified-Since` once stale or when
/// it says `no-cache`. Never kept: answers to requests with credentials, cookies a server set,
/// bodies over an eighth of the capacity. Like `URLCache`.
///
/// ```swift
/// var configuration = HaulConfiguration()
/// configuration.cache = HTTPCache(directory: cacheDirectory, capacity: 16 << 20)
/// ```
public final class HTTPCache: Sendable {
    /// Where its files are (a directory of this user's alone, made 0700).
    public let directory: URL
    /// The most bytes its files take; past it, the least recently used go.
    public let capacity: Int
    let store: HTTPCacheStore
    /// Seconds since 1970 now (tests move it).
    let now: @Sendable () -> Double

    /// A cache in `directory`, of at most `capacity` bytes (default 64 MiB).
    public convenience init(directory: URL, capacity: Int = 64 << 20) {
        self.init(directory: directory, capacity: capacity) { Date().timeIntervalSince1970 }
    }

    package init(directory: URL, capacity: Int, now: @escaping @Sendable () -> Double) {
        self.directory = directory
        self.capacity = capacity
        self.now = now
        store = HTTPCacheStore(directory: directory.path, capacity: capacity)
    }

    /// `$XDG_CACHE_HOME/haul/http` (default `~/.cache/haul/http`); nil without a home directory.
    public static let shared: HTTPCache? = XDGDirectory.cache.path().map {
        // A directory's URL without asking the file system (`fileURLWithPath:` would stat it).
        HTTPCache(directory: URL(filePath: $0 + "/haul/http", directoryHint: .isDirectory))
    }

    /// Removes every stored answer.
    public func removeAll() { store.removeAll() }
}

extension HaulRequest {
    /// How a request uses the cache, in `URLRequest.CachePolicy`'s names.
    public enum CachePolicy: Sendable, Equatable {
        /// RFC 9111: a fresh answer is used, a stale one revalidated, anything else loaded.
        case useProtocolCachePolicy
        /// Always loaded, without conditions; the answer is kept as ever.
        case reloadIgnoringLocalCacheData
        /// A stored answer is used however old; else loaded.
        case returnCacheDataElseLoad
        /// A stored answer is used however old; else ``HaulError/Code/notCached``, no request.
        case returnCacheDataDontLoad
    }
}

extension HaulSession {
    /// ``fetch(_:maxBytes:extraHeaders:)`` through the configuration's cache.
    func cachedFetch(_ request: HaulRequest, maxBytes: Int) async throws(HaulError) -> (Data, HTTPResponse) {
        let policy = request.cachePolicy ?? configuration.requestCachePolicy
        let sent = try headers(adding: request.headers, for: request.url)
        let cookies = cookieJar.map { !$0.cookies(for: request.url).isEmpty } ?? false
        guard let cache = configuration.cache, !cookies, Self.isCacheable(request, sent, netrc: netrc) else {
            if policy == .returnCacheDataDontLoad { throw Self.notCached(request) }
            return try await fetch(request, maxBytes: maxBytes)
        }
        let asked = CacheControl(sent)
        let stored =
            policy == .reloadIgnoringLocalCacheData
            ? nil
            : cache.store.entry(for: request.url, decoded: request.decodesContent).flatMap {
                $0.matches(sent) ? $0 : nil
            }
        let requestTime = cache.now()
        switch policy {
        case .returnCacheDataDontLoad:
            guard let stored else { throw Self.notCached(request) }
            return try Self.served(stored, maxBytes: maxBytes)
        case .returnCacheDataElseLoad:
            if let stored { return try Self.served(stored, maxBytes: maxBytes) }
        case .useProtocolCachePolicy:
            if let stored, stored.isFresh(at: requestTime, for: asked) {
                return try Self.served(stored, maxBytes: maxBytes)
            }
        case .reloadIgnoringLocalCacheData: break
        }
        var (data, response) = try await fetch(
            request, maxBytes: maxBytes, extraHeaders: stored?.validatingHeaders ?? [])
        if response.statusCode == 304, let stored {
            let refreshed = Self.refreshed(
                stored, by: response, for: request, sent: sent, in: cache, requestTime: requestTime)
            if let refreshed { return try Self.served(refreshed, maxBytes: maxBytes) }
            // A 304 of another version or place: the entry goes and the file is asked for whole.
            cache.store.remove(request.url, decoded: request.decodesContent)
            (data, response) = try await fetch(request, maxBytes: maxBytes)
        }
        Self.keep(data, response, for: request, sent: sent, in: cache, requestTime: requestTime)
        return (data, response)
    }

    /// An answer reached through a redirect is not kept under the URL asked for (the redirect
    /// may be temporary), nor does its 304 vouch for the entry.
    private static func isDirect(_ response: HTTPResponse, for request: HaulRequest) -> Bool {
        ResumeRecord.redacted(response.url) == ResumeRecord.redacted(request.url)
    }

    /// The entry a 304 refreshes (kept again when still storable, else removed); nil when the
    /// 304 does not vouch for it (another URL, another strong ETag).
    private static func refreshed(
        _ stored: CachedResponse, by response: HTTPResponse, for request: HaulRequest, sent: HTTPHeaders,
        in cache: HTTPCache, requestTime: Double
    ) -> CachedResponse? {
        let headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        guard isDirect(response, for: request), stored.isConfirmed(by: headers) else { return nil }
        let refreshed = stored.refreshed(by: headers, requestTime: requestTime, responseTime: cache.now())
        if CachedResponse.isStorable(status: refreshed.status, headers: refreshed.responseHeaders, request: sent),
            refreshed.matches(sent)
        {
            cache.store.store(refreshed)
        } else {
            cache.store.remove(request.url, decoded: request.decodesContent)
        }
        return refreshed
    }

    /// Keeps a loaded answer when it is storable; a 200 that is not removes the entry it outdates.
    private static func keep(
        _ data: Data, _ response: HTTPResponse, for request: HaulRequest, sent: HTTPHeaders, in cache: HTTPCache,
        requestTime: Double
    ) {
        let headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        if isDirect(response, for: request),
            CachedResponse.isStorable(status: response.statusCode, headers: headers, request: sent)
        {
            cache.store.store(
                CachedResponse(
                    url: request.url, decoded: request.decodesContent, finalURL: response.url,
                    status: response.statusCode, headers: headers, request: sent, requestTime: requestTime,
                    responseTime: cache.now(), body: data))
        } else if response.statusCode == 200 {
            cache.store.remove(request.url, decoded: request.decodesContent)
        }
    }

    /// Whether the cache may answer or keep `request`: not with credentials (in the URL, an
    /// `Authorization` field, or a netrc entry for its host), not with conditions or a range of
    /// the caller's own (their answer is the caller's to judge), not with `no-store`.
    private static func isCacheable(_ request: HaulRequest, _ sent: HTTPHeaders, netrc: Netrc?) -> Bool {
        let own = [
            "Authorization", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range",
            "Range",
        ]
        guard request.url.user == nil, request.url.password == nil, !own.contains(where: sent.contains) else {
            return false
        }
        if let host = request.url.host, netrc?.credential(forHost: host) != nil { return false }
        return !CacheControl(sent).noStore
    }

    private static func served(_ entry: CachedResponse, maxBytes: Int) throws(HaulError) -> (Data, HTTPResponse) {
        guard entry.body.count <= maxBytes else {
            throw HaulError(
                .responseTooLarge, "body of \(entry.url) is \(entry.body.count) bytes, more than \(maxBytes)")
        }
        let url = URL(string: entry.finalURL) ?? URL(string: entry.url)!
        return (entry.body, HTTPResponse(status: entry.status, headers: entry.responseHeaders, url: url))
    }

    private static func notCached(_ request: HaulRequest) -> HaulError {
        HaulError(.notCached, "\(ResumeRecord.redacted(request.url)) is not in the cache (returnCacheDataDontLoad)")
    }
}
