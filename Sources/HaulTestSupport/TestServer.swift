import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A request as the test server saw it.
public struct RecordedRequest: Sendable {
    /// Which connection carried it (1-based, in accept order).
    public var connection: Int
    /// The request method.
    public var method: String
    /// Path and query as sent.
    public var target: String
    /// The path, without the query.
    public var path: String
    /// The query parameters.
    public var query: [String: String]
    /// The header fields in order.
    public var headers: [(name: String, value: String)]
    /// When its head had been read.
    public var receivedAt = Date()

    /// The first value of a header, case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
    /// The `Range` header.
    public var range: String? { header("Range") }
    /// The `If-Range` header.
    public var ifRange: String? { header("If-Range") }
    /// The start offset of a `Range: bytes=N-` header.
    public var rangeStart: Int? {
        guard let r = range, r.hasPrefix("bytes=") else { return nil }
        return Int(r.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false).first ?? "")
    }
}

/// An in-process HTTP/1.1 server on 127.0.0.1:0 whose routes misbehave on purpose.
///
/// Every route serves deterministic content (``TestContent``); query parameters choose the
/// behaviour, so a URL alone describes a scenario (docs/test-server.md lists them all):
///
/// ```swift
/// let server = try TestServer()
/// defer { server.shutdown() }
/// let url = server.url("/big.bin?size=10485760&drop=1000000&drops=1")
/// ```
///
/// Stateful behaviours (`change`, `drops`, `status` sequences) count requests per target
/// (path and query), so each test uses its own path.
public final class TestServer: Sendable {
    /// The port the server listens on.
    public let port: Int
    /// The address the server is bound to.
    public let host: String
    private let listenFD: Int32
    private let state = Locked<State>(State())

    private struct State {
        var requests: [RecordedRequest] = []
        var hits: [String: Int] = [:]
        /// Requests of each path being answered, for `busy=N`.
        var busyPaths: [String: Int] = [:]
        /// When each signed link (`signed=S`) was first asked for.
        var signedFirstUse: [String: Date] = [:]
        var open: [Int32] = []
        var connections = 0
        var active = 0
        var maxActive = 0
        var stopped = false
        var listenClosed = false
        var sent: [String: Int] = [:]
        /// Answers of each path whose client went away before their last byte.
        var cut: [String: Int] = [:]
        var inFlight: [String: Int] = [:]
        var maxInFlight: [String: Int] = [:]
        var inFlightTotal = 0
        var uploads: [UploadReport] = []
        var maxInFlightTotal = 0
    }

    /// Starts listening on `host`:0 (a free port); with `networkNamespace` (a name from
    /// `ip netns`), the listening socket lives in that namespace (see ``NetworkNamespace``).
    public init(host: String = "127.0.0.1", networkNamespace: String? = nil) throws {
        signal(SIGPIPE, SIG_IGN)
        self.host = host
        let (fd, port) =
            try networkNamespace.map { name in try NetworkNamespace.inside(name) { try Self.makeListener(on: host) } }
            ?? Self.makeListener(on: host)
        self.port = port
        listenFD = fd
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "haul.testserver.accept"
        thread.start()
    }

    private static func makeListener(on host: String) throws -> (Int32, Int) {
        #if os(Linux)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        inet_pton(AF_INET, host, &addr.sin_addr)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 128) == 0 else {
            let e = errno
            close(fd)
            throw POSIXError(.init(rawValue: e) ?? .EIO)
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return (fd, Int(UInt16(bigEndian: addr.sin_port)))
    }

    deinit { shutdown() }

    /// `http://127.0.0.1:PORT`
    public var baseURL: URL { URL(string: "http://\(host):\(port)")! }

    /// A URL on this server for a path with query, e.g. `/f.bin?size=100`.
    public func url(_ pathAndQuery: String) -> URL { URL(string: "http://\(host):\(port)\(pathAndQuery)")! }

    /// Stops accepting and closes every connection.
    public func shutdown() {
        // Under the lock: a descriptor is closed only after it left `open` (and the listening one
        // only by the accept loop after `listenClosed`), so we never touch a reused number.
        state.withLock { s in
            if s.stopped { return }
            s.stopped = true
            if !s.listenClosed { shutdownSocket(listenFD) }
            for fd in s.open { shutdownSocket(fd) }
        }
    }

    /// Every request so far, in arrival order.
    public var requests: [RecordedRequest] { state.withLock { $0.requests } }

    /// The requests for one path.
    public func requests(path: String) -> [RecordedRequest] { requests.filter { $0.path == path } }

    /// What the upload routes received, in order.
    public var uploads: [UploadReport] { state.withLock { $0.uploads } }

    /// Body bytes written to sockets for requests to `path` so far.
    public func bytesSent(path: String) -> Int { state.withLock { $0.sent[path, default: 0] } }
    /// How many answers of `path` lost their client before their last byte (it closed the
    /// connection: a range taken over by another connection, a cancel).
    public func cutAnswers(path: String) -> Int { state.withLock { $0.cut[path, default: 0] } }

    /// The most requests being answered at the same time (all hosts, or one `Host` header value).
    public func maxConcurrentRequests(host: String? = nil) -> Int {
        state.withLock { s in host.map { s.maxInFlight[$0, default: 0] } ?? s.maxInFlightTotal }
    }

    /// The most connections that were open at the same time.
    public var maxConcurrentConnections: Int { state.withLock { $0.maxActive } }

    // MARK: - Connections

    private func acceptLoop() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                break
            }
            let id = state.withLock { s -> Int? in
                if s.stopped { return nil }
                s.connections += 1
                s.active += 1
                s.maxActive = max(s.maxActive, s.active)
                s.open.append(fd)
                return s.connections
            }
            guard let id else {
                close(fd)
                break
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let thread = Thread { [self] in
                serve(fd, connection: id)
                state.withLock { s in
                    s.active -= 1
                    s.open.removeAll { $0 == fd }
                    close(fd)
                }
            }
            thread.name = "haul.testserver.conn"
            thread.start()
        }
        state.withLock { s in
            s.listenClosed = true
            close(listenFD)
        }
    }

    private func serve(_ fd: Int32, connection: Int) {
        var buffer: [UInt8] = []
        while true {
            guard let (head, rest) = readHead(fd, &buffer) else { return }
            buffer = rest
            guard let request = parse(head, connection: connection) else { return }
            let hit = state.withLock { s -> Int in
                s.requests.append(request)
                // The URLs a signed=S target hands out share one count (each has its own sig=).
                let key = request.query["sig"] == nil ? request.target : Self.unsigned(request.target) + " (signed)"
                defer { s.hits[key, default: 0] += 1 }
                return s.hits[key, default: 0]
            }
            if let mode = request.query["upload"] {
                guard receiveUpload(fd, request, mode: mode, hit: hit, buffer: &buffer) else { return }
                continue
            }
            // Discard a request body, if any.
            if let length = Int(request.header("Content-Length") ?? ""), length > 0 {
                guard consume(fd, length, &buffer, into: { _ in }) else { return }
            }
            let host = request.header("Host") ?? ""
            state.withLock { s in
                s.inFlight[host, default: 0] += 1
                s.maxInFlight[host] = max(s.maxInFlight[host, default: 0], s.inFlight[host, default: 0])
                s.inFlightTotal += 1
                s.maxInFlightTotal = max(s.maxInFlightTotal, s.inFlightTotal)
            }
            // A request stops counting just before its last bytes are written, so a client that
            // has the whole response and sends the next request is never counted twice.
            var counted = true
            let done = {
                guard counted else { return }
                counted = false
                self.state.withLock { s in
                    s.inFlight[host, default: 0] -= 1
                    s.inFlightTotal -= 1
                }
            }
            let keepAlive = respond(fd, request, hit: hit, beforeLastWrite: done)
            done()
            if !keepAlive { return }
        }
    }

    /// `hold=N`: an answer's last bytes wait until N requests have been answered at once (at
    /// most 60 s), so a test of concurrency asserts what the server saw however slowly a loaded
    /// machine starts the other requests.
    private func holdUntil(inFlight n: Int) {
        let deadline = Date().addingTimeInterval(60)
        while state.withLock({ $0.maxInFlightTotal < n && !$0.stopped }), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    /// Reads `length` body bytes (the buffered ones first), handing them to `sink`; false when
    /// the connection ended early.
    private func consume(
        _ fd: Int32, _ length: Int, _ buffer: inout [UInt8], rate: Int? = nil, into sink: (ArraySlice<UInt8>) -> Void
    ) -> Bool {
        let buffered = min(length, buffer.count)
        sink(buffer[0..<buffered])
        buffer = Array(buffer[buffered...])
        var remaining = length - buffered
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let began = Date()
        var taken = buffered
        while remaining > 0 {
            let n = recv(fd, &chunk, min(rate.map { max(1, $0 / 20) } ?? chunk.count, chunk.count, remaining), 0)
            if n <= 0 { return false }
            sink(chunk[0..<n])
            remaining -= n
            taken += n
            if let rate {
                let due = Double(taken) / Double(rate) - Date().timeIntervalSince(began)
                if due > 0 { Thread.sleep(forTimeInterval: due) }
            }
        }
        return true
    }

    /// Like nginx's lingering close: after answering without reading the body, stop sending and
    /// read (and drop) what the client still sends, for up to 2 s, so that closing with unread
    /// data does not reset the connection before the client has read the answer.
    private func lingeringClose(_ fd: Int32) {
        halfClose(fd)
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var scratch = [UInt8](repeating: 0, count: 65_536)
        let deadline = Date().addingTimeInterval(2)
        while Date() < deadline, !state.withLock({ $0.stopped }) {
            let n = recv(fd, &scratch, scratch.count, 0)
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { return }
        }
    }

    /// Upload routes: `upload=multipart` reports each part, `upload=raw` the body's size and
    /// SHA-256, `upload=count` only its size. Faults: `status=413` answers before reading the
    /// body, `drop=N` closes after N body bytes, `rate=B` reads at B bytes/s.
    private func receiveUpload(
        _ fd: Int32, _ r: RecordedRequest, mode: String, hit: Int, buffer: inout [UInt8]
    )
        -> Bool
    {
        let q = r.query
        if let status = q["status"].flatMap(Int.init), status >= 400 {
            let body = Array("{\"error\":\"status \(status)\"}".utf8)
            _ = send(
                fd, status: status, headers: [("Content-Length", "\(body.count)"), ("Connection", "close")], body: body)
            lingeringClose(fd)
            return false
        }
        let chunked = r.header("Transfer-Encoding")?.lowercased().contains("chunked") == true
        guard let length = chunked ? Int.max : Int(r.header("Content-Length") ?? "") else {
            _ = send(fd, status: 411, headers: [("Content-Length", "0"), ("Connection", "close")], body: [])
            return false
        }
        let dropAfter: Int? = {
            guard let n = q["drop"].flatMap(Int.init) else { return nil }
            if let drops = q["drops"].flatMap(Int.init), hit >= drops { return nil }
            return n
        }()
        let boundary = r.header("Content-Type").flatMap { type -> String? in
            guard let range = type.range(of: "boundary=") else { return nil }
            let value = type[range.upperBound...].split(separator: ";").first.map(String.init) ?? ""
            return value.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        }
        let parser = mode == "multipart" ? boundary.map { MultipartParser(boundary: $0) } : nil
        var hasher = SHA256()
        var received = 0
        let sink: (ArraySlice<UInt8>) -> Void = { bytes in
            received += bytes.count
            if let parser { parser.feed(bytes) } else if mode == "raw" { bytes.withUnsafeBytes { hasher.update($0) } }
        }
        if chunked {
            guard consumeChunked(fd, &buffer, dropAfter: dropAfter, into: sink) else { return false }
        } else {
            let ok = consume(
                fd, min(length, dropAfter ?? length), &buffer, rate: q["rate"].flatMap(Int.init), into: sink)
            if !ok || received < length { return false }  // dropped (on purpose or by the client)
        }
        let report = UploadReport(
            path: r.path, method: r.method, parts: parser?.parts ?? [], size: received,
            sha256: mode == "raw" ? hasher.hexDigest() : nil)
        state.withLock { $0.uploads.append(report) }
        var json = "{\"size\":\(received)"
        if let sha = report.sha256 { json += ",\"sha256\":\"\(sha)\"" }
        json += ",\"parts\":\(report.parts.count)}"
        let body = Array(json.utf8)
        return send(
            fd, status: 200, headers: [("Content-Type", "application/json"), ("Content-Length", "\(body.count)")],
            body: body)
    }

    /// Reads a chunked request body (RFC 9112 7.1), handing the data to `sink`; with
    /// `dropAfter`, gives up (false: the connection is closed) once that many bytes came.
    private func consumeChunked(
        _ fd: Int32, _ buffer: inout [UInt8], dropAfter: Int?, into sink: (ArraySlice<UInt8>) -> Void
    ) -> Bool {
        var received = 0
        while true {
            guard let line = readLine(fd, &buffer),
                let size = Int(line.split(separator: ";").first.map(String.init) ?? "", radix: 16), size >= 0
            else { return false }
            if size == 0 {
                while let trailer = readLine(fd, &buffer), !trailer.isEmpty {}
                return true
            }
            let take = dropAfter.map { min(size, max(0, $0 - received)) } ?? size
            guard consume(fd, take, &buffer, into: sink) else { return false }
            received += take
            if take < size { return false }  // dropped on purpose
            guard readLine(fd, &buffer) == "" else { return false }
        }
    }

    private func readLine(_ fd: Int32, _ buffer: inout [UInt8]) -> String? {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let i = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<i], as: UTF8.self).trimmingCharacters(
                    in: CharacterSet(charactersIn: "\r"))
                buffer.removeFirst(i + 1)
                return line
            }
            if buffer.count > 8192 { return nil }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    private func readHead(_ fd: Int32, _ buffer: inout [UInt8]) -> ([UInt8], [UInt8])? {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            if let end = findHeaderEnd(buffer) {
                return (Array(buffer[..<end]), Array(buffer[(end + 4)...]))
            }
            if buffer.count > 65_536 { return nil }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    private func findHeaderEnd(_ b: [UInt8]) -> Int? {
        guard b.count >= 4 else { return nil }
        for i in 0...(b.count - 4) where b[i] == 13 && b[i + 1] == 10 && b[i + 2] == 13 && b[i + 3] == 10 {
            return i
        }
        return nil
    }

    /// `target` without its `sig=` parameter.
    private static func unsigned(_ target: String) -> String {
        guard var c = URLComponents(string: target) else { return target }
        c.queryItems = c.queryItems?.filter { $0.name != "sig" }
        return c.string ?? target
    }

    private func parse(_ head: [UInt8], connection: Int) -> RecordedRequest? {
        let lines = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n")
        let first = lines[0].split(separator: " ")
        guard first.count >= 2 else { return nil }
        let target = String(first[1])
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append(
                (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let comps = URLComponents(string: target)
        var query: [String: String] = [:]
        for item in comps?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        return RecordedRequest(
            connection: connection, method: String(first[0]), target: target, path: comps?.path ?? target,
            query: query, headers: headers)
    }

    // MARK: - Routes

    /// Serves one request; returns whether the connection stays open.
    private func respond(_ fd: Int32, _ r: RecordedRequest, hit: Int, beforeLastWrite: () -> Void) -> Bool {
        let q = r.query
        func int(_ k: String) -> Int? { q[k].flatMap { Int($0) } }
        func flag(_ k: String) -> Bool { q[k] == "1" || q[k] == "true" }

        // busy=N: at most N requests of this path answered at once (a server's per-client
        // connection limit); one more gets 503. Each stops counting just before its last bytes.
        var counting = false
        let leave = {
            guard counting else { return }
            counting = false
            self.state.withLock { $0.busyPaths[r.path, default: 0] -= 1 }
        }
        defer { leave() }
        if let limit = int("busy") {
            let admitted = state.withLock { s -> Bool in
                guard s.busyPaths[r.path, default: 0] < limit else { return false }
                s.busyPaths[r.path, default: 0] += 1
                return true
            }
            guard admitted else {
                return send(fd, status: 503, headers: [("Content-Length", "0")], body: [])
            }
            counting = true
        }
        func lastWrite() {
            if let n = int("hold") { holdUntil(inFlight: n) }
            leave()
            beforeLastWrite()
        }

        if let delay = q["delay"].flatMap(Double.init) { Thread.sleep(forTimeInterval: delay) }

        // Status sequences: status=503,503,200 (the last repeats).
        if let seq = q["status"]?.split(separator: ",").compactMap({ Int($0) }), !seq.isEmpty {
            let status = seq[min(hit, seq.count - 1)]
            if status != 200 {
                var h = [("Content-Length", "0")]
                if let ra = q["retryAfter"] { h.append(("Retry-After", ra)) }
                if status == 416 { h.append(("Content-Range", "bytes */\(int("size") ?? 1024)")) }
                return send(fd, status: status, headers: h, body: [])
            }
        }
        // signed=S: like a storage service's pre-signed link. The target without `sig=` redirects
        // to itself with a new `sig=`; that URL is refused (403) from S seconds after its first
        // request on (counted from its first use, not its signing, so that a slow test machine
        // does not see a link expire before it is used).
        if let lifetime = q["signed"].flatMap(Double.init) {
            guard let sig = q["sig"] else {
                let sig = UUID().uuidString
                let location = r.target + (r.target.contains("?") ? "&" : "?") + "sig=\(sig)"
                return send(fd, status: 302, headers: [("Location", location), ("Content-Length", "0")], body: [])
            }
            let now = Date()
            let first = state.withLock { s in
                if s.signedFirstUse[sig] == nil { s.signedFirstUse[sig] = now }
                return s.signedFirstUse[sig]!
            }
            if now.timeIntervalSince(first) > lifetime {
                let body = Array("Request has expired".utf8)
                return send(fd, status: 403, headers: [("Content-Length", "\(body.count)")], body: body)
            }
        }
        // Redirects.
        if let to = q["to"] {
            return send(fd, status: 302, headers: [("Location", to), ("Content-Length", "0")], body: [])
        }
        if flag("loop") {
            return send(fd, status: 302, headers: [("Location", r.target), ("Content-Length", "0")], body: [])
        }
        if let count = int("redirect"), count > 0 {
            let next = r.target.replacingOccurrences(of: "redirect=\(count)", with: "redirect=\(count - 1)")
            let status = [301, 302, 303, 307, 308][count % 5]
            return send(fd, status: status, headers: [("Location", next), ("Content-Length", "0")], body: [])
        }

        // The representation.
        let seed = int("seed") ?? 1
        let version: Int
        switch q["change"] {
        case "1": version = hit >= 1 ? 1 : 0
        case "always": version = hit
        default: version = 0
        }
        let size = int("size") ?? 1024
        // `body=TEXT`: the answer is TEXT's bytes (a hostile server's file of its choosing).
        var gzipped: [UInt8]? = q["body"].map { Array($0.utf8) }
        if flag("gzip") { gzipped = TestContent.gzip(TestContent.bytes(seed: seed, version: version, count: size)) }
        let actualSize = gzipped?.count ?? size
        let claimed = actualSize + (int("lie") ?? 0)
        let etag = q["etag"] == "0" ? nil : (flag("weak") ? "W/" : "") + "\"s\(seed)-v\(version)-\(size)\""
        let lastModified =
            q["lm"] == "0"
            ? nil : HTTPDate.format(Date(timeIntervalSince1970: 1_767_225_600 + Double(version) * 3600))

        var headers: [(String, String)] = []
        if let etag { headers.append(("ETag", etag)) }
        if let lastModified { headers.append(("Last-Modified", lastModified)) }
        if flag("gzip") { headers.append(("Content-Encoding", "gzip")) }
        if let cd = contentDisposition(q["cd"]) { headers.append(("Content-Disposition", cd)) }

        // Range, honoured unless ranges=0; If-Range compared strongly unless ifrange=0.
        var start = 0
        var stop = claimed  // one past the last byte to send
        var partial = false
        // ranges=0: never honour Range; norange=K: stop honouring it from the K-th request on.
        let rangesOn = q["ranges"] != "0" && !(int("norange").map { hit >= $0 } ?? false)
        if rangesOn { headers.append(("Accept-Ranges", "bytes")) }
        if rangesOn, let range = r.range, let (first, end) = parseRange(range, size: claimed) {
            var honour = true
            if let ifRange = r.ifRange, q["ifrange"] != "0" {
                honour = ifRange.hasPrefix("W/") ? false : (ifRange == etag || ifRange == lastModified)
            }
            if honour {
                if first >= claimed {
                    return send(
                        fd, status: 416,
                        headers: headers + [("Content-Range", "bytes */\(claimed)"), ("Content-Length", "0")],
                        body: [])
                }
                start = first
                stop = min(end ?? claimed, claimed)
                partial = true
            }
        }
        let chunked = flag("chunked")
        if partial { headers.append(("Content-Range", "bytes \(start)-\(stop - 1)/\(claimed)")) }
        // etag206=0: a 206 without the ETag its 200 carries (it cannot confirm the version).
        if partial && q["etag206"] == "0" { headers.removeAll { $0.0 == "ETag" } }
        if !chunked {
            // length=V: that literal value instead of the true length (`-5`, `abc`).
            headers.append(("Content-Length", q["length"] ?? String(stop - start)))
            // length2=N: a second Content-Length that disagrees (framing no client can trust).
            if let second = int("length2") { headers.append(("Content-Length", String(second))) }
        } else {
            headers.append(("Transfer-Encoding", "chunked"))
        }
        let status = partial ? 206 : 200
        guard writeHead(fd, status: status, headers: headers, latin1: q["cd"] == "latin1") else { return false }
        if r.method == "HEAD" { return true }

        // The body, with faults.
        let dropAfter: Int? = {
            guard let n = int("drop") else { return nil }
            if let drops = int("drops"), hit >= drops { return nil }
            return n
        }()
        let stallAfter: Int? = {
            guard let n = int("stall") else { return nil }
            if let stalls = int("stalls"), hit >= stalls { return nil }
            return n
        }()
        // `slowat=OFFSET&slowrate=B`: a range starting exactly at OFFSET drips at B bytes/s (one
        // slow connection among fast ones; a replacement asks from a later offset).
        let rate = (partial && int("slowat") == start ? int("slowrate") : nil) ?? int("rate")
        var offset = start
        var sent = 0
        let chunkSize = rate.map { max(1, min(65_536, $0 / 20)) } ?? 65_536
        var chunk = [UInt8](repeating: 0, count: chunkSize)
        let began = Date()
        let last = min(actualSize, stop)
        while offset < last {
            var n = min(chunkSize, last - offset)
            if let d = dropAfter { n = min(n, d - sent) }
            if let s = stallAfter { n = min(n, s - sent) }
            if n <= 0 { break }
            if let gz = gzipped {
                chunk.withUnsafeMutableBytes { dst in
                    gz.withUnsafeBytes { dst.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
                }
            } else {
                chunk.withUnsafeMutableBytes {
                    TestContent.fill(
                        UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), seed: seed, version: version, offset: offset
                    )
                }
            }
            if offset + n >= last && !chunked && stop <= actualSize { lastWrite() }
            let ok = chunked ? writeChunk(fd, chunk, n) : writeAll(fd, chunk, n)
            if !ok {
                state.withLock { $0.cut[r.path, default: 0] += 1 }
                return false
            }
            offset += n
            sent += n
            state.withLock { $0.sent[r.path, default: 0] += n }
            if let rate {
                // burst=B: the first B bytes of each answer at once (nginx's limit_rate gives a
                // request its first 2 MiB so), then `rate`.
                let due = Double(max(0, sent - (int("burst") ?? 0))) / Double(rate)
                let elapsed = Date().timeIntervalSince(began)
                if due > elapsed { Thread.sleep(forTimeInterval: due - elapsed) }
            }
        }
        if let d = dropAfter, sent >= d, offset < last { return false }  // drop: close mid-body
        if let s = stallAfter, sent >= s, offset < last {
            stall(fd)
            return false
        }
        if stop > actualSize { return false }  // lied about the length: close early
        if chunked { return writeAll(fd, Array("0\r\n\r\n".utf8), 5) }
        return true
    }

    private func contentDisposition(_ kind: String?) -> String? {
        switch kind {
        case "benign": return "attachment; filename=\"report.pdf\""
        case "quoted": return "attachment; filename=\"my \\\"quoted\\\" file.txt\""
        case "rfc5987": return "attachment; filename=\"fallback.txt\"; filename*=UTF-8''na%C3%AFve%20caf%C3%A9.txt"
        case "traversal": return "attachment; filename=\"../../evil.txt\""
        case "absolute": return "attachment; filename=\"/etc/evil.txt\""
        case "slashes": return "attachment; filename=\"a/b\\\\c/inner.txt\""
        case "nul": return "attachment; filename*=UTF-8''nul%00name%0A.txt"
        case "long": return "attachment; filename=\"\(String(repeating: "x", count: 300)).txt\""
        case "dots": return "attachment; filename=\"..\""
        // Sent in ISO-8859-1 (`é` as the byte E9), as RFC 6266's filename= is and older servers do.
        case "latin1": return "attachment; filename=\"caf\u{E9} cr\u{E8}me.txt\""
        case nil: return nil
        default: return "attachment; filename=\"\(kind!)\""
        }
    }

    /// `bytes=a-b`, `bytes=a-` or `bytes=-n`: the first byte and, when given, one past the last.
    private func parseRange(_ value: String, size: Int) -> (first: Int, end: Int?)? {
        guard value.hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2 else { return nil }
        if spec[0].isEmpty, let suffix = Int(spec[1]) { return (max(0, size - suffix), nil) }
        guard let first = Int(spec[0]) else { return nil }
        if spec[1].isEmpty { return (first, nil) }
        guard let last = Int(spec[1]), last >= first else { return nil }
        return (first, last + 1)
    }

    private func stall(_ fd: Int32) {
        // Headers and part of the body are out; now send nothing, for at most 60 s, until the
        // client gives up or the server stops.
        let deadline = Date().addingTimeInterval(60)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        var scratch = [UInt8](repeating: 0, count: 1024)
        while Date() < deadline, !state.withLock({ $0.stopped }) {
            if poll(&pfd, 1, 100) > 0 {
                if recv(fd, &scratch, scratch.count, 0) <= 0 { return }
            }
        }
    }

    private func send(_ fd: Int32, status: Int, headers: [(String, String)], body: [UInt8]) -> Bool {
        writeHead(fd, status: status, headers: headers) && (body.isEmpty || writeAll(fd, body, body.count))
    }

    /// `latin1`: the head in ISO-8859-1 (one byte per character up to U+00FF), not UTF-8.
    private func writeHead(_ fd: Int32, status: Int, headers: [(String, String)], latin1: Bool = false) -> Bool {
        var head = "HTTP/1.1 \(status) \(reason(status))\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        head += "\r\n"
        let bytes = latin1 ? head.unicodeScalars.map { UInt8(truncatingIfNeeded: $0.value) } : Array(head.utf8)
        return writeAll(fd, bytes, bytes.count)
    }

    private func writeChunk(_ fd: Int32, _ data: [UInt8], _ count: Int) -> Bool {
        let size = Array((String(count, radix: 16) + "\r\n").utf8)
        return writeAll(fd, size, size.count) && writeAll(fd, data, count) && writeAll(fd, [13, 10], 2)
    }

    private func writeAll(_ fd: Int32, _ data: [UInt8], _ count: Int) -> Bool {
        var done = 0
        while done < count {
            let n = data.withUnsafeBytes { sendBytes(fd, $0.baseAddress! + done, count - done) }
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                return false
            }
            done += n
        }
        return true
    }

    private func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 404: "Not Found"
        case 416: "Range Not Satisfiable"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

/// IMF-fixdate formatting for Last-Modified.
enum HTTPDate {
    static func format(_ date: Date) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return f.string(from: date)
    }
}

// Module-level shims: TestServer has methods named like these C functions.
private func shutdownSocket(_ fd: Int32) { _ = shutdown(fd, Int32(SHUT_RDWR)) }

private func sendBytes(_ fd: Int32, _ p: UnsafeRawPointer, _ n: Int) -> Int {
    #if os(Linux)
        return send(fd, p, n, Int32(MSG_NOSIGNAL))
    #else
        return send(fd, p, n, 0)  // SIGPIPE is ignored in init
    #endif
}
private func halfClose(_ fd: Int32) { _ = shutdown(fd, Int32(SHUT_WR)) }
