import CHaulEvent
import HaulCore

/// A request as the handler sees it, copied out of evhttp's (valid on any thread).
package struct HTTPRequest: Sendable {
    /// `GET`, `POST` or `HEAD` (evhttp refuses others).
    package var method: String
    /// The request target as sent (`/api/v1/downloads?since=3`).
    package var target: String
    /// Its path, percent-encoding left as sent.
    package var path: String
    /// Its query, as sent (after `?`), or "".
    package var query: String
    /// Every header, in order.
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]
    /// The peer's address ("127.0.0.1", "::1"); "" over the Unix socket.
    package var peer: String

    init(_ raw: OpaquePointer) {
        switch haul_evhttp_request_command(raw) {
        case Int32(HAUL_EVHTTP_POST): method = "POST"
        case Int32(HAUL_EVHTTP_HEAD): method = "HEAD"
        default: method = "GET"
        }
        let target = haul_evhttp_request_uri(raw).map { String(cString: $0) } ?? "/"
        self.target = target
        let question = target.utf8.firstIndex(of: UInt8(ascii: "?"))
        path = question.map { String(target[..<$0]) } ?? target
        query = question.map { String(target[target.index(after: $0)...]) } ?? ""
        var collected: [(name: String, value: String)] = []
        withUnsafeMutablePointer(to: &collected) { list in
            haul_evhttp_request_headers(
                raw,
                { name, value, arg in
                    guard let name, let value, let arg else { return }
                    arg.assumingMemoryBound(to: [(name: String, value: String)].self).pointee.append(
                        (String(cString: name), String(cString: value)))
                }, list)
        }
        headers = collected
        var length = 0
        if let bytes = haul_evhttp_request_body(raw, &length), length > 0 {
            body = Array(UnsafeBufferPointer(start: bytes, count: length))
        } else {
            body = []
        }
        var address = [CChar](repeating: 0, count: 64)
        haul_evhttp_request_peer(raw, &address, address.count)
        peer = String(nulTerminated: address)
    }

    package init(
        method: String, target: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
        peer: String = "127.0.0.1"
    ) {
        self.method = method
        self.target = target
        let question = target.firstIndex(of: "?")
        path = question.map { String(target[..<$0]) } ?? target
        query = question.map { String(target[target.index(after: $0)...]) } ?? ""
        self.headers = headers
        self.body = body
        self.peer = peer
    }

    /// The first header called `name` (ASCII case aside).
    package func header(_ name: String) -> String? {
        headers.first { $0.name.utf8.count == name.utf8.count && $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// An answer: status, headers, body.
package struct HTTPReply: Sendable {
    package var status: Int
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]

    package init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// `text` as `text/plain; charset=utf-8`; `closing`: the connection ends after it.
    package static func text(_ status: Int, _ text: String, closing: Bool = false) -> HTTPReply {
        HTTPReply(
            status: status,
            headers: [("Content-Type", "text/plain; charset=utf-8")] + (closing ? [("Connection", "close")] : []),
            body: Array(text.utf8))
    }
}

/// One request's reply, given once from any thread: whole (``reply(_:)``), or as a stream
/// (``start(_:)``, ``send(_:)``, ``end()``). Whatever comes after the caller left, after the
/// end, or after the server stopped, is dropped; ``isOpen`` says which. A stream whose reader
/// lets more than ``HTTPServer/Limits/unsentStreamBytes`` pile up is ended.
package final class HTTPExchange: @unchecked Sendable {
    private enum Phase { case waiting, streaming, done }
    /// Unchecked: the request pointer is only used on the loop's thread.
    private struct State: @unchecked Sendable {
        var phase = Phase.waiting
        /// evhttp's request: valid until the reply ends or the connection closes.
        var request: OpaquePointer?
        var onClose: [@Sendable () -> Void] = []
    }
    private weak var server: HTTPServer?
    private let state: Locked<State>
    private let isHead: Bool
    private let unsentLimit: Int
    /// Exchanges alive in this process (for tests: every path gives its references back).
    static let alive = Locked(0)

    init(server: HTTPServer, request: OpaquePointer, method: String, limits: HTTPServer.Limits) {
        self.server = server
        isHead = method == "HEAD"
        unsentLimit = limits.unsentStreamBytes
        state = Locked(State(request: request))
        Self.alive.withLock { $0 += 1 }
        // The close handler holds one reference until the reply ends or the connection closes.
        haul_evhttp_request_on_close(request, Unmanaged.passRetained(self).toOpaque())
    }

    deinit { Self.alive.withLock { $0 -= 1 } }

    /// Whether the caller is still there and the reply not ended.
    package var isOpen: Bool { state.withLock { $0.request != nil && $0.phase != .done } }

    /// Calls `body` (on the loop's thread) when the caller leaves before the reply ends.
    package func onClose(_ body: @escaping @Sendable () -> Void) {
        state.withLock { $0.onClose.append(body) }
    }

    /// Sends the whole reply (for HEAD, its head with the body's length).
    package func reply(_ response: HTTPReply) {
        server?.onLoop { [self] in
            guard let request = take(from: .waiting) else { return }
            var headers = response.headers
            if isHead { headers.append(("Content-Length", String(response.body.count))) }
            Self.addHeaders(headers, to: request)
            let body = isHead ? [] : response.body
            body.withUnsafeBytes {
                haul_evhttp_send_reply(
                    request, Int32(response.status), HTTPStatus.reason(response.status), $0.baseAddress, $0.count)
            }
        }
    }

    /// Sends the head of a streamed reply (chunked).
    package func start(_ head: HTTPReply) {
        server?.onLoop { [self] in
            let request = state.withLock { s -> OpaquePointer? in
                guard s.phase == .waiting, let r = s.request else { return nil }
                s.phase = .streaming
                return r
            }
            guard let request else { return }
            server?.answered(self)
            Self.addHeaders(head.headers, to: request)
            haul_evhttp_send_reply_start(request, Int32(head.status), HTTPStatus.reason(head.status))
        }
    }

    /// Sends a chunk of a streamed reply.
    package func send(_ bytes: [UInt8]) {
        server?.onLoop { [self] in
            guard let request = state.withLock({ $0.phase == .streaming ? $0.request : nil }), !bytes.isEmpty
            else { return }
            if haul_evhttp_request_unsent(request) + bytes.count > unsentLimit {
                end()  // a reader that does not read: its stream ends, not the daemon's memory
                return
            }
            bytes.withUnsafeBytes { haul_evhttp_send_reply_chunk(request, $0.baseAddress, $0.count) }
        }
    }

    /// On the loop's thread only (a tick, a handler): the bytes of a streamed reply not yet
    /// written to the socket, or nil when the stream is not open.
    func unsentOnLoop() -> Int? {
        guard let request = state.withLock({ $0.phase == .streaming ? $0.request : nil }) else { return nil }
        return haul_evhttp_request_unsent(request)
    }

    /// On the loop's thread only: writes a chunk now (``unsentOnLoop()`` counts it at once), so
    /// a writer can keep what waits for a slow reader bounded.
    func sendOnLoop(_ bytes: ArraySlice<UInt8>) {
        guard let request = state.withLock({ $0.phase == .streaming ? $0.request : nil }), !bytes.isEmpty else {
            return
        }
        bytes.withUnsafeBytes { haul_evhttp_send_reply_chunk(request, $0.baseAddress, $0.count) }
    }

    /// Ends a streamed reply.
    package func end() {
        server?.onLoop { [self] in
            guard let request = take(from: .streaming) else { return }
            haul_evhttp_send_reply_end(request)
        }
    }

    /// The request, if in `phase`, marking the reply ended and giving up the close handler's
    /// reference (the connection may live on for the next request).
    private func take(from phase: Phase) -> OpaquePointer? {
        let request = state.withLock { s -> OpaquePointer? in
            guard s.phase == phase, let r = s.request else { return nil }
            s.phase = .done
            s.request = nil
            return r
        }
        guard let request else { return nil }
        server?.answered(self)
        haul_evhttp_request_on_close(request, nil)
        Unmanaged.passUnretained(self).release()
        return request
    }

    /// The connection closed before the reply ended (called with the close handler's
    /// reference, which the caller releases). A request libevent detached is ours to free.
    func connectionClosed() {
        let (request, callbacks) = state.withLock { s -> (OpaquePointer?, [@Sendable () -> Void]) in
            defer {
                s.request = nil
                s.phase = .done
                s.onClose = []
            }
            return (s.request, s.onClose)
        }
        server?.answered(self)
        if let request { haul_evhttp_request_free_if_detached(request) }
        for callback in callbacks { callback() }
    }

    private static func addHeaders(_ headers: [(name: String, value: String)], to request: OpaquePointer) {
        for (name, value) in headers { _ = haul_evhttp_add_output_header(request, name, value) }
    }
}
