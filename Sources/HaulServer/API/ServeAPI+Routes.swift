import Haul
import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A download as the API shows it (and as `haul ls` reads it).
package struct DownloadJSON: Codable, Equatable, Sendable {
    package var id: Int64
    package var url: String
    package var name: String?
    package var subfolder: String?
    package var state: String
    package var priority: Int64
    package var position: Int64
    package var added: Double
    package var finished: Double?
    package var error: String?
    /// The file's path relative to the root, once known.
    package var file: String?
    /// Bytes done, the size when known, bytes per second and seconds left while it runs.
    package var done: Int64
    package var total: Int64?
    package var speed: Double?
    package var eta: Double?
    /// Connections asked for (1 unless more were).
    package var connections: Int
    /// The background session that added it, and whether that session was told of its end.
    package var session: String?
    package var told: Bool?

    init(_ d: StoredDownload, root: String? = nil, progress: RunProgress? = nil) {
        (id, url, name, subfolder, state) = (d.id, d.url, d.name, d.subfolder, d.state.rawValue)
        (priority, position, added, finished, error) = (d.priority, d.position, d.added, d.finished, d.error)
        if let path = d.file, let root, path.hasPrefix(root + "/") { file = String(path.dropFirst(root.count + 1)) }
        (done, total) = (progress?.done ?? d.done, progress?.total ?? d.total)
        connections = (try? JSONDecoder().decode(StoredOptions.self, from: Data(d.options.utf8)))?.connections ?? 1
        session = d.session
        told = d.session == nil ? nil : d.told
        if d.state == .running, let progress {
            speed = progress.speed
            eta = Self.eta(done: done, total: total, speed: progress.speed)
        }
    }

    /// Seconds left at `speed`, rounded up; nil without a size or a speed.
    static func eta(done: Int64, total: Int64?, speed: Double) -> Double? {
        guard let total, speed > 0 else { return nil }
        return (Double(max(0, total - done)) / speed).rounded(.up)
    }
}

/// What `POST /api/v1/downloads` takes.
struct AddRequest: Decodable {
    var urls: [String]
    var name: String?
    var subfolder: String?
    var priority: Int64?
    /// Connections per download, 1...16.
    var connections: Int?
    /// A cap in bytes per second, at least 1024.
    var maxBytesPerSecond: Int64?
    /// `ALGORITHM=HEX` digests the file must have (`sha-256=…`).
    var checksums: [String]?
    /// The background session the downloads belong to (``ServeAPI/checkSession(_:)``).
    var session: String?
}

/// The per-download choices the store keeps (as JSON in its `options` column).
struct StoredOptions: Codable, Equatable {
    var connections: Int?
    var maxBytesPerSecond: Int64?
    var checksums: [String]?
}

extension ServeAPI {
    static let maxURLsPerAdd = 1000
    /// The longest URL taken, in bytes.
    static let maxURLBytes = 8192
    /// The most downloads the list holds (finished ones included: remove them to add more).
    static let maxDownloads = 100_000

    func list(_ query: [String: String]) throws(ServeError) -> HTTPReply {
        var states: Set<StoredDownload.State>?
        if let wanted = query["state"] {
            var set: Set<StoredDownload.State> = []
            for name in wanted.split(separator: ",") {
                guard let state = StoredDownload.State(rawValue: String(name)) else {
                    throw ServeError(.badRequest, "no state '\(ServeError.shown(String(name)))'")
                }
                set.insert(state)
            }
            states = set
        }
        let limit = try Self.number(query["limit"], default: 100, in: 1...1000, "limit")
        let offset = try Self.number(query["offset"], default: 0, in: 0...Int.max, "offset")
        let session = try query["session"].map(Self.checkSession)
        var sort = query["sort"] ?? "queue"
        let descending = sort.hasPrefix("-")
        if descending { sort.removeFirst() }
        guard let order = ListOrder(rawValue: sort) else {
            let names = ListOrder.allCases.map(\.rawValue).joined(separator: ", ")
            throw ServeError(.badRequest, "sort is one of \(names), with '-' before it for the other way round")
        }
        let latest = try store.latestEvent()
        guard let sinceText = query["since"] else {
            let items = try store.list(
                states: states, session: session, order: order, descending: descending, limit: limit, offset: offset)
            return try Self.json(200, ListAnswer(downloads: items.map(shown), latest: latest))
        }
        // The polling form: every download changed after event N as it is now (not its bytes:
        // those are the stream's progress), and the ids removed. All of them, so no page, and
        // no state filter (a download that left it could not be told from one unchanged).
        guard query["limit"] == nil, query["offset"] == nil, query["state"] == nil else {
            throw ServeError(.badRequest, "since gives every change: no limit, offset or state with it")
        }
        let since = Int64(try Self.number(sinceText, default: 0, in: 0...Int.max, "since"))
        // Further behind than the events kept, or ahead of them (another store): list again.
        guard since >= (try store.oldestEvent()) - 1, since <= latest else {
            return try Self.json(200, ListAnswer(downloads: [], latest: latest, reset: true))
        }
        let items = try store.list(
            session: session, changedSince: since, order: order, descending: descending, limit: ServeStore.everything)
        return try Self.json(
            200,
            ListAnswer(
                downloads: items.map(shown), removed: try store.removed(since: since, session: session), latest: latest)
        )
    }

    /// What the list answers.
    struct ListAnswer: Encodable {
        var downloads: [DownloadJSON]
        /// With `since`: the ids removed after it.
        var removed: [Int64]?
        /// The latest event's number: the `since` of the next poll.
        var latest: Int64
        /// With `since`: the events after it are no longer kept (or it is ahead of them), so
        /// the client lists again (in pages) and polls from this answer's `latest`.
        var reset: Bool?
    }

    func add(_ body: [UInt8]) throws(ServeError) -> HTTPReply {
        let asked: AddRequest
        do { asked = try JSONDecoder().decode(AddRequest.self, from: Data(body)) } catch {
            throw ServeError(
                .badRequest, "the body is not {\"urls\": [...], \"name\"?, \"subfolder\"?, ...} (docs/api.md)")
        }
        let options = try Self.text(try Self.options(asked))
        guard !asked.urls.isEmpty, asked.urls.count <= Self.maxURLsPerAdd else {
            throw ServeError(.badRequest, "give 1 to \(Self.maxURLsPerAdd) URLs")
        }
        if asked.name != nil && asked.urls.count > 1 { throw ServeError(.badRequest, "a name is for one URL only") }
        if let priority = asked.priority, !(-1000...1000).contains(priority) {
            throw ServeError(.badRequest, "priority must be -1000...1000")
        }
        let session = try asked.session.map(Self.checkSession)
        guard try store.count() + asked.urls.count <= Self.maxDownloads else {
            throw ServeError(.badRequest, "the list holds \(Self.maxDownloads) downloads: remove finished ones first")
        }
        // Checked now, so a name that would leave the root is refused before it is stored.
        if let name = asked.name {
            _ = try root.resolve(folder: asked.subfolder, file: name)
        } else if let folder = asked.subfolder {
            _ = try root.resolve(folder)
        }
        var new: [NewDownload] = []
        for (index, text) in asked.urls.enumerated() {
            // Not echoed: a URL may carry a password.
            guard text.utf8.count <= Self.maxURLBytes, let url = URL(string: text),
                let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", let host = url.host,
                !host.isEmpty
            else { throw ServeError(.badRequest, "URL \(index + 1) is not an http or https URL of up to 8 KiB") }
            // Credentials would be dropped by the store and the download would run without them.
            if url.user != nil || url.password != nil {
                throw ServeError(
                    .badRequest, "URL \(index + 1) has a user name or password: haul serve keeps no credentials")
            }
            // The daemon itself (its page, its API), in any spelling of a loopback address.
            if Self.isLoopback(host) || hosts.names.contains(host.lowercased()),
                url.port ?? (scheme == "https" ? 443 : 80) == hosts.port
            {
                throw ServeError(.badRequest, "URL \(index + 1) is this daemon's own address")
            }
            var item = NewDownload(url: url, name: asked.name, subfolder: asked.subfolder, session: session)
            item.priority = asked.priority ?? 0
            item.options = options
            new.append(item)
        }
        let added = try store.add(new, now: now())
        for item in added {
            _ = try store.append(event: "added", download: item.id, body: try Self.text(DownloadJSON(item)))
            start(item)
        }
        return try Self.json(201, ["downloads": added.map(shown)])
    }

    /// The per-download choices of an add, checked.
    static func options(_ asked: AddRequest) throws(ServeError) -> StoredOptions {
        if let n = asked.connections, !(1...16).contains(n) {
            throw ServeError(.badRequest, "connections must be 1...16")
        }
        if let rate = asked.maxBytesPerSecond, rate < 1024 {
            throw ServeError(.badRequest, "maxBytesPerSecond must be at least 1024")
        }
        for text in asked.checksums ?? [] {
            do throws(HaulError) { _ = try Checksum(text) } catch {
                throw ServeError(.badRequest, "a checksum is ALGORITHM=HEX (sha-256, sha-512, sha-1, md5)")
            }
        }
        return StoredOptions(
            connections: asked.connections, maxBytesPerSecond: asked.maxBytesPerSecond, checksums: asked.checksums)
    }

    func act(_ action: String, on id: Int64, body: [UInt8] = []) throws(ServeError) -> HTTPReply {
        guard let item = try store.download(id) else { throw Self.noSuchDownload(String(id)) }
        switch action {
        case "pause", "resume", "cancel":
            let to: StoredDownload.State = action == "pause" ? .paused : action == "resume" ? .queued : .cancelled
            // A failed download may be tried again; a completed or cancelled one has ended. Only
            // a paused or failed one is resumed (a running one is left running, and shown so).
            guard item.state.isUnfinished || (action == "resume" && item.state == .failed) else {
                throw ServeError(.badRequest, "download \(id) has ended (\(item.state.rawValue))")
            }
            if action == "resume" && item.state != .paused && item.state != .failed {
                throw ServeError(.badRequest, "download \(id) is not paused (\(item.state.rawValue))")
            }
            guard item.state != to || to == .cancelled else { break }
            // At the back of its priority, where the manager puts what it resumes: before the
            // state event, which shows the position.
            if action == "resume" { try store.sendToBack(id) }
            try changeState(try store.download(id) ?? item, to)
            switch action {
            case "pause": runner?.pause(id)
            case "resume":
                if let now = try store.download(id) { start(now) }
            default: cancel(item)
            }
        case "move": try self.move(item, body)
        case "told": return try tell(id, body)
        case "remove":
            struct Remove: Decodable { var files: Bool? }
            let files = (try? JSONDecoder().decode(Remove.self, from: Data(body)))?.files ?? false
            // The file first: a refusal leaves the download as it was.
            if files && item.state == .completed { try removeFile(of: item) }
            if item.state.isUnfinished {
                cancel(item)
            } else if files && item.state == .failed {
                discardPartial(of: item)
            }
            runner?.forget(id)
            // The event first: it takes the download's session from its row.
            _ = try store.append(event: "removed", download: id, body: "{\"id\":\(id)}")
            try store.remove(id)
            return try Self.json(200, ["removed": String(id)])
        default:
            throw ServeError(
                .notFound, "no action '\(ServeError.shown(action))' (pause, resume, cancel, move, remove, told)")
        }
        guard let changed = try store.download(id) else { throw Self.noSuchDownload(String(id)) }
        return try Self.json(200, shown(changed))
    }

    /// `POST /api/v1/downloads/ID/told` `{"session", "claim"}`: once per end, to whichever
    /// caller asks first (two processes attached to one session cannot both be told); the same
    /// caller (its claim) may ask again.
    func tell(_ id: Int64, _ body: [UInt8]) throws(ServeError) -> HTTPReply {
        struct Tell: Decodable {
            var session: String
            var claim: String
        }
        guard let asked = try? JSONDecoder().decode(Tell.self, from: Data(body)),
            BackgroundSession.isValidIdentifier(asked.session), (16...64).contains(asked.claim.utf8.count),
            asked.claim.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        else {
            throw ServeError(.badRequest, "the body is not {\"session\": ID, \"claim\": 16 to 64 hex digits}")
        }
        guard let told = try store.tell(id, session: asked.session, claim: asked.claim) else {
            throw ServeError(.badRequest, "download \(id) is not an ended download of session \(asked.session)")
        }
        return try Self.json(200, ["told": told])
    }

    /// `POST /api/v1/downloads/ID/move` `{"to": "top"|"up"|"down"|"bottom"}`: a queued download
    /// changes place in the queue, in the store and in the manager alike; a `moved` event says
    /// which positions changed.
    func move(_ item: StoredDownload, _ body: [UInt8]) throws(ServeError) {
        struct Move: Decodable { var to: String }
        guard let asked = try? JSONDecoder().decode(Move.self, from: Data(body)),
            let move = DownloadManager.QueueMove(rawValue: asked.to)
        else { throw ServeError(.badRequest, "the body is not {\"to\": \"top\"|\"up\"|\"down\"|\"bottom\"}") }
        guard item.state == .queued, let (priority, positions) = try store.move(item.id, move) else {
            throw ServeError(
                .badRequest, "download \(item.id) is not queued (\(item.state.rawValue)): only a queued one moves")
        }
        runner?.move(item.id, move)
        struct Moved: Encodable {
            var id: Int64
            var priority: Int64
            /// `[id, position]` of each download whose position changed.
            var positions: [[Int64]]
        }
        let moved = Moved(id: item.id, priority: priority, positions: positions.map { [$0.id, $0.position] })
        _ = try store.append(event: "moved", download: item.id, body: try Self.text(moved))
    }

    func events(_ query: [String: String]) throws(ServeError) -> HTTPReply {
        let since = try Self.number(query["since"], default: 0, in: 0...Int.max, "since")
        let session = try query["session"].map(Self.checkSession)
        struct Event: Encodable {
            var seq: Int64
            var download: Int64?
            var kind: String
            var body: String
        }
        let found = try store.events(since: Int64(since), session: session, limit: 1000)
        return try Self.json(
            200, ["events": found.map { Event(seq: $0.seq, download: $0.download, kind: $0.kind, body: $0.body) }])
    }

    // MARK: - Helpers

    /// A background session's identifier: 1 to 128 ASCII letters, digits, `.`, `_` and `-`
    /// (a reverse-DNS name, as URLSession's are), the same rule as the library's.
    static func checkSession(_ text: String) throws(ServeError) -> String {
        guard BackgroundSession.isValidIdentifier(text) else {
            throw ServeError(
                .badRequest, "a session is 1 to 128 letters, digits, '.', '_' or '-' (not '\(ServeError.shown(text))')")
        }
        return text
    }

    /// Whether `host` (a URL's) names this machine's loopback or any address: `localhost` and
    /// its subdomains, with or without a final dot, and every numeric form (`127.1`,
    /// `0x7f.0.0.1`, `0.0.0.0`, `[::1]`, `[::ffff:127.0.0.1]`). A name that resolves there is
    /// not looked up.
    static func isLoopback(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("[") && name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        while name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        var v4 = in_addr()
        if inet_aton(name, &v4) != 0 {
            let first = UInt32(bigEndian: v4.s_addr) >> 24
            return first == 127 || v4.s_addr == 0
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, name, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) { return bytes[15] <= 1 }  // :: and ::1
        let mapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        return mapped && (bytes[12] == 127 || bytes[12...].allSatisfy { $0 == 0 })
    }

    static func json(_ status: Int, _ value: some Encodable) throws(ServeError) -> HTTPReply {
        HTTPReply(
            status: status, headers: [("Content-Type", "application/json")] + common, body: Array(try text(value).utf8))
    }

    static func text(_ value: some Encodable) throws(ServeError) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(value) else {
            throw ServeError(.internalError, "cannot encode the answer")
        }
        return String(decoding: data, as: UTF8.self)
    }

    static func error(_ error: ServeError) -> HTTPReply {
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")] + common
        if error.code == .unauthorized { headers.append(("WWW-Authenticate", "Bearer")) }
        let body = (try? text(["error": error.message])) ?? "{}"
        return HTTPReply(status: error.status, headers: headers, body: Array(body.utf8))
    }

    static func noSuchDownload(_ id: String) -> ServeError {
        ServeError(.notFound, "no download \(ServeError.shown(id))")
    }

    static func id(_ text: String) throws(ServeError) -> Int64 {
        guard let id = HTTPHeaders.decimal(text), id > 0 else { throw noSuchDownload(text) }
        return id
    }

    static func number(
        _ text: String?, default value: Int, in range: ClosedRange<Int>, _ name: String
    ) throws(ServeError) -> Int {
        guard let text else { return value }
        guard let n = HTTPHeaders.decimal(text), n <= Int64(range.upperBound), range.contains(Int(n)) else {
            throw ServeError(.badRequest, "\(name) must be a number in \(range.lowerBound)...\(range.upperBound)")
        }
        return Int(n)
    }

    /// `a=1&b=2`, percent-decoded; a key given twice keeps its first value.
    static func query(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ s: Substring) -> String {
                String(decoding: HTTPParsing.percentDecodedBytes(String(s.map { $0 == "+" ? " " : $0 })), as: UTF8.self)
            }
            let key = decoded(parts[0])
            let value = parts.count > 1 ? decoded(parts[1]) : ""
            if out[key] == nil { out[key] = value }
        }
        return out
    }
}
