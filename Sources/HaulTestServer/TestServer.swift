import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

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
        headers.first { $0.name.equalsIgnoringASCIICase(name) }?.value
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
    let state = Locked<State>(State())

    struct State {
        var requests: [RecordedRequest] = []
        var hits: [String: Int] = [:]
        /// Requests of each path being answered, for `busy=N`.
        var busyPaths: [String: Int] = [:]
        /// When each signed link (`signed=S`) was first asked for.
        var signedFirstUse: [String: Date] = [:]
        /// Digests `digest=` sent, by algorithm, content and span (worked out once).
        var digests: [String: [UInt8]] = [:]
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
    /// `ip netns`), the listening socket lives in that namespace.
    public init(host: String = "127.0.0.1", networkNamespace: String? = nil) throws {
        signal(SIGPIPE, SIG_IGN)
        self.host = host
        let (fd, port) =
            try networkNamespace.map { name in
                try Self.inside(networkNamespace: name) { try Self.makeListener(on: host) }
            }
            ?? Self.makeListener(on: host)
        self.port = port
        listenFD = fd
        Sys.startThread(name: "haul.ts.accept") { [self] in acceptLoop() }
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

    /// The connections open now.
    public var openConnections: Int { state.withLock { $0.active } }

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
            Sys.startThread(name: "haul.ts.conn") { [self] in
                serve(fd, connection: id)
                state.withLock { s in
                    s.active -= 1
                    s.open.removeAll { $0 == fd }
                    close(fd)
                }
            }
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
    func holdUntil(inFlight n: Int) {
        let deadline = Date().addingTimeInterval(60)
        while state.withLock({ $0.maxInFlightTotal < n && !$0.stopped }), Date() < deadline {
            sleepFor(0.005)
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
                if due > 0 { sleepFor(due) }
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
    /// A multipart Content-Type's boundary parameter, without quotes or spaces around it.
    static func boundary(of type: String) -> String? {
        guard let range = type.firstRange(of: "boundary=") else { return nil }
        let value = type[range.upperBound...].split(separator: ";").first ?? ""
        let quoteOrSpace: (Character) -> Bool = { $0 == "\"" || $0 == " " }
        var trimmed = value.drop(while: quoteOrSpace)
        while let last = trimmed.last, quoteOrSpace(last) { trimmed = trimmed.dropLast() }
        return String(trimmed)
    }

    private func receiveUpload(
        _ fd: Int32, _ r: RecordedRequest, mode: String, hit: Int, buffer: inout [UInt8]
    )
        -> Bool
    {
        let q = r.query
        // status=503,200: the answer to each try in turn (the last repeats), before the body is
        // read; retryAfter=S adds a Retry-After.
        let statuses = q["status"]?.split(separator: ",").compactMap { Int($0) } ?? []
        if let status = statuses.isEmpty ? nil : statuses[min(hit, statuses.count - 1)], status >= 400 {
            let body = Array("{\"error\":\"status \(status)\"}".utf8)
            var headers = [("Content-Length", "\(body.count)"), ("Connection", "close")]
            if let wait = q["retryAfter"] { headers.append(("Retry-After", wait)) }
            _ = send(fd, status: status, headers: headers, body: body)
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
        let boundary = r.header("Content-Type").flatMap(Self.boundary(of:))
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
        let cookies = Self.setCookies(r.query)
        return send(
            fd, status: 200,
            headers: [("Content-Type", "application/json"), ("Content-Length", "\(body.count)")] + cookies, body: body)
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
                let bytes = buffer[..<i]
                let line = String(decoding: bytes.last == 13 ? bytes.dropLast() : bytes, as: UTF8.self)
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
                (String(line[..<colon]), line[line.index(after: colon)...].trimmingASCIIWhitespace()))
        }
        let comps = URLComponents(string: target)
        var query: [String: String] = [:]
        for item in comps?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        return RecordedRequest(
            connection: connection, method: String(first[0]), target: target, path: comps?.path ?? target,
            query: query, headers: headers)
    }

}

/// Sleeps the calling thread (a server thread's pacing and delays).
func sleepFor(_ seconds: Double) {
    guard seconds > 0 else { return }
    let seconds = min(seconds, 3600)  // `?delay=inf` or a huge one: an hour, not a trap
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - Double(Int(seconds))) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

// Module-level shims: TestServer has methods named like these C functions.
private func shutdownSocket(_ fd: Int32) { _ = shutdown(fd, Int32(SHUT_RDWR)) }

func sendBytes(_ fd: Int32, _ p: UnsafeRawPointer, _ n: Int) -> Int {
    #if os(Linux)
        return send(fd, p, n, Int32(MSG_NOSIGNAL))
    #else
        return send(fd, p, n, 0)  // SIGPIPE is ignored in init
    #endif
}
private func halfClose(_ fd: Int32) { _ = shutdown(fd, Int32(SHUT_WR)) }
