import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A cookie, as `HTTPCookie` describes one.
public struct HaulCookie: Sendable, Equatable {
    /// Its name (`sid` of `sid=abc`).
    public var name: String
    /// Its value, as the server sent it (quotes included).
    public var value: String
    /// The host it is for, lower-case, without a leading dot.
    public var domain: String
    /// Sent to ``domain`` only; false: to its subdomains too (the server named a `Domain`).
    public var isHostOnly: Bool
    /// The paths it is sent to: this one and those under it.
    public var path: String
    /// Sent over https only.
    public var isSecure: Bool
    /// Not for scripts in a browser; kept and written as `#HttpOnly_` in a cookie file.
    public var isHTTPOnly: Bool
    /// When it expires; nil for a session cookie.
    public var expiresDate: Date?

    /// Creates a cookie (a session cookie for `domain` alone, by default).
    public init(
        name: String, value: String, domain: String, path: String = "/", isHostOnly: Bool = true,
        isSecure: Bool = false, isHTTPOnly: Bool = false, expiresDate: Date? = nil
    ) {
        (self.name, self.value, self.domain, self.path, self.isHostOnly) = (name, value, domain, path, isHostOnly)
        (self.isSecure, self.isHTTPOnly, self.expiresDate) = (isSecure, isHTTPOnly, expiresDate)
    }

    init(_ c: StoredCookie) {
        self.init(
            name: c.name, value: c.value, domain: c.domain, path: c.path, isHostOnly: c.hostOnly, isSecure: c.secure,
            isHTTPOnly: c.httpOnly, expiresDate: c.expires.map { Date(timeIntervalSince1970: Double($0)) })
    }
}

/// The cookies of a session (`HTTPCookieStorage`'s role): what servers set with `Set-Cookie` is
/// sent back as `Cookie` to the hosts and paths it is for (RFC 6265), until it expires. In
/// memory; ``write(toNetscapeFile:)`` and ``read(netscapeFile:)`` keep it in the Netscape
/// cookie file that curl and wget use. Bounded: 50 cookies per domain and 150 set by one host,
/// 3000 in all, 4 KiB each; one request sends at most 150 of them and 8190 bytes.
/// Thread-safe; one jar may serve several sessions.
public final class HaulCookieJar: Sendable {
    let jar = CookieJar()

    /// An empty jar.
    public init() {}

    /// Every cookie not expired, oldest first.
    public var cookies: [HaulCookie] { jar.all().map(HaulCookie.init) }

    /// The cookies a request for `url` would send, in the order sent.
    public func cookies(for url: URL) -> [HaulCookie] { jar.cookies(for: url).map(HaulCookie.init) }

    /// Adds `cookie`, replacing one of the same name, domain and path (an expired one removes
    /// it). A leading dot of the domain is dropped (`.example.com` is `example.com`). Returns
    /// false, keeping nothing, for a cookie that cannot be sent: a name that is empty or holds
    /// `=`, `;` or a space, a value with `;`, a control character anywhere, a path not
    /// starting with `/`.
    @discardableResult
    public func setCookie(_ cookie: HaulCookie) -> Bool {
        var domain = cookie.domain.lowercased()
        if domain.hasPrefix(".") { domain.removeFirst() }
        let stored = StoredCookie(
            name: cookie.name, value: cookie.value, domain: domain, hostOnly: cookie.isHostOnly, path: cookie.path,
            secure: cookie.isSecure, httpOnly: cookie.isHTTPOnly,
            expires: cookie.expiresDate.map { Int64($0.timeIntervalSince1970.rounded(.down)) })
        guard stored.problem == nil, !(stored.value + stored.path).utf8.contains(0x09) else { return false }
        jar.add(stored)
        return true
    }

    /// Forgets every cookie.
    public func removeAll() { jar.removeAll() }

    /// Adds the cookies of a Netscape cookie file (curl's `-b FILE`, wget's `--load-cookies`);
    /// lines that are no cookie, and expired cookies, are skipped. Returns how many were added.
    /// - Throws: ``HaulError/Code/fileSystem`` when it cannot be read (it must be a regular
    ///   file of at most 16 MiB).
    @discardableResult
    public func read(netscapeFile path: String) throws(HaulError) -> Int {
        let bytes: [UInt8]?
        do throws(Errno) { bytes = try Sys.readSmallFile(path, limit: 16 << 20) } catch {
            throw HaulError.fileSystem(error, "read the cookie file", path: path)
        }
        guard let bytes else {
            throw HaulError(.fileSystem, "cannot read the cookie file \(path): no such regular file", path: path)
        }
        return jar.load(netscape: bytes)
    }

    /// Writes every cookie not expired to a Netscape cookie file (curl's `-c FILE`), readable
    /// by its owner only (0600), in place of what is there: written beside it (`PATH.tmp`),
    /// synced and renamed, so a crash leaves the old file or the new one.
    public func write(toNetscapeFile path: String) throws(HaulError) {
        do throws(Errno) { try Sys.writeFileAtomically(path, Array(jar.netscapeFile().utf8), secret: true) } catch {
            throw HaulError.fileSystem(error, "write the cookie file", path: path)
        }
    }
}
