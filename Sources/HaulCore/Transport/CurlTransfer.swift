import CHaulCurl
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One transfer on the curl thread. Its mutable state is touched only by that thread (the
/// atomics aside), which is why it can be `@unchecked Sendable`.
final class CurlTransfer: TransportTask, @unchecked Sendable {
    let request: TransportRequest
    let handler: any TransportHandler
    unowned let transport: CurlTransport
    let done = OneShot<Result<Void, TransportError>>()
    let cancelRequested = Atomic<Bool>(false)

    var easy: UnsafeMutableRawPointer?
    private var headerList: OpaquePointer?
    private var errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: 256)
    private var status = 0
    private var headers = HTTPHeaders()
    private var responseDelivered = false
    private var aborted = false
    /// Why the answer cannot be used, when its headers broke HTTP (the transfer was aborted).
    private var invalidResponse: String?
    var paused = false  // this var and the three below: the curl thread's only
    private var bodyBytes: Int64 = 0
    /// Rate limiting: token buckets that may go into debt by one chunk; while in debt the
    /// transfer is paused (no socket reads) until `paceUntil`.
    var paceUntil: Double?
    /// When this transfer began waiting for a budget, kept while it waits without getting any:
    /// when waits end together the longest-waiting transfer goes first, so a shared budget is
    /// taken in turns.
    var waitingSince: Double?
    /// When the last byte of the answer arrived, or the transfer last went on after a pause;
    /// nil before the first. See ``CurlTransport/expireStalled(at:)``.
    var lastActivity: Double?
    private lazy var own: RateBudget? = request.maxReceiveRate.map { RateBudget(bytesPerSecond: $0) }

    /// When this transfer counts as stalled if no byte comes: nil before its answer begins,
    /// while it is paused, with no idle timeout, or for an upload (the socket's buffers hold
    /// seconds of a body a server reads slowly, with no read of ours meanwhile: that is no
    /// stall, and curl's own check, which counts the bytes sent, stays in charge there).
    var stallDeadline: Double? {
        guard let lastActivity, !paused, paceUntil == nil, request.body == nil, request.idleTimeout > 0,
            request.idleTimeout.isFinite
        else { return nil }
        return lastActivity + request.idleTimeout
    }

    init(request: TransportRequest, handler: any TransportHandler, transport: CurlTransport) {
        self.request = request
        self.handler = handler
        self.transport = transport
        errorBuffer.initialize(repeating: 0, count: 256)
    }

    deinit { errorBuffer.deallocate() }

    func pause() { transport.pause(self) }
    func resume() { transport.resume(self) }
    func cancel() {
        cancelRequested.store(true, ordering: .releasing)
        transport.cancel(self)
    }
    func finished() async -> Result<Void, TransportError> { await done.value() }
    func onFinish(_ body: @escaping @Sendable (Result<Void, TransportError>) -> Void) { done.whenFulfilled(body) }
    func complete(_ r: Result<Void, TransportError>) { done.fulfill(r) }

    /// Why the request cannot go out at all, before any handle is taken for it.
    func refusal() -> TransportError? {
        guard let scheme = request.url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            return TransportError(.invalidURL, "unsupported URL scheme")
        }
        // Plain http has no key to pin: a pinned download (or a redirect of one) never goes there.
        if scheme == "http" && !request.connection.pinnedPublicKeys.isEmpty {
            return TransportError(.tls, "public keys are pinned, and an http:// URL has no TLS")
        }
        return nil
    }

    /// Sets up the transfer's handle (after ``refusal()`` found nothing): `reused` (a finished
    /// transfer's, reset to every default) when there is one, else a new one. On failure the
    /// handle is destroyed.
    func makeEasyHandle(
        reusing reused: UnsafeMutableRawPointer? = nil
    ) -> Result<UnsafeMutableRawPointer, TransportError> {
        guard let h = reused ?? haul_easy_init() else {
            return .failure(TransportError(.other, "curl_easy_init failed"))
        }
        easy = h
        let me = Unmanaged.passUnretained(self).toOpaque()
        var headers = request.headers
        var ok = setOptions(h)
        ok = setBody(h, me, headers: &headers) && ok
        if !request.decodeContent && !headers.contains("Accept-Encoding") {
            // No Accept-Encoding would mean "any coding is fine" (RFC 9110 12.5.3).
            headers.add("Accept-Encoding", "identity")
        }
        // A header with CR, LF or NUL could smuggle a second header or request; dropping it
        // could drop an If-Range (and splice two versions): the request is refused.
        guard let lines = Self.headerLines(headers) else {
            cleanup()
            return .failure(TransportError(.invalidURL, "a request header cannot be sent (a line break or NUL in it)"))
        }
        for line in lines { headerList = haul_slist_append(headerList, line) }
        if let headerList {
            ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_HTTPHEADER), UnsafeRawPointer(headerList)) == 0
        }
        ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_ERRORBUFFER), errorBuffer) == 0
        ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_PRIVATE), me) == 0
        ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_WRITEDATA), me) == 0
        ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_HEADERDATA), me) == 0
        ok = ok && haul_easy_setopt_data_cb(h, Int32(HAUL_CURLOPT_WRITEFUNCTION), curlWriteCallback) == 0
        ok = ok && haul_easy_setopt_data_cb(h, Int32(HAUL_CURLOPT_HEADERFUNCTION), curlHeaderCallback) == 0
        guard ok else {
            cleanup()
            if request.connection.httpVersion == .http2 {
                return .failure(
                    TransportError(.other, "libcurl refused the request (HTTP/2 asked for: \(CurlTransport.version))"))
            }
            return .failure(TransportError(.invalidURL, "libcurl refused the request"))
        }
        return .success(h)
    }

    /// The URL, protocols, timeouts, TLS checks and pins, the proxy, the HTTP version, user agent,
    /// decoding and method; false when curl refused one.
    private func setOptions(_ h: UnsafeMutableRawPointer) -> Bool {
        var ok = true
        func set(_ option: Int32, _ value: Int) { ok = ok && haul_easy_setopt_long(h, option, value) == 0 }
        func set(_ option: Int32, _ value: String) { ok = ok && haul_easy_setopt_ptr(h, option, value) == 0 }
        set(Int32(HAUL_CURLOPT_URL), request.url.absoluteString)
        set(Int32(HAUL_CURLOPT_PROTOCOLS_STR), "http,https")
        set(Int32(HAUL_CURLOPT_NOSIGNAL), 1)
        set(Int32(HAUL_CURLOPT_FOLLOWLOCATION), 0)
        set(Int32(HAUL_CURLOPT_BUFFERSIZE), CurlTransport.bufferSize)
        set(Int32(HAUL_CURLOPT_TCP_KEEPALIVE), 1)
        // 0 means curl's default (300 s), for a timeout of 0 and for a negative or NaN one.
        set(Int32(HAUL_CURLOPT_CONNECTTIMEOUT_MS), Seconds.milliseconds(request.connectTimeout))
        // Stall detection before the answer's first byte (curl averages over its last 5 s, so it
        // fires up to 5 s late); once bytes flow, ``CurlTransport/expireStalled(at:)`` is exact.
        // An idle timeout of 0 or less (or NaN) is none, before the first byte as after it.
        if request.idleTimeout > 0 {
            set(Int32(HAUL_CURLOPT_LOW_SPEED_LIMIT), 1)
            set(Int32(HAUL_CURLOPT_LOW_SPEED_TIME), Seconds.wholeUp(request.idleTimeout))
        }
        let connection = request.connection
        set(Int32(HAUL_CURLOPT_SSL_VERIFYPEER), connection.verifiesCertificate ? 1 : 0)
        set(Int32(HAUL_CURLOPT_SSL_VERIFYHOST), connection.verifiesCertificate ? 2 : 0)
        if let ca = connection.caFile { set(Int32(HAUL_CURLOPT_CAINFO), ca) }
        // Checked by curl with or without the checks above.
        if let pins = connection.curlPins { set(Int32(HAUL_CURLOPT_PINNEDPUBLICKEY), pins) }
        ok = setProxy(h) && ok
        // `.automatic` is libcurl's own default (HTTP/2 over TLS where it has HTTP/2), left
        // unset: a libcurl built without HTTP/2 refuses the option, and every transfer with it.
        switch connection.httpVersion {
        case .automatic: break
        case .http1_1: set(Int32(HAUL_CURLOPT_HTTP_VERSION), Int(HAUL_CURL_HTTP_VERSION_1_1))
        case .http2: set(Int32(HAUL_CURLOPT_HTTP_VERSION), Int(HAUL_CURL_HTTP_VERSION_2_0))
        }
        if request.reportsConnection {
            // A connection of its own: a reused one has no certificate to tell of (the hop
            // before it, on the same host, had the handshake).
            set(Int32(HAUL_CURLOPT_CERTINFO), 1)
            set(Int32(HAUL_CURLOPT_FRESH_CONNECT), 1)
        }
        set(Int32(HAUL_CURLOPT_USERAGENT), HaulVersion.userAgent)
        if request.decodeContent {
            set(Int32(HAUL_CURLOPT_ACCEPT_ENCODING), "")
        } else {
            set(Int32(HAUL_CURLOPT_HTTP_CONTENT_DECODING), 0)
        }
        switch request.method {
        case "GET": break
        case "HEAD": set(Int32(HAUL_CURLOPT_NOBODY), 1)
        default: set(Int32(HAUL_CURLOPT_CUSTOMREQUEST), request.method)
        }
        return ok
    }

    /// The proxy, its credentials and its TLS checks; false when curl refused one.
    private func setProxy(_ h: UnsafeMutableRawPointer) -> Bool {
        var ok = true
        func set(_ option: Int32, _ value: Int) { ok = ok && haul_easy_setopt_long(h, option, value) == 0 }
        func set(_ option: Int32, _ value: String) { ok = ok && haul_easy_setopt_ptr(h, option, value) == 0 }
        let connection = request.connection
        switch connection.proxy {
        case .environment: break
        case .none: set(Int32(HAUL_CURLOPT_PROXY), "")
        case .url(let proxy): set(Int32(HAUL_CURLOPT_PROXY), proxy)
        }
        if let noProxy = connection.noProxy { set(Int32(HAUL_CURLOPT_NOPROXY), noProxy) }
        if let credential = connection.proxyCredential {
            set(Int32(HAUL_CURLOPT_PROXYUSERNAME), String(decoding: credential.user, as: UTF8.self))
            set(Int32(HAUL_CURLOPT_PROXYPASSWORD), String(decoding: credential.password, as: UTF8.self))
        }
        // An https:// proxy is always verified (`--insecure` is for the servers: turning it off
        // for the proxy too would hand its credentials to whoever is on the path); the extra CAs
        // are trusted for it as for servers.
        set(Int32(HAUL_CURLOPT_PROXY_SSL_VERIFYPEER), 1)
        set(Int32(HAUL_CURLOPT_PROXY_SSL_VERIFYHOST), 2)
        if let ca = connection.caFile { set(Int32(HAUL_CURLOPT_PROXY_CAINFO), ca) }
        // The proxy's answer to CONNECT is not the server's: its head must not reach the header
        // callback (which would take its 200 for the answer). A refusal is read from
        // CURLINFO_HTTP_CONNECTCODE instead (``result(code:)``).
        set(Int32(HAUL_CURLOPT_SUPPRESS_CONNECT_HEADERS), 1)
        return ok
    }

    /// The request body's callback and length (PUT uploads, other methods post; a body of
    /// unknown length goes chunked); false when curl refused one.
    private func setBody(
        _ h: UnsafeMutableRawPointer, _ me: UnsafeMutableRawPointer, headers: inout HTTPHeaders
    )
        -> Bool
    {
        guard let body = request.body else { return true }
        var ok = haul_easy_setopt_data_cb(h, Int32(HAUL_CURLOPT_READFUNCTION), curlReadCallback) == 0
        ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_READDATA), me) == 0
        if request.method == "PUT" {
            ok = ok && haul_easy_setopt_long(h, Int32(HAUL_CURLOPT_UPLOAD), 1) == 0
            if let length = body.length {
                ok = ok && haul_easy_setopt_off(h, Int32(HAUL_CURLOPT_INFILESIZE_LARGE), length) == 0
            }
        } else {
            ok = ok && haul_easy_setopt_long(h, Int32(HAUL_CURLOPT_POST), 1) == 0
            if let length = body.length {
                ok = ok && haul_easy_setopt_off(h, Int32(HAUL_CURLOPT_POSTFIELDSIZE_LARGE), length) == 0
            } else {
                headers.replace("Transfer-Encoding", "chunked")
            }
        }
        // No "Expect: 100-continue" round trip (servers that do not answer it cost a second).
        headers.replace("Expect", "")
        return ok
    }

    /// `headers` as curl's header lines ("Name:" removes a header curl would add; "Name;" sends
    /// it empty); nil when one cannot be sent as given (a name that is no token, a CR, LF or NUL
    /// in a value).
    private static func headerLines(_ headers: HTTPHeaders) -> [String]? {
        var lines: [String] = []
        for (name, value) in headers {
            guard HTTPHeaders.isToken(name), HTTPHeaders.isSendable(value) else { return nil }
            lines.append(value.isEmpty ? (name == "Expect" ? "Expect:" : "\(name);") : "\(name): \(value)")
        }
        return lines
    }

    func cleanup() {
        if let easy { haul_easy_cleanup(easy) }
        easy = nil
        detach()
    }

    /// Gives up the handle without destroying it (the transport resets it for another
    /// transfer), and frees the header list it pointed to.
    func detach() {
        easy = nil
        if let headerList { haul_slist_free_all(headerList) }
        headerList = nil
    }

    func onHeaderLine(_ line: UnsafeRawBufferPointer) -> Int {
        lastActivity = monotonicSeconds()
        // Parsed as bytes, on the one thread that runs every transfer: as Strings (decoded, then
        // trimmed, searched and split by Character) the head of a small file would cost its
        // transfer as much as libcurl's own work.
        let isStatusLine = line.starts(with: Self.httpPrefix)
        let (start, end) = Self.trimmed(line, 0, line.count)
        if isStatusLine {
            // `HTTP/1.1 206 Partial Content`: the number after the first space.
            var i = start
            while i < end && line[i] != 0x20 { i += 1 }
            while i < end && line[i] == 0x20 { i += 1 }
            var code = 0
            var digits = 0
            while i < end, line[i] >= 0x30, line[i] <= 0x39, digits < 4 {
                code = code * 10 + Int(line[i] - 0x30)
                digits += 1
                i += 1
            }
            status = digits > 0 && digits < 4 && (i == end || line[i] == 0x20) ? code : 0
            headers = HTTPHeaders()
        } else if start == end {
            if status >= 200 && !responseDelivered {
                if !deliverResponse() { return 0 }
            }
        } else if let colon = line[start..<end].firstIndex(of: 0x3A) {
            let name = Self.trimmed(line, start, colon)
            let value = Self.trimmed(line, colon + 1, end)
            headers.add(Self.text(line, name.0, name.1), Self.text(line, value.0, value.1))
        }
        return line.count
    }

    private static let httpPrefix = Array("HTTP/".utf8)

    /// `start..<end` of `line` without the spaces, tabs, CRs and LFs around it.
    private static func trimmed(_ line: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> (Int, Int) {
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
        var (start, end) = (start, end)
        while start < end && isSpace(line[start]) { start += 1 }
        while end > start && isSpace(line[end - 1]) { end -= 1 }
        return (start, end)
    }

    /// The text of `line[start..<end]`: UTF-8, else ISO-8859-1 (RFC 9110 5.5: field values were
    /// Latin-1 text, and RFC 6266's filename= still is): a name sent as `caf\xE9` is "café", not
    /// "caf\u{FFFD}". Nearly every field is ASCII, decoded without a second look.
    private static func text(_ line: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> String {
        let bytes = UnsafeRawBufferPointer(rebasing: line[start..<end])
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
            ?? String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
    }

    private func deliverResponse() -> Bool {
        responseDelivered = true
        if !headers.contains("Transfer-Encoding"), let problem = headers.contentLengthProblem {
            invalidResponse = problem
            return false
        }
        var response = TransportResponse(status: status, headers: headers, url: request.url)
        if request.reportsConnection, let easy { response.connection = Self.connectionReport(easy) }
        if !handler.transportDidReceive(response: response) {
            aborted = true
            return false
        }
        return true
    }

    /// What libcurl tells of the transfer's connection (``TransportRequest/reportsConnection``).
    private static func connectionReport(_ easy: UnsafeMutableRawPointer) -> ConnectionReport {
        var version = 0
        var tls = [CChar](repeating: 0, count: 64)
        var expiry = [CChar](repeating: 0, count: 128)
        haul_easy_connection_info(easy, &version, &tls, tls.count, &expiry, expiry.count)
        func text(_ chars: [CChar]) -> String? {
            let bytes = chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
            // Printable ASCII only: it is shown on a terminal.
            let shown = String(decoding: bytes.filter { $0 >= 0x20 && $0 < 0x7F }, as: UTF8.self)
            let trimmed = shown.trimmingASCIIWhitespace()
            return trimmed.isEmpty ? nil : trimmed
        }
        let names = [1: "HTTP/1.0", 2: "HTTP/1.1", 3: "HTTP/2", 30: "HTTP/3"]
        return ConnectionReport(httpVersion: names[version], tlsVersion: text(tls), certificateExpiry: text(expiry))
    }

    func onRead(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let body = request.body else { return 0 }
        do {
            return try body.read(into: buffer)
        } catch {
            aborted = true
            return Int(HAUL_CURL_READFUNC_ABORT)
        }
    }

    func onBody(_ data: UnsafeRawBufferPointer) -> Int {
        if !responseDelivered && !deliverResponse() { return 0 }
        if let wait = RateBudget.take(data.count, from: own, request.sharedRate) {
            let now = monotonicSeconds()
            paceUntil = now + wait
            if waitingSince == nil { waitingSince = now }
            return Int(HAUL_CURL_WRITEFUNC_PAUSE)  // delivered again when unpaused
        }
        waitingSince = nil
        switch handler.transportDidReceive(body: data) {
        case .proceed:
            bodyBytes += Int64(data.count)
            lastActivity = monotonicSeconds()  // after the handler: a slow write is not the server's
            return data.count
        case .pause:
            paused = true
            return Int(HAUL_CURL_WRITEFUNC_PAUSE)
        case .abort:
            aborted = true
            return 0
        }
    }

    /// Whether a TLS handshake's failure reads as the connection's end rather than TLS's:
    /// OpenSSL's "Connection reset by peer", `SSL_ERROR_SYSCALL` (the socket failed under it)
    /// and "unexpected eof".
    static func isLostConnection(_ message: String) -> Bool {
        ["Connection reset", "SSL_ERROR_SYSCALL", "unexpected eof", "Broken pipe"].contains { message.contains($0) }
    }

    func result(code: Int32) -> Result<Void, TransportError> {
        let detail = String(cString: errorBuffer)
        // libcurl quotes a proxy's URL in some messages: never its password.
        let message = request.connection.scrubbed(detail.isEmpty ? String(cString: haul_easy_strerror(code)) : detail)
        var connectCode = 0
        if code != 0, let easy, haul_easy_getinfo_long(easy, Int32(HAUL_CURLINFO_HTTP_CONNECTCODE), &connectCode) == 0,
            connectCode >= 300
        {
            return .failure(TransportError(.proxyStatus(connectCode), message))
        }
        if let invalidResponse { return .failure(TransportError(.invalidResponse, invalidResponse)) }
        if aborted { return .failure(TransportError(.aborted, "aborted by the handler")) }
        switch code {
        case 0:
            if !responseDelivered { return .failure(TransportError(.connectionLost, "empty reply from server")) }
            return .success(())
        case 1, 3: return .failure(TransportError(.invalidURL, message))
        case 6: return .failure(TransportError(.resolve, message))
        case 5, 97: return .failure(TransportError(.proxy, message))  // CURLE_COULDNT_RESOLVE_PROXY, CURLE_PROXY
        case 7: return .failure(TransportError(.connect, message))
        case 28:
            let stalled = responseDelivered || message.contains("too slow")
            return .failure(TransportError(stalled ? .idleTimeout : .connectTimeout, message))
        case 18, 52, 55, 56, 16, 92, 61: return .failure(TransportError(.connectionLost, message))
        case 8: return .failure(TransportError(.invalidResponse, message))  // CURLE_WEIRD_SERVER_REPLY
        case 35 where Self.isLostConnection(message):
            // CURLE_SSL_CONNECT_ERROR is also a connection reset or closed mid-handshake: a
            // dropped connection to retry, not a certificate to refuse.
            return .failure(TransportError(.connectionLost, message))
        case 35, 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91:
            return .failure(TransportError(.tls, message))
        case 23, 42: return .failure(TransportError(.aborted, message))
        default: return .failure(TransportError(.other, "\(message) (curl \(code))"))
        }
    }
}
