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
        peer = String(decoding: address.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
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

    /// `text` as `text/plain; charset=utf-8`.
    package static func text(_ status: Int, _ text: String) -> HTTPReply {
        HTTPReply(status: status, headers: [("Content-Type", "text/plain; charset=utf-8")], body: Array(text.utf8))
    }
}

/// One request's reply, given once from any thread: whole (``reply(_:)``), or as a stream
/// (``start(_:)``, ``send(_:)``, ``end()``). Whatever comes after the caller left, or after the
/// end, is dropped; ``isOpen`` says which.
package final class HTTPExchange: @unchecked Sendable {
    private enum Phase { case waiting, streaming, done }
    /// Unchecked: the request pointer is only used on the loop's thread.
    private struct State: @unchecked Sendable {
        var phase = Phase.waiting
        /// evhttp's request: valid until the reply ends or the connection closes.
        var request: OpaquePointer?
        var onClose: [@Sendable () -> Void] = []
    }
    private unowned let server: HTTPServer
    private let state: Locked<State>

    init(server: HTTPServer, request: OpaquePointer) {
        self.server = server
        state = Locked(State(request: request))
        // The close handler holds one reference until the reply ends or the connection closes.
        haul_evhttp_request_on_close(request, Unmanaged.passRetained(self).toOpaque())
    }

    /// Whether the caller is still there and the reply not ended.
    package var isOpen: Bool { state.withLock { $0.request != nil && $0.phase != .done } }

    /// Calls `body` (on the loop's thread) when the caller leaves before the reply ends.
    package func onClose(_ body: @escaping @Sendable () -> Void) {
        state.withLock { $0.onClose.append(body) }
    }

    /// Sends the whole reply.
    package func reply(_ response: HTTPReply) {
        server.onLoop { [self] in
            guard let request = take(ending: true, from: .waiting) else { return }
            Self.addHeaders(response.headers, to: request)
            response.body.withUnsafeBytes {
                haul_evhttp_send_reply(
                    request, Int32(response.status), HTTPStatus.reason(response.status), $0.baseAddress, $0.count)
            }
        }
    }

    /// Sends the head of a streamed reply (chunked).
    package func start(_ head: HTTPReply) {
        server.onLoop { [self] in
            let request = state.withLock { s -> OpaquePointer? in
                guard s.phase == .waiting, let r = s.request else { return nil }
                s.phase = .streaming
                return r
            }
            guard let request else { return }
            Self.addHeaders(head.headers, to: request)
            haul_evhttp_send_reply_start(request, Int32(head.status), HTTPStatus.reason(head.status))
        }
    }

    /// Sends a chunk of a streamed reply.
    package func send(_ bytes: [UInt8]) {
        server.onLoop { [self] in
            let request = state.withLock { $0.phase == .streaming ? $0.request : nil }
            guard let request, !bytes.isEmpty else { return }
            bytes.withUnsafeBytes { haul_evhttp_send_reply_chunk(request, $0.baseAddress, $0.count) }
        }
    }

    /// Ends a streamed reply.
    package func end() {
        server.onLoop { [self] in
            guard let request = take(ending: true, from: .streaming) else { return }
            haul_evhttp_send_reply_end(request)
        }
    }

    /// The request, if in `phase`, marking the reply ended and giving up the close handler's
    /// reference (the connection may live on for the next request).
    private func take(ending: Bool, from phase: Phase) -> OpaquePointer? {
        let request = state.withLock { s -> OpaquePointer? in
            guard s.phase == phase, let r = s.request else { return nil }
            s.phase = .done
            s.request = nil
            return r
        }
        guard let request else { return nil }
        haul_evhttp_request_on_close(request, nil)
        Unmanaged.passUnretained(self).release()
        return request
    }

    /// The connection closed before the reply ended (called with the close handler's
    /// reference, which the caller releases).
    func connectionClosed() {
        let callbacks = state.withLock { s -> [@Sendable () -> Void] in
            s.request = nil
            s.phase = .done
            defer { s.onClose = [] }
            return s.onClose
        }
        for callback in callbacks { callback() }
    }

    private static func addHeaders(_ headers: [(name: String, value: String)], to request: OpaquePointer) {
        for (name, value) in headers { _ = haul_evhttp_add_output_header(request, name, value) }
    }
}
