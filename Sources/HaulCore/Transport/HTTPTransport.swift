#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One HTTP request, as the engine hands it to a transport. The transport never follows
/// redirects and never decodes content unless asked: the engine decides both.
package struct TransportRequest: Sendable {
    package var url: URL
    package var method: String = "GET"
    package var headers: HTTPHeaders = HTTPHeaders()
    /// Seconds to establish the connection (TCP and TLS).
    package var connectTimeout: Double = 30
    /// Seconds without any received byte before the transfer counts as stalled.
    package var idleTimeout: Double = 30
    /// Trust and HTTP version (certificates are verified unless this says otherwise).
    package var connection = ConnectionSettings()
    /// Ask for gzip/deflate and decode it (off for file downloads: the bytes on disk are what was sent).
    package var decodeContent = false
    /// The most bytes per second to receive (the transfer pauses while over budget); nil for no limit.
    package var maxReceiveRate: Int64?
    /// A budget shared with other transfers (an overall limit for a whole run), on top of
    /// `maxReceiveRate`.
    package var sharedRate: RateBudget?
    /// A body to send (uploads), read on demand on the transport's thread.
    package var body: (any RequestBodySource)?
    /// Report what the connection is (``TransportResponse/connection``): HTTP and TLS version,
    /// certificate expiry. For `haul doctor`; the curl transport opens a new connection then
    /// (a reused one had its handshake before) and asks libcurl for the certificate chain.
    package var reportsConnection = false

    package init(url: URL) { self.url = url }

    /// A request with the settings every engine passes along.
    package init(
        url: URL, headers: HTTPHeaders, connectTimeout: Double, idleTimeout: Double, connection: ConnectionSettings
    ) {
        self.url = url
        self.headers = headers
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.connection = connection
    }
}

/// A request body produced on demand, so uploads stream from disk instead of memory.
package protocol RequestBodySource: AnyObject, Sendable {
    /// The total length, when known up front (otherwise the body is sent chunked).
    var length: Int64? { get }
    /// Fills `buffer` with the next bytes; 0 at the end. A thrown error aborts the transfer.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(HaulError) -> Int
    /// Starts again from the first byte, for a retry.
    func rewind() throws(HaulError)
}

/// A response's status and headers.
package struct TransportResponse: Sendable {
    package var status: Int
    package var headers: HTTPHeaders
    package var url: URL
    /// What the connection is, when the request asked (``TransportRequest/reportsConnection``)
    /// and the transport can tell.
    package var connection: ConnectionReport?

    package init(status: Int, headers: HTTPHeaders, url: URL) {
        self.status = status
        self.headers = headers
        self.url = url
    }
}

/// What a transfer's connection is, as its transport saw it.
package struct ConnectionReport: Sendable, Equatable {
    /// "HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/3"; nil when unknown.
    package var httpVersion: String?
    /// The TLS library's name of the protocol ("TLSv1.3"); nil over plain http or when unknown.
    package var tlsVersion: String?
    /// The server certificate's expiry as the TLS library wrote it; nil when not told (plain
    /// http, a reused connection).
    package var certificateExpiry: String?

    package init(httpVersion: String? = nil, tlsVersion: String? = nil, certificateExpiry: String? = nil) {
        self.httpVersion = httpVersion
        self.tlsVersion = tlsVersion
        self.certificateExpiry = certificateExpiry
    }
}

/// What a handler wants after a chunk of body.
package enum BodyDisposition: Sendable {
    /// Keep going.
    case proceed
    /// Stop reading until `TransportTask.resume()`; the chunk is delivered again then.
    case pause
    /// Stop the transfer; it ends with `TransportError.Kind.aborted`.
    case abort
}

/// Receives one transfer's response and body. The transport calls it serially, from one thread.
package protocol TransportHandler: AnyObject, Sendable {
    /// The final (non-1xx) header block arrived. Return false to abort the transfer.
    func transportDidReceive(response: TransportResponse) -> Bool
    /// A chunk of body arrived. The buffer is valid only during the call.
    func transportDidReceive(body: UnsafeRawBufferPointer) -> BodyDisposition
}

/// Why a transfer failed, as far as the transport can tell.
package struct TransportError: Error, Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        case resolve, connect, connectTimeout, idleTimeout, connectionLost, tls, aborted, cancelled, invalidURL
        /// The answer broke HTTP in a way no retry mends (conflicting lengths, a reply that is
        /// not HTTP).
        case invalidResponse
        /// The proxy failed: its name does not resolve, or it refused (SOCKS).
        case proxy
        /// The proxy answered `CONNECT` with this status (407: it wants credentials).
        case proxyStatus(Int)
        case other
    }
    package var kind: Kind
    package var message: String
    package init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
}

/// A running transfer.
package protocol TransportTask: Sendable {
    /// Stops reading from the connection (flow control): no bytes arrive until `resume()`.
    func pause()
    /// Continues a paused transfer at the same point.
    func resume()
    /// Ends the transfer; `finished()` returns `.cancelled`.
    func cancel()
    /// Waits for the end of the transfer.
    func finished() async -> Result<Void, TransportError>
    /// Calls `body` once, when the transfer ends (at once if it has ended), on whichever thread
    /// ends it: for bookkeeping that should not cost a task per transfer.
    func onFinish(_ body: @escaping @Sendable (Result<Void, TransportError>) -> Void)
}

extension TransportTask {
    /// Waits for the end of the transfer; a cancel of the waiting task cancels the transfer.
    package func finishedOrCancelled() async -> Result<Void, TransportError> {
        await withTaskCancellationHandler {
            await finished()
        } onCancel: {
            cancel()
        }
    }
}

extension TransportTask {
    /// A task that awaits ``finished()``, for transports without a cheaper way.
    package func onFinish(_ body: @escaping @Sendable (Result<Void, TransportError>) -> Void) {
        Task.detached { body(await finished()) }
    }
}

/// Sends HTTP requests. Implementations: ``CurlTransport`` (Linux default) and
/// `URLSessionTransport` (module HaulFoundation); both pass the same conformance tests.
package protocol HTTPTransport: Sendable {
    func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask
}

/// A value set once and awaited by any number of tasks.
package final class OneShot<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiters: [CheckedContinuation<Value, Never>] = []
        var observers: [@Sendable (Value) -> Void] = []
    }
    private let state = Locked(State())

    package init() {}

    /// Sets the value (the first call wins), calls the observers and wakes the waiters.
    package func fulfill(_ value: Value) {
        let (waiters, observers) = state.withLock {
            s -> ([CheckedContinuation<Value, Never>], [@Sendable (Value) -> Void]) in
            guard s.value == nil else { return ([], []) }
            s.value = value
            defer { (s.waiters, s.observers) = ([], []) }
            return (s.waiters, s.observers)
        }
        for o in observers { o(value) }
        for w in waiters { w.resume(returning: value) }
    }

    /// Calls `body` with the value once it is set (at once, if it is).
    package func whenFulfilled(_ body: @escaping @Sendable (Value) -> Void) {
        let ready = state.withLock { s -> Value? in
            if let v = s.value { return v }
            s.observers.append(body)
            return nil
        }
        if let ready { body(ready) }
    }

    package var isFulfilled: Bool { state.withLock { $0.value != nil } }

    package func value() async -> Value {
        await withCheckedContinuation { c in
            let ready = state.withLock { s -> Value? in
                if let v = s.value { return v }
                s.waiters.append(c)
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
    }
}

extension TransportError {
    /// The user-facing error for a transport failure talking to `url` (on the way to `origin`,
    /// the URL asked for), marked transient when retrying may help (refused connections,
    /// timeouts, stalls, lost connections).
    package func haulError(url: URL, origin: URL, connectTimeout: Double, idleTimeout: Double) -> HaulError {
        let host = url.host ?? "?"
        var error: HaulError
        switch kind {
        case .resolve: error = HaulError(.network, "cannot resolve host \(host): \(message)")
        case .connect: error = HaulError(.network, "cannot connect to \(host): \(message)")
        case .connectTimeout:
            error = HaulError(.timeout, "no connection to \(host) within \(Seconds.text(connectTimeout)) s")
        case .idleTimeout:
            error = HaulError(.timeout, "no data from \(host) for \(Seconds.text(idleTimeout)) s (stalled)")
        case .connectionLost: error = HaulError(.network, "connection to \(host) lost: \(message)")
        case .tls: error = HaulError(.tlsFailure, "TLS failure with \(host): \(message)")
        case .invalidURL:
            error = HaulError(.invalidURL, "invalid URL \(ResumeRecord.shown(url, origin: origin)): \(message)")
        case .cancelled: error = HaulError(.cancelled, "cancelled")
        case .invalidResponse: error = HaulError(.invalidResponse, "invalid answer from \(host): \(message)")
        case .proxy: error = HaulError(.network, "proxy failed on the way to \(host): \(message)")
        case .proxyStatus(let status):
            error = HaulError(
                .httpStatus,
                "HTTP \(status) \(HTTPStatus.reason(status)) from the proxy, asked for a tunnel to \(host)",
                httpStatus: status)
        case .aborted, .other: error = HaulError(.network, "transfer from \(host) failed: \(message)")
        }
        error.isTransient = [.connect, .connectTimeout, .idleTimeout, .connectionLost].contains(kind)
        return error
    }
}

/// A token bucket shared by several transfers: `take` spends bytes (going into debt by at most
/// one chunk) and says how long to pause while in debt. Its rate can change while transfers
/// draw on it (`haul serve`'s speed limit); with no rate it never asks for a pause. Thread-safe.
package final class RateBudget: Sendable {
    private let state: Locked<(tokens: Double, last: Double?, rate: Double?)>
    /// The longest pause `take` asks for: a transfer asks again after it, so a rate that changes
    /// (or goes) applies within a quarter of a second.
    package static let longestWait = 0.25

    /// A budget of `bytesPerSecond` (nil or 0 or less: no limit until `setRate`).
    package init(bytesPerSecond: Int64?) {
        state = Locked((0, nil, Self.rate(bytesPerSecond)))
    }

    /// Bytes per second; nil when there is no limit.
    package var rate: Double? { state.withLock { $0.rate } }

    /// Changes the rate (nil or 0 or less: no limit); the debt of the old rate is forgiven.
    package func setRate(_ bytesPerSecond: Int64?) {
        state.withLock { $0 = (0, nil, Self.rate(bytesPerSecond)) }
    }

    private static func rate(_ bytesPerSecond: Int64?) -> Double? {
        bytesPerSecond.flatMap { $0 > 0 ? Double($0) : nil }
    }

    /// Spends `count` bytes now, or returns the seconds to wait before trying again.
    package func take(_ count: Int, at now: Double = monotonicSeconds()) -> Double? {
        Self.take(count, from: self, nil, at: now)
    }

    /// Spends `count` bytes from both budgets (either may be nil), or from neither and returns
    /// the seconds to wait before trying again (at most ``longestWait``). Taken one at a time, a
    /// try refused by the second would already be charged to the first, again at every try.
    package static func take(
        _ count: Int, from a: RateBudget?, _ b: RateBudget?, at now: Double = monotonicSeconds()
    )
        -> Double?
    {
        let wait = max(a?.wait(at: now) ?? 0, b?.wait(at: now) ?? 0)
        if wait > 0 { return min(wait, longestWait) }
        a?.spend(count)
        b?.spend(count)
        return nil
    }

    private func spend(_ count: Int) {
        state.withLock { if $0.rate != nil { $0.tokens -= Double(count) } }
    }

    /// Refills for the time passed; the seconds until the debt is paid back (0: none).
    private func wait(at now: Double) -> Double {
        state.withLock { s in
            guard let rate = s.rate else { return 0 }
            s.tokens = min(rate / 4, s.tokens + rate * (now - (s.last ?? now)))
            s.last = now
            return s.tokens < 0 ? -s.tokens / rate : 0
        }
    }
}
