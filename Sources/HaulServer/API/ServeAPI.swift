import Dispatch
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The daemon's JSON API under `/api/v1` (docs/api.md), with the doors on every route: the Host
/// allow-list, then a browser's cross-site marks, then the token as a bearer token, then for a
/// change: POST with an Origin of this daemon's own (when there is one) and JSON. No cookie
/// carries the token: browsers do not keep cookies apart by port, so any server on another
/// localhost port (another user's) would be sent it (docs/serve.md). Runs on the HTTP
/// server's loop thread, which owns the store.
package final class ServeAPI: @unchecked Sendable {
    let store: ServeStore
    private let token: ServeToken
    let hosts: HostPolicy
    let root: DownloadRoot
    /// What runs the downloads (nil: the API keeps the queue and nothing transfers).
    let runner: (any ServeRunner)?
    /// Wall-clock seconds since 1970, for the times stored.
    let now: @Sendable () -> Double
    var throttle = FailureThrottle()
    private let started = ContinuousClock.now
    /// Wrong-token answers being held back now; past ``maxHeld`` the answer is a 429 at once.
    private let held = Locked(0)
    var maxHeld = 32
    /// The open event streams (the loop's thread only).
    var streams = EventStreams()
    /// The most downloads a snapshot carries (``EventStreams/snapshotLimit``; set before the
    /// server starts).
    var snapshotLimit = EventStreams.snapshotLimit

    package init(
        store: ServeStore, token: ServeToken, hosts: HostPolicy, root: DownloadRoot, runner: (any ServeRunner)? = nil,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.store = store
        self.token = token
        self.hosts = hosts
        self.root = root
        self.runner = runner
        self.now = now
        throttle.cap = 20  // under the server's 30 s for a reply
    }

    /// Headers on every answer: no sniffing, no referrer beyond the daemon, nothing cached, and
    /// never a CORS header.
    static let common: [(name: String, value: String)] = [
        ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin"), ("Cache-Control", "no-store"),
    ]

    package func handle(_ request: HTTPRequest, _ exchange: HTTPExchange) {
        do throws(ServeError) {
            if let asset = PageAssets.named(request.path) { return exchange.reply(try page(asset, request)) }
            if request.path == "/api/v1/proof" { return exchange.reply(try proof(request)) }
            try admit(request)
            if Self.wantsStream(request) { return try openStream(request, exchange) }
            exchange.reply(try route(request))
        } catch {
            guard error.code == .unauthorized else { return exchange.reply(Self.error(error)) }
            let wait = throttle.failed(now: Seconds.of(ContinuousClock.now - started))
            guard wait > 0 else { return exchange.reply(Self.error(error)) }
            let room = held.withLock { n -> Bool in
                guard n < maxHeld else { return false }
                n += 1
                return true
            }
            guard room else {
                var busy = Self.error(ServeError(.tooManyRequests, "too many wrong tokens: try again later"))
                busy.headers += [("Retry-After", String(Int(wait.rounded(.up)))), ("Connection", "close")]
                return exchange.reply(busy)
            }
            let reply = Self.error(error)
            DispatchQueue.global().asyncAfter(deadline: .now() + wait) { [held] in
                held.withLock { $0 -= 1 }
                exchange.reply(reply)
            }
        }
    }

    /// Headers a request may carry once only: a second one is what a smuggler sends.
    static let single = ["host", "origin", "authorization", "sec-fetch-site", "content-type"]

    /// The page's files: the Host door, GET or HEAD, no token (the page has none until its
    /// script reads the fragment, and holds no data). A link from another site may open it.
    private func page(_ asset: (type: String, text: String), _ request: HTTPRequest) throws(ServeError) -> HTTPReply {
        try checkHost(request)
        guard request.method == "GET" || request.method == "HEAD" else {
            return Self.methodNotAllowed(request, allowed: ["GET", "HEAD"])
        }
        return HTTPReply(
            status: 200, headers: [("Content-Type", asset.type)] + Self.common + PageAssets.headers,
            body: Array(asset.text.utf8))
    }

    /// `GET /api/v1/proof?nonce=HEX`: the token's proof for the caller's nonce (16 to 64
    /// bytes, hex), asked for without the token, before sending it (docs/serve.md).
    private func proof(_ request: HTTPRequest) throws(ServeError) -> HTTPReply {
        try checkHost(request)
        guard request.method == "GET" else { return Self.methodNotAllowed(request, allowed: ["GET"]) }
        let nonce = Self.query(request.query)["nonce"] ?? ""
        guard (32...128).contains(nonce.utf8.count),
            nonce.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0 | 0x20) })
        else {
            throw ServeError(.badRequest, "nonce must be 32 to 128 hex digits")
        }
        return try Self.json(200, ["proof": token.proof(nonce: nonce.lowercased())])
    }

    /// 405 with the methods the route takes (RFC 9110 15.5.6: `Allow` is required).
    private static func methodNotAllowed(_ request: HTTPRequest, allowed: [String]) -> HTTPReply {
        var refusal = error(ServeError(.methodNotAllowed, "\(ServeError.shown(request.method)) is not for this route"))
        refusal.headers.append(("Allow", allowed.joined(separator: ", ")))
        return refusal
    }

    private func checkHost(_ request: HTTPRequest) throws(ServeError) {
        for name in Self.single where request.headers.filter({ $0.name.lowercased() == name }).count > 1 {
            throw ServeError(.badRequest, "two \(name) headers")
        }
        try hosts.checkHost(request.header("Host"))
    }

    /// The doors before any route.
    private func admit(_ request: HTTPRequest) throws(ServeError) {
        try checkHost(request)
        if let site = request.header("Sec-Fetch-Site")?.lowercased(), site == "cross-site" || site == "same-site" {
            throw ServeError(.forbidden, "a request from another site is refused")
        }
        guard let auth = request.header("Authorization") else {
            throw ServeError(.unauthorized, "no token: send Authorization: Bearer TOKEN")
        }
        let bytes = Array(auth.utf8)
        let scheme = Array("bearer ".utf8)
        guard bytes.count > scheme.count,
            zip(bytes, scheme).allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 }),
            token.matches(bytes[scheme.count...])
        else { throw ServeError(.unauthorized, "a wrong token") }
    }

    /// The routes: path after `/api/v1/` and the methods each takes.
    private enum Route {
        case version, downloads, network, settings
        case download(String)
        case action(String, String)
        case events

        var methods: [String] {
            switch self {
            case .version, .download, .events, .network: ["GET", "HEAD"]
            case .downloads, .settings: ["GET", "HEAD", "POST"]
            case .action: ["POST"]
            }
        }

        init?(_ path: String) {
            let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard parts.count >= 4, parts[0] == "", parts[1] == "api", parts[2] == "v1" else { return nil }
            switch (parts[3], parts.count) {
            case ("version", 4): self = .version
            case ("downloads", 4): self = .downloads
            case ("downloads", 5): self = .download(parts[4])
            case ("downloads", 6): self = .action(parts[4], parts[5])
            case ("events", 4): self = .events
            case ("network", 4): self = .network
            case ("settings", 4): self = .settings
            default: return nil
            }
        }
    }

    private func route(_ request: HTTPRequest) throws(ServeError) -> HTTPReply {
        guard let route = Route(request.path) else {
            throw ServeError(.notFound, "no such route: \(ServeError.shown(request.path))")
        }
        guard route.methods.contains(request.method) else {
            return Self.methodNotAllowed(request, allowed: route.methods)
        }
        if request.method == "POST" {
            try hosts.checkOrigin(request.header("Origin"), bearer: true)
            let type = request.header("Content-Type")?.prefix { $0 != ";" }.trimmingASCIIWhitespace().lowercased()
            guard type == "application/json" else {
                throw ServeError(.unsupportedMediaType, "a change takes a JSON body")
            }
        }
        switch route {
        case .version: return try Self.json(200, ["version": HaulVersion.string, "api": "1", "root": root.path])
        case .downloads where request.method == "POST": return try add(request.body)
        case .downloads: return try list(Self.query(request.query))
        case .download(let id):
            guard let item = try store.download(try Self.id(id)) else { throw Self.noSuchDownload(id) }
            return try Self.json(200, shown(item))
        case .action(let id, let action): return try act(action, on: try Self.id(id), body: request.body)
        case .events: return try events(Self.query(request.query))
        case .settings where request.method == "POST": return try changeSettings(request.body)
        case .settings: return try Self.json(200, try settings())
        case .network:
            guard let state = runner?.network else { return try Self.json(200, ["status": "unknown"]) }
            return try Self.json(200, state)
        }
    }
}
