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
    /// The host whose answer set it; empty for one loaded from a file or given by the program.
    package var source: String

    package init(
        name: String, value: String, domain: String, hostOnly: Bool, path: String, secure: Bool,
        httpOnly: Bool, expires: Int64?, created: Int = 0, source: String = ""
    ) {
        (self.name, self.value, self.domain, self.hostOnly, self.path) = (name, value, domain, hostOnly, path)
        (self.secure, self.httpOnly, self.expires, self.created, self.source) = (
            secure, httpOnly, expires, created, source
        )
    }

    /// Why this cookie cannot be kept or sent (a byte that would end the header or split the
    /// cookie file's fields, a `;` that would make two cookies of one, a name with `=` or a space),
    /// or nil.
    package var problem: String? {
        func controls(_ text: String) -> Bool { text.utf8.contains { $0 < 0x20 || $0 == 0x7F } }
        if name.isEmpty || name.utf8.contains(where: { $0 == 0x3D || $0 == 0x20 || $0 == 0x3B }) || controls(name) {
            return "a cookie's name must be non-empty, with no '=', ';', space or control character"
        }
        if controls(value) || value.utf8.contains(0x3B) {
            return "a cookie's value cannot hold ';' or a control character"
        }
        if domain.isEmpty || controls(domain) || domain.utf8.contains(where: { $0 == 0x20 || $0 == 0x3B }) {
            return "a cookie's domain must be a host name"
        }
        if !path.hasPrefix("/") || controls(path) || path.utf8.contains(0x3B) {
            return "a cookie's path must start with '/', with no ';' or control character"
        }
        return nil
    }
}

/// Cookies a session keeps and sends back (RFC 6265 as browsers and curl apply it): set by
/// `Set-Cookie`, sent as `Cookie` to the hosts and paths they are for, forgotten when they
/// expire. Bounded against hostile servers: at most ``maxPerDomain`` per domain and
/// ``maxPerSource`` set by one host (the oldest go first), ``maxCookies`` in all (then the oldest
/// of the host that set the most go), none over 4096 bytes; at most ``maxSentCookies`` and
/// ``maxSentBytes`` sent in one request (curl's limits). Thread-safe.
///
/// There is no public-suffix list on this machine, so a `Domain` attribute is taken only when
/// it is the request's host or a parent of it with at least one dot (`example.com` for
/// `a.example.com`, never `com`); a parent like `co.uk` can still be named, as curl without
/// libpsl allows.
package final class CookieJar: Sendable {
    package let maxPerDomain: Int
    package let maxPerSource: Int
    package let maxCookies: Int
    package static let maxCookieBytes = 4096
    package static let maxSentCookies = 150
    package static let maxSentBytes = 8190

    private struct State {
        var cookies: [StoredCookie] = []
        var counter = 0
    }
    private let state = Locked(State())

    /// A jar with the default bounds (50 per domain, 150 per host that sets them, 3000 in all).
    package init(maxPerDomain: Int = 50, maxPerSource: Int = 150, maxCookies: Int = 3000) {
        (self.maxPerDomain, self.maxPerSource, self.maxCookies) = (maxPerDomain, maxPerSource, maxCookies)
    }

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

    /// Takes the `Set-Cookie` fields of an answer to a request for `url`. An answer over plain
    /// http does not replace (or delete) a `Secure` cookie of that name for an overlapping domain
    /// and path (RFC 6265bis 5.7, as curl does).
    package func store(from headers: HTTPHeaders, for url: URL, now: Int64 = CookieJar.now()) {
        let lines = headers.values("Set-Cookie")
        if lines.isEmpty { return }
        let secureOrigin = url.scheme?.lowercased() == "https"
        for value in lines {
            guard let cookie = Self.parse(setCookie: value, for: url, now: now) else { continue }
            add(cookie, now: now, fromSecureOrigin: secureOrigin)
        }
    }

    private static func shadowsSecureCookie(_ new: StoredCookie, in cookies: [StoredCookie]) -> Bool {
        cookies.contains { old in
            old.secure && old.name == new.name
                && (domainMatches(host: old.domain, domain: new.domain)
                    || domainMatches(host: new.domain, domain: old.domain))
                && pathMatches(new.path, old.path)
        }
    }

    /// Adds `cookie`, replacing one of the same name, domain and path (which keeps its place);
    /// an expired one removes that one. From an origin that is not secure, a cookie that would
    /// shadow a `Secure` one is ignored.
    package func add(_ cookie: StoredCookie, now: Int64 = CookieJar.now(), fromSecureOrigin: Bool = true) {
        state.withLock { s in
            if !fromSecureOrigin && Self.shadowsSecureCookie(cookie, in: s.cookies) { return }
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
            // Over a bound: the oldest of the domain, of the host that set it, and then of the
            // host that set the most, so that one server cannot push out the cookies of others
            // (or those loaded from a file).
            func dropOldest(where match: (StoredCookie) -> Bool) {
                if let oldest = s.cookies.firstIndex(where: match) { s.cookies.remove(at: oldest) }
            }
            // Of a domain, the cookies that are not Secure go first: plain http cannot push a
            // Secure one out by setting many.
            while s.cookies.count(where: { $0.domain == cookie.domain }) > maxPerDomain {
                if s.cookies.contains(where: { $0.domain == cookie.domain && !$0.secure }) {
                    dropOldest { $0.domain == cookie.domain && !$0.secure }
                } else {
                    dropOldest { $0.domain == cookie.domain }
                }
            }
            while !cookie.source.isEmpty, s.cookies.count(where: { $0.source == cookie.source }) > maxPerSource {
                dropOldest { $0.source == cookie.source }
            }
            while s.cookies.count > maxCookies {
                var counts: [String: Int] = [:]
                for c in s.cookies { counts[c.source, default: 0] += 1 }
                let most = counts.values.max() ?? 0
                // Of hosts with as many, the one with the oldest cookie.
                let source = s.cookies.first { counts[$0.source] == most }?.source ?? ""
                dropOldest { $0.source == source }
            }
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
            case "max-age": maxAge = Self.maxAge(attribute) ?? maxAge
            case "domain":
                var domain = attribute.lowercased()
                if domain.hasPrefix(".") { domain.removeFirst() }
                guard !domain.isEmpty else { continue }
                guard Self.mayBeSet(domain: domain, by: host) else { return nil }
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
        cookie.source = host
        // A tab anywhere (a path's too) would shift the cookie file's fields.
        guard cookie.problem == nil,
            ![cookie.value, cookie.path, cookie.domain].contains(where: { $0.utf8.contains(0x09) })
        else { return nil }
        return cookie
    }

    /// A `Max-Age` in seconds: digits, with a leading '-' allowed (0 or less: expired, as
    /// `Int64.min`); nil for anything else (ignored). Too many digits to count is "a very long
    /// time".
    static func maxAge(_ attribute: String) -> Int64? {
        let negative = attribute.hasPrefix("-")
        let digits = negative ? String(attribute.dropFirst()) : attribute
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let n = HTTPHeaders.decimal(digits) ?? Int64.max
        return negative || n == 0 ? Int64.min : min(n, 1 << 40)
    }

    /// Whether `host` may set a cookie for `domain`: its own, or a parent with a dot inside it
    /// (not only a trailing one: `com.` is a whole TLD).
    static func mayBeSet(domain: String, by host: String) -> Bool {
        domain == host || (domainMatches(host: host, domain: domain) && domain.dropLast().contains("."))
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
        var header = ""
        var count = 0
        for cookie in cookies(for: url, now: now) {
            let pair = cookie.name + "=" + cookie.value
            let length = header.utf8.count + (header.isEmpty ? 0 : 2) + pair.utf8.count
            // curl's bounds on what one request sends: past them, the rest stay behind.
            guard count < Self.maxSentCookies, length <= Self.maxSentBytes else { break }
            header += (header.isEmpty ? "" : "; ") + pair
            count += 1
        }
        return header.isEmpty ? nil : header
    }

    /// The cookies for a request to `url`, in the order they are sent.
    package func cookies(for url: URL, now: Int64 = CookieJar.now()) -> [StoredCookie] {
        // An empty jar (most runs) asks nothing of the URL: its parts cost more than the look.
        let all = all(now: now)
        guard !all.isEmpty, let host = url.host?.lowercased() else { return [] }
        let secure = url.scheme?.lowercased() == "https"
        let path = url.path(percentEncoded: true).isEmpty ? "/" : url.path(percentEncoded: true)
        return all.filter { c in
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
