import CHaulCurl
import Foundation
import Synchronization

/// The Linux default transport: libcurl's multi interface driven by one thread.
///
/// All transfers share one `curl_multi` handle and one thread, which runs `curl_multi_perform`
/// and `curl_multi_poll`; other threads talk to it through a command queue and
/// `curl_multi_wakeup`. Body bytes go straight from curl's receive buffer to the handler (which
/// pwrite()s them), with real flow control: a handler that returns `.pause` makes the callback
/// return `CURL_WRITEFUNC_PAUSE`, and `resume()` calls `curl_easy_pause(CONT)`.
/// Unchecked Sendable: `active` is the curl thread's alone; other threads use the command queue.
package final class CurlTransport: HTTPTransport, @unchecked Sendable {
    /// The process-wide instance, or the reason libcurl could not be loaded.
    package static let shared: Result<CurlTransport, TransportError> = {
        do throws(TransportError) { return .success(try CurlTransport()) } catch { return .failure(error) }
    }()

    /// Receive buffer per transfer. 16 KiB (curl's default) costs ~40% wall time on fast links.
    static let bufferSize = 512 * 1024

    private enum Command {
        case add(CurlTransfer)
        case pause(CurlTransfer)
        case resume(CurlTransfer)
        case cancel(CurlTransfer)
    }

    /// Commands for the multi thread, and whether it sleeps in poll (then a command wakes it).
    private struct Inbox {
        var commands: [Command] = []
        var polling = false
    }

    private let multi: UnsafeMutableRawPointer
    private let inbox = Locked(Inbox())
    // Owned by the multi thread.
    private var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    /// The longest the multi thread sleeps in poll with nothing due, in milliseconds.
    private let idlePollMilliseconds: Int32

    /// - Parameter idlePoll: the longest the transfer thread sleeps with nothing due (a command
    ///   wakes it at once); a test of the wake-up makes it long, so that a lost one shows.
    package init(idlePoll: Double = 1) throws(TransportError) {
        idlePollMilliseconds = Int32(max(1, min(3_600_000, (idlePoll * 1000).rounded())))
        var err = [CChar](repeating: 0, count: 512)
        guard haul_curl_load(&err, err.count) == 0 else {
            throw TransportError(.other, err.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        }
        guard let m = haul_multi_init() else { throw TransportError(.other, "curl_multi_init failed") }
        multi = m
        // No HTTP/2 multiplexing (CURLPIPE_NOTHING; libcurl's default is CURLPIPE_MULTIPLEX): every
        // transfer on the wire has a connection of its own. Multiplexed, the ranges of a segmented
        // download were streams of one connection (nginx over h2 logged one connection for -x 8),
        // which a per-connection limit shapes as one, and --max-connections-per-host counted
        // streams. HTTP/2 itself stays, one stream per connection, reused when idle.
        _ = haul_multi_setopt_long(m, Int32(HAUL_CURLMOPT_PIPELINING), 0)
        let thread = Thread { [unowned self] in self.run() }
        thread.name = "haul.curl"
        thread.start()
    }

    /// libcurl's version string.
    package static var version: String {
        guard case .success = shared else { return "libcurl (not loaded)" }
        return String(cString: haul_curl_version())
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        let transfer = CurlTransfer(request: request, handler: handler, transport: self)
        submit(.add(transfer))
        return transfer
    }

    fileprivate func pause(_ t: CurlTransfer) { submit(.pause(t)) }
    fileprivate func resume(_ t: CurlTransfer) { submit(.resume(t)) }
    fileprivate func cancel(_ t: CurlTransfer) { submit(.cancel(t)) }

    /// Queues a command; wakes the multi thread only when it sleeps in poll (a wake-up is a
    /// write to curl's socket pair and a read on the other side: two syscalls per command when
    /// the thread was busy anyway, as with a thousand small downloads).
    private func submit(_ command: Command) {
        let sleeping = inbox.withLock { inbox -> Bool in
            inbox.commands.append(command)
            defer { inbox.polling = false }
            return inbox.polling
        }
        if sleeping { _ = haul_multi_wakeup(multi) }
    }

    private func run() {
        var running: Int32 = 0
        var numfds: Int32 = 0
        while true {
            let batch = inbox.withLock { inbox -> [Command] in
                defer { inbox.commands = [] }
                return inbox.commands
            }
            for command in batch { handle(command) }
            // Transfers paused by their rate limit continue when their time comes, the one that
            // has waited longest first: an unpaused transfer takes its chunk at once, so the first
            // in line gets the budget and the others wait again. In the table's order the same
            // transfer came first every time, and four downloads sharing --max-overall-rate
            // finished one after another, the last one getting nothing until then.
            let now = monotonicSeconds()
            var due: [(UnsafeMutableRawPointer, CurlTransfer)] = []
            for (easy, t) in active where t.paceUntil.map({ $0 <= now }) == true { due.append((easy, t)) }
            if due.count > 1 { due.sort { ($0.1.waitingSince ?? now) < ($1.1.waitingSince ?? now) } }
            for (easy, t) in due {
                t.paceUntil = nil
                if t.lastActivity != nil { t.lastActivity = now }  // the wait was ours
                _ = haul_easy_pause(easy, Int32(HAUL_CURLPAUSE_CONT))
            }
            _ = haul_multi_perform(multi, &running)
            var easy: UnsafeMutableRawPointer?
            var code: Int32 = 0
            while haul_multi_info_read_done(multi, &easy, &code) == 1, let e = easy {
                finish(e, code: code)
            }
            // After curl has read what arrived: a process that was not scheduled for a while
            // (a loaded machine, SIGSTOP) finds the bytes that came meanwhile, and does not take
            // its own absence for the server's silence.
            expireStalled(at: now)
            // Wake for the next paced transfer to go on, or the next one that would stall.
            var next: Double?
            for t in active.values {
                if let at = t.paceUntil ?? t.stallDeadline { next = min(next ?? at, at) }
            }
            let longest = idlePollMilliseconds
            let wait =
                next.map { max(0, min(longest, Int32((($0 - monotonicSeconds()) * 1000).rounded(.up)))) } ?? longest
            // Sleep only with no command waiting; one that arrives from here on wakes the poll.
            let idle = inbox.withLock { inbox -> Bool in
                inbox.polling = inbox.commands.isEmpty
                return inbox.polling
            }
            guard idle else { continue }
            _ = haul_multi_poll(multi, wait, &numfds)
            inbox.withLock { $0.polling = false }
        }
    }

    private func handle(_ command: Command) {
        switch command {
        case .add(let t):
            if t.cancelRequested.load(ordering: .acquiring) {
                t.complete(.failure(TransportError(.cancelled, "cancelled")))
                return
            }
            switch t.makeEasyHandle() {
            case .success(let easy):
                active[easy] = t
                _ = haul_multi_add_handle(multi, easy)
            case .failure(let error):
                t.complete(.failure(error))
            }
        case .pause(let t):
            if let easy = t.easy, active[easy] != nil {
                t.paused = true  // no stall while paused
                _ = haul_easy_pause(easy, 1 /* CURLPAUSE_RECV */)
            }
        case .resume(let t):
            if let easy = t.easy, active[easy] != nil {
                t.paused = false
                if t.lastActivity != nil { t.lastActivity = monotonicSeconds() }  // the wait was ours
                _ = haul_easy_pause(easy, Int32(HAUL_CURLPAUSE_CONT))
            }
        case .cancel(let t):
            guard let easy = t.easy else { return }
            end(easy) { _ in .failure(TransportError(.cancelled, "cancelled")) }
        }
    }

    /// Ends the transfers that have had no byte for their idle timeout since their answer began.
    /// curl's own low-speed check (kept for the wait before the first byte) averages over its
    /// last 5 s, so a stall after a burst was seen 5-6 s late: a 1 s timeout fired after 7 s, the
    /// default 30 s after 35. Paused transfers (by their consumer or a rate limit) wait on us, not
    /// on the server: their clock restarts when they go on.
    private func expireStalled(at now: Double) {
        var stalled: [UnsafeMutableRawPointer] = []
        for (easy, t) in active where t.stallDeadline.map({ $0 <= now }) == true { stalled.append(easy) }
        for easy in stalled {
            end(easy) {
                .failure(TransportError(.idleTimeout, "no data for \(Seconds.text($0.request.idleTimeout)) s"))
            }
        }
    }

    private func finish(_ easy: UnsafeMutableRawPointer, code: Int32) {
        end(easy) { $0.result(code: code) }
    }

    /// Takes an active transfer off the multi handle and completes it with `result` (read
    /// before the handle is cleaned up).
    private func end(
        _ easy: UnsafeMutableRawPointer, with result: (CurlTransfer) -> Result<Void, TransportError>
    ) {
        guard let t = active.removeValue(forKey: easy) else { return }
        _ = haul_multi_remove_handle(multi, easy)
        let outcome = result(t)
        t.cleanup()
        t.complete(outcome)
    }
}

/// One transfer on the curl thread. Its mutable state is touched only by that thread (the
/// atomics aside), which is why it can be `@unchecked Sendable`.
private final class CurlTransfer: TransportTask, @unchecked Sendable {
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
    fileprivate var paused = false
    private var bodyBytes: Int64 = 0
    /// Rate limiting: token buckets that may go into debt by one chunk; while in debt the
    /// transfer is paused (no socket reads) until `paceUntil`.
    fileprivate var paceUntil: Double?
    /// When this transfer began waiting for a budget, kept while it waits without getting any:
    /// when waits end together the longest-waiting transfer goes first, so a shared budget is
    /// taken in turns.
    fileprivate var waitingSince: Double?
    /// When the last byte of the answer arrived, or the transfer last went on after a pause;
    /// nil before the first. See ``CurlTransport/expireStalled(at:)``.
    fileprivate var lastActivity: Double?
    private lazy var own: RateBudget? = request.maxReceiveRate.map { RateBudget(bytesPerSecond: $0) }

    /// When this transfer counts as stalled if no byte comes: nil before its answer begins,
    /// while it is paused, with no idle timeout, or for an upload (the socket's buffers hold
    /// seconds of a body a server reads slowly, with no read of ours meanwhile: that is no
    /// stall, and curl's own check, which counts the bytes sent, stays in charge there).
    fileprivate var stallDeadline: Double? {
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

    func makeEasyHandle() -> Result<UnsafeMutableRawPointer, TransportError> {
        guard let scheme = request.url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            return .failure(TransportError(.invalidURL, "unsupported URL scheme"))
        }
        guard let h = haul_easy_init() else { return .failure(TransportError(.other, "curl_easy_init failed")) }
        easy = h
        let me = Unmanaged.passUnretained(self).toOpaque()
        var ok = true
        func set(_ option: Int32, _ value: Int) { ok = ok && haul_easy_setopt_long(h, option, value) == 0 }
        func set(_ option: Int32, _ value: String) { ok = ok && haul_easy_setopt_ptr(h, option, value) == 0 }
        set(Int32(HAUL_CURLOPT_URL), request.url.absoluteString)
        set(Int32(HAUL_CURLOPT_PROTOCOLS_STR), "http,https")
        set(Int32(HAUL_CURLOPT_NOSIGNAL), 1)
        set(Int32(HAUL_CURLOPT_FOLLOWLOCATION), 0)
        set(Int32(HAUL_CURLOPT_BUFFERSIZE), CurlTransport.bufferSize)
        set(Int32(HAUL_CURLOPT_TCP_KEEPALIVE), 1)
        // 0 means curl's default (300 s): what a timeout of 0 always gave, and now a negative or
        // NaN one too.
        set(Int32(HAUL_CURLOPT_CONNECTTIMEOUT_MS), Seconds.milliseconds(request.connectTimeout))
        // Stall detection before the answer's first byte (curl averages over its last 5 s, so it
        // fires up to 5 s late); once bytes flow, ``CurlTransport/expireStalled(at:)`` is exact.
        set(Int32(HAUL_CURLOPT_LOW_SPEED_LIMIT), 1)
        set(Int32(HAUL_CURLOPT_LOW_SPEED_TIME), Seconds.wholeUp(request.idleTimeout))
        set(Int32(HAUL_CURLOPT_SSL_VERIFYPEER), 1)
        set(Int32(HAUL_CURLOPT_SSL_VERIFYHOST), 2)
        if let ca = request.caFile { set(Int32(HAUL_CURLOPT_CAINFO), ca) }
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
        var headers = request.headers
        if let body = request.body {
            ok = ok && haul_easy_setopt_data_cb(h, Int32(HAUL_CURLOPT_READFUNCTION), curlReadCallback) == 0
            ok = ok && haul_easy_setopt_ptr(h, Int32(HAUL_CURLOPT_READDATA), me) == 0
            if request.method == "PUT" {
                set(Int32(HAUL_CURLOPT_UPLOAD), 1)
                if let length = body.length {
                    ok = ok && haul_easy_setopt_off(h, Int32(HAUL_CURLOPT_INFILESIZE_LARGE), length) == 0
                }
            } else {
                set(Int32(HAUL_CURLOPT_POST), 1)
                if let length = body.length {
                    ok = ok && haul_easy_setopt_off(h, Int32(HAUL_CURLOPT_POSTFIELDSIZE_LARGE), length) == 0
                } else {
                    headers.replace("Transfer-Encoding", "chunked")
                }
            }
            // No "Expect: 100-continue" round trip (servers that do not answer it cost a second).
            headers.replace("Expect", "")
        }
        if !request.decodeContent && !headers.contains("Accept-Encoding") {
            // No Accept-Encoding would mean "any coding is fine" (RFC 9110 12.5.3).
            headers.add("Accept-Encoding", "identity")
        }
        for (name, value) in headers {
            // A header with CR, LF or NUL could smuggle a second header or request; dropping it
            // could drop an If-Range (and splice two versions): the request is refused.
            guard HTTPHeaders.isToken(name), HTTPHeaders.isSendable(value) else {
                cleanup()
                return .failure(
                    TransportError(.invalidURL, "a request header cannot be sent (a line break or NUL in it)"))
            }
            // "Name:" removes a header curl would add; "Name;" sends it empty.
            let line = value.isEmpty ? (name == "Expect" ? "Expect:" : "\(name);") : "\(name): \(value)"
            headerList = haul_slist_append(headerList, line)
        }
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
            return .failure(
                TransportError(.invalidURL, "libcurl refused the request"))
        }
        return .success(h)
    }

    func cleanup() {
        if let easy { haul_easy_cleanup(easy) }
        easy = nil
        if let headerList { haul_slist_free_all(headerList) }
        headerList = nil
    }

    fileprivate func onHeaderLine(_ line: UnsafeRawBufferPointer) -> Int {
        lastActivity = monotonicSeconds()
        // Parsed as bytes, on the one thread that runs every transfer: as Strings (decoded, then
        // trimmed, searched and split by Character) the head of a small file cost its transfer
        // as much as libcurl's own work.
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
    /// Latin-1 text, and RFC 6266's filename= still is): a name sent as `caf\xE9` became
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
        let response = TransportResponse(status: status, headers: headers, url: request.url)
        if !handler.transportDidReceive(response: response) {
            aborted = true
            return false
        }
        return true
    }

    fileprivate func onRead(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let body = request.body else { return 0 }
        do {
            return try body.read(into: buffer)
        } catch {
            aborted = true
            return Int(HAUL_CURL_READFUNC_ABORT)
        }
    }

    fileprivate func onBody(_ data: UnsafeRawBufferPointer) -> Int {
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

    func result(code: Int32) -> Result<Void, TransportError> {
        let detail = String(cString: errorBuffer)
        let message = detail.isEmpty ? String(cString: haul_easy_strerror(code)) : detail
        if let invalidResponse { return .failure(TransportError(.invalidResponse, invalidResponse)) }
        if aborted { return .failure(TransportError(.aborted, "aborted by the handler")) }
        switch code {
        case 0:
            if !responseDelivered { return .failure(TransportError(.connectionLost, "empty reply from server")) }
            return .success(())
        case 1, 3: return .failure(TransportError(.invalidURL, message))
        case 6, 5: return .failure(TransportError(.resolve, message))
        case 7: return .failure(TransportError(.connect, message))
        case 28:
            let stalled = responseDelivered || message.contains("too slow")
            return .failure(TransportError(stalled ? .idleTimeout : .connectTimeout, message))
        case 18, 52, 55, 56, 16, 92, 61: return .failure(TransportError(.connectionLost, message))
        case 8: return .failure(TransportError(.invalidResponse, message))  // CURLE_WEIRD_SERVER_REPLY
        case 35, 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91:
            return .failure(TransportError(.tls, message))
        case 23, 42: return .failure(TransportError(.aborted, message))
        default: return .failure(TransportError(.other, "\(message) (curl \(code))"))
        }
    }
}

private let curlWriteCallback: haul_curl_data_cb = { ptr, size, count, userdata in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.onBody(UnsafeRawBufferPointer(start: ptr, count: size * count))
}

private let curlReadCallback: haul_curl_data_cb = { ptr, size, count, userdata in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.onRead(UnsafeMutableRawBufferPointer(start: ptr, count: size * count))
}

private let curlHeaderCallback: haul_curl_data_cb = { ptr, size, count, userdata in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.onHeaderLine(UnsafeRawBufferPointer(start: ptr, count: size * count))
}
