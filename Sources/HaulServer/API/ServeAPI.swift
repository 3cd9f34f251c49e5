import Dispatch
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The daemon's JSON API under `/api/v1` (docs/api.md), with the doors on every route: the Host
/// allow-list, then a browser's cross-site marks, then the token (bearer, or the page's
/// cookie), then for a change: POST, JSON, and an Origin of this daemon's own. Runs on the HTTP
/// server's loop thread, which owns the store.
package final class ServeAPI: @unchecked Sendable {
    let store: ServeStore
    private let token: ServeToken
    private let hosts: HostPolicy
    let root: DownloadRoot
    let now: @Sendable () -> Double
    private var throttle = FailureThrottle()

    /// The cookie the page keeps the token in (named with the port: browsers do not keep
    /// cookies apart by port).
    package var cookieName: String { "haul_\(hosts.port)" }

    package init(
        store: ServeStore, token: ServeToken, hosts: HostPolicy, root: DownloadRoot,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.store = store
        self.token = token
        self.hosts = hosts
        self.root = root
        self.now = now
    }

    /// Headers on every answer: no sniffing, no referrer beyond the daemon, nothing cached, and
    /// never a CORS header.
    static let common: [(name: String, value: String)] = [
        ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin"), ("Cache-Control", "no-store"),
    ]

    package func handle(_ request: HTTPRequest, _ exchange: HTTPExchange) {
        do throws(ServeError) {
            let bearer = try admit(request)
            let reply = try route(request, bearer: bearer)
            exchange.reply(reply)
        } catch {
            let reply = Self.error(error)
            if error.code == .unauthorized, case let wait = throttle.failed(now: now()), wait > 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + wait) { exchange.reply(reply) }
            } else {
                exchange.reply(reply)
            }
        }
    }

    /// The doors before any route; whether the token came as a bearer token (not a cookie).
    private func admit(_ request: HTTPRequest) throws(ServeError) -> Bool {
        try hosts.checkHost(request.header("Host"))
        if let site = request.header("Sec-Fetch-Site")?.lowercased(), site == "cross-site" {
            throw ServeError(.forbidden, "a request from another site is refused")
        }
        if let auth = request.header("Authorization") {
            let bytes = Array(auth.utf8)
            let prefix = Array("Bearer ".utf8)
            guard bytes.count > prefix.count, Array(bytes[..<prefix.count]) == prefix,
                token.matches(bytes[prefix.count...])
            else { throw ServeError(.unauthorized, "a wrong token") }
            return true
        }
        guard let cookie = Self.cookie(cookieName, in: request.header("Cookie")), token.matches(cookie.utf8) else {
            throw ServeError(.unauthorized, "no token: send Authorization: Bearer TOKEN")
        }
        return false
    }

    /// The value of cookie `name` in a Cookie header.
    static func cookie(_ name: String, in header: String?) -> String? {
        guard let header else { return nil }
        for pair in header.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingASCIIWhitespace() == name {
                return parts[1].trimmingASCIIWhitespace()
            }
        }
        return nil
    }

    private func route(_ request: HTTPRequest, bearer: Bool) throws(ServeError) -> HTTPReply {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, parts[0] == "", parts[1] == "api", parts[2] == "v1" else {
            throw ServeError(.notFound, "no such route: \(ServeError.shown(request.path))")
        }
        let rest = Array(parts.dropFirst(3))
        let change = request.method == "POST"
        if change {
            try hosts.checkOrigin(request.header("Origin"), bearer: bearer)
            let type = request.header("Content-Type")?.prefix { $0 != ";" }.trimmingASCIIWhitespace().lowercased()
            guard type == "application/json" else {
                throw ServeError(.unsupportedMediaType, "a change takes a JSON body")
            }
        }
        switch (request.method, rest.first, rest.count) {
        case ("GET", "version", 1), ("HEAD", "version", 1):
            return try Self.json(200, ["version": HaulVersion.string, "api": "1"])
        case ("GET", "downloads", 1), ("HEAD", "downloads", 1):
            return try list(Self.query(request.query))
        case ("POST", "downloads", 1):
            return try add(request.body)
        case ("GET", "downloads", 2), ("HEAD", "downloads", 2):
            guard let item = try store.download(try Self.id(rest[1])) else { throw Self.noSuchDownload(rest[1]) }
            return try Self.json(200, DownloadJSON(item))
        case ("POST", "downloads", 3):
            return try act(rest[2], on: try Self.id(rest[1]))
        case ("GET", "events", 1):
            return try events(Self.query(request.query))
        case (_, "version", _), (_, "downloads", _), (_, "events", _):
            throw ServeError(
                change ? .notFound : .methodNotAllowed,
                "\(request.method) \(ServeError.shown(request.path)) is not a route")
        default:
            throw ServeError(.notFound, "no such route: \(ServeError.shown(request.path))")
        }
    }
}
