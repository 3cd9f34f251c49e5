#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One stored cookie (RFC 6265 5.3).
package struct StoredCookie: Sendable, Equatable {
    package var name: String
    package var value: String
    /// Lower-case, without a leading dot.
    package var domain: String
    /// Sent to `domain` only (no `Domain` attribute), not to its subdomains.
    package var hostOnly: Bool
    package var path: String
    package var secure: Bool
    package var httpOnly: Bool
    /// Seconds since 1970; nil for a session cookie.
    package var expires: Int64?
    /// Order of creation, for the order of sending.
    package var created: Int

    package init(
        name: String, value: String, domain: String, hostOnly: Bool, path: String, secure: Bool,
        httpOnly: Bool, expires: Int64?, created: Int = 0
    ) {
        (self.name, self.value, self.domain, self.hostOnly, self.path) = (name, value, domain, hostOnly, path)
        (self.secure, self.httpOnly, self.expires, self.created) = (secure, httpOnly, expires, created)
    }
}

/// Cookies a session keeps and sends back (RFC 6265 as browsers and curl apply it): set by
/// `Set-Cookie`, sent as `Cookie` to the hosts and paths they are for, forgotten when they
/// expire. Bounded against a server that sends thousands: at most ``maxPerDomain`` per domain
/// and ``maxCookies`` in all (the oldest go first), none over 4096 bytes. Thread-safe.
///
/// There is no public-suffix list on this machine, so a `Domain` attribute is taken only when
/// it is the request's host or a parent of it with at least one dot (`example.com` for
/// `a.example.com`, never `com`); a parent like `co.uk` can still be named, as curl without
/// libpsl allows.
package final class CookieJar: Sendable {
    package static let maxPerDomain = 50
    package static let maxCookies = 3000
    package static let maxCookieBytes = 4096

    private struct State {
        var cookies: [StoredCookie] = []
        var counter = 0
    }
    private let state = Locked(State())

    package init() {}

    /// Every cookie not expired at `now`, in creation order.
    package func all(now: Int64 = CookieJar.now()) -> [StoredCookie] {
        state.withLock { s in
            s.cookies.removeAll { $0.expires.map { $0 <= now } ?? false }
            return s.cookies
        }
    }

    package func removeAll() { state.withLock { $0.cookies = [] } }

    package static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    // MARK: Receiving

    /// Takes the `Set-Cookie` fields of an answer to a request for `url`.
    package func store(from headers: HTTPHeaders, for url: URL, now: Int64 = CookieJar.now()) {
        for (name, value) in headers where name.equalsIgnoringASCIICase("Set-Cookie") {
            if let cookie = Self.parse(setCookie: value, for: url, now: now) { add(cookie, now: now) }
        }
    }

    /// Adds `cookie`, replacing one of the same name, domain and path (which keeps its place);
    /// an expired one removes that one.
    package func add(_ cookie: StoredCookie, now: Int64 = CookieJar.now()) {
        state.withLock { s in
            var cookie = cookie
            let same = s.cookies.firstIndex {
                $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path
            }
            if let same {
                cookie.created = s.cookies[same].created
                s.cookies.remove(at: same)
            } else {
                s.counter += 1
                cookie.created = s.counter
            }
            if let expires = cookie.expires, expires <= now { return }
            s.cookies.append(cookie)
            s.cookies.sort { $0.created < $1.created }
            // The oldest of the domain, then the oldest of all, when over the bounds.
            while s.cookies.filter({ $0.domain == cookie.domain }).count > Self.maxPerDomain,
                let oldest = s.cookies.firstIndex(where: { $0.domain == cookie.domain })
            {
                s.cookies.remove(at: oldest)
            }
            if s.cookies.count > Self.maxCookies { s.cookies.removeFirst(s.cookies.count - Self.maxCookies) }
        }
    }

    /// A `Set-Cookie` value as RFC 6265 5.2 and 5.3 read it, for a request to `url`; nil for
    /// one to ignore (no `=`, an empty name, too long, a `Domain` this host may not set, a
    /// `Secure` one over plain http, a name or value with a control character).
    package static func parse(setCookie: String, for url: URL, now: Int64) -> StoredCookie? {
        guard let host = url.host?.lowercased(), !host.isEmpty else { return nil }
        let isSecureScheme = url.scheme?.lowercased() == "https"
        let bytes = Array(setCookie.utf8)
        guard bytes.count <= maxCookieBytes, !bytes.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F })
        else { return nil }
        var parts = bytes.split(separator: 0x3B, omittingEmptySubsequences: false).map { text($0) }
        let pair = parts.removeFirst()
        guard let eq = pair.utf8.firstIndex(of: 0x3D) else { return nil }
        let name = String(pair[..<eq]).trimmingASCIIWhitespace()
        // A quoted value is sent back as it came, quotes included (RFC 6265 4.1.1).
        let value = String(pair[pair.index(after: eq)...]).trimmingASCIIWhitespace()
        // No tab in either: it separates the fields of a cookie file.
        guard !name.isEmpty, !name.utf8.contains(where: { $0 == 0x20 || $0 == 0x09 }), !value.utf8.contains(0x09)
        else { return nil }
        var cookie = StoredCookie(
            name: name, value: value, domain: host, hostOnly: true, path: defaultPath(url), secure: false,
            httpOnly: false, expires: nil)
        var maxAge: Int64?
        var expires: Int64?
        for part in parts {
            let (key, attribute): (String, String)
            if let eq = part.utf8.firstIndex(of: 0x3D) {
                key = String(part[..<eq]).trimmingASCIIWhitespace()
                attribute = String(part[part.index(after: eq)...]).trimmingASCIIWhitespace()
            } else {
                (key, attribute) = (part.trimmingASCIIWhitespace(), "")
            }
            switch key.lowercased() {
            case "expires": expires = HTTPDate.parseCookieDate(attribute) ?? expires
            case "max-age":
                // Digits, with a leading '-' allowed (0 or less: expired); anything else is
                // ignored. Too many digits to count is "a very long time".
                let negative = attribute.hasPrefix("-")
                let digits = negative ? String(attribute.dropFirst()) : attribute
                guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { continue }
                let n = HTTPHeaders.decimal(digits) ?? Int64.max
                maxAge = negative || n == 0 ? Int64.min : min(n, 1 << 40)
            case "domain":
                var domain = attribute.lowercased()
                if domain.hasPrefix(".") { domain.removeFirst() }
                guard !domain.isEmpty else { continue }
                guard domain == host || (domainMatches(host: host, domain: domain) && domain.contains(".")) else {
                    return nil
                }
                cookie.domain = domain
                // An address has no subdomains: its cookie stays its own.
                cookie.hostOnly = isIPAddress(host)
            case "path":
                if attribute.hasPrefix("/") { cookie.path = attribute }
            case "secure": cookie.secure = true
            case "httponly": cookie.httpOnly = true
            default: break
            }
        }
        if let maxAge {
            cookie.expires = maxAge == Int64.min ? Int64.min : now + maxAge
        } else if let expires {
            cookie.expires = expires
        }
        if cookie.secure && !isSecureScheme { return nil }
        return cookie
    }

    /// The directory of `url`'s path (RFC 6265 5.1.4): `/a/b` for `/a/b/c`, `/` for `/c` or none.
    static func defaultPath(_ url: URL) -> String {
        let path = url.path(percentEncoded: true)
        guard path.hasPrefix("/"), let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    private static func text(_ bytes: ArraySlice<UInt8>) -> String {
        String(validating: bytes, as: UTF8.self) ?? String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
    }

    // MARK: Sending

    /// The `Cookie` value for a request to `url` (RFC 6265 5.4: longer paths first, then older
    /// cookies), or nil when none is for it.
    package func cookieHeader(for url: URL, now: Int64 = CookieJar.now()) -> String? {
        let matching = cookies(for: url, now: now)
        return matching.isEmpty ? nil : matching.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    /// The cookies for a request to `url`, in the order they are sent.
    package func cookies(for url: URL, now: Int64 = CookieJar.now()) -> [StoredCookie] {
        guard let host = url.host?.lowercased() else { return [] }
        let secure = url.scheme?.lowercased() == "https"
        let path = url.path(percentEncoded: true).isEmpty ? "/" : url.path(percentEncoded: true)
        return all(now: now).filter { c in
            (c.hostOnly ? host == c.domain : Self.domainMatches(host: host, domain: c.domain))
                && Self.pathMatches(path, c.path) && (!c.secure || secure)
        }.sorted { ($0.path.utf8.count, -$0.created) > ($1.path.utf8.count, -$1.created) }
    }

    /// RFC 6265 5.1.3: the same, or `host` ends with `.domain` and is not an IP address.
    static func domainMatches(host: String, domain: String) -> Bool {
        host == domain || (host.hasSuffix("." + domain) && !isIPAddress(host))
    }

    /// RFC 6265 5.1.4.
    static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        if requestPath == cookiePath { return true }
        guard requestPath.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || requestPath.utf8.dropFirst(cookiePath.utf8.count).first == 0x2F
    }

    static func isIPAddress(_ host: String) -> Bool {
        host.contains(":")
            || (host.split(separator: ".").count == 4
                && host.utf8.allSatisfy { $0 == 0x2E || ($0 >= 0x30 && $0 <= 0x39) })
    }
}
