import CHaulEvent
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An HTTP/1.1 server on libevent's evhttp (dlopen()ed on start), its loop on a thread of its
/// own. The listening sockets are made by the caller (``Sys/listenTCP(address:port:backlog:)``);
/// evhttp parses and enforces the ``Limits``, and this server refuses what evhttp lets through
/// but a door should not (a target that is not a path, a body on GET or HEAD, two lengths).
/// Each request goes to the handler on the loop's thread with an ``HTTPExchange``, which
/// replies at once or later from any thread, whole or as a stream; one not answered within
/// ``Limits/replySeconds`` gets a 503.
package final class HTTPServer: @unchecked Sendable {
    /// What is refused before a handler sees it, and how long a reply may take.
    package struct Limits: Sendable {
        /// Bytes of request line and headers (400 past it).
        package var headerBytes = 16 << 10
        /// Bytes of body (413 past it).
        package var bodyBytes = 1 << 20
        /// Seconds of silence from a caller while it sends a request, or between two; a stream
        /// must send something (an event stream's comment) more often than this.
        package var timeoutSeconds = 30
        /// Seconds a handler has to give a whole reply or start a stream.
        package var replySeconds: Double = 30
        /// Bytes a stream may have unsent (a reader that does not read) before it is ended.
        package var unsentStreamBytes = 1 << 20
        package init() {}
    }

    package typealias Handler = @Sendable (HTTPRequest, HTTPExchange) -> Void

    private struct Queue {
        var work: [@Sendable () -> Void] = []
        /// The loop has ended and the wake-up pipe is closed: nothing more is taken.
        var closed = false
    }

    /// Unchecked: the pointers are used on the loop's thread only (and after it ended, by it).
    private struct Loop: @unchecked Sendable {
        let base: OpaquePointer
        let http: OpaquePointer
        var events: [OpaquePointer] = []
    }

    private var loop: Loop
    private let handler: Handler
    let limits: Limits
    private let wake: (read: Int32, write: Int32)
    private let queue = Locked(Queue())
    private let stopping = Locked(false)
    private let ended = Locked(false)
    private let loopThread = Locked<pthread_t?>(nil)
    /// Exchanges waiting for their reply, checked once a second against ``Limits/replySeconds``.
    private let waiting = Locked<[ObjectIdentifier: WaitingExchange]>([:])
    private let ticks = Locked<[@Sendable () -> Void]>([])
    private struct WaitingExchange: @unchecked Sendable {
        weak var exchange: HTTPExchange?
        let since: ContinuousClock.Instant
    }

    /// The close handler libevent calls (set once, in the loader).
    private static let onClose: @convention(c) (UnsafeMutableRawPointer?) -> Void = { arg in
        guard let arg else { return }
        Unmanaged<HTTPExchange>.fromOpaque(arg).takeRetainedValue().connectionClosed()
    }

    /// Starts serving `sockets` (listening, non-blocking; closed when the server stops, or
    /// here if it cannot start).
    package init(sockets: [Int32], limits: Limits = Limits(), handler: @escaping Handler) throws(ServeError) {
        var reason = [CChar](repeating: 0, count: 512)
        guard haul_event_load(Self.onClose, &reason, reason.count) == 0 else {
            for fd in sockets { Sys.close(fd) }
            throw ServeError(.internalError, String(nulTerminated: reason))
        }
        guard let base = haul_event_base_new() else {
            for fd in sockets { Sys.close(fd) }
            throw ServeError(.internalError, "libevent: no event base")
        }
        guard let http = haul_evhttp_new(base) else {
            haul_event_base_free(base)
            for fd in sockets { Sys.close(fd) }
            throw ServeError(.internalError, "libevent: no HTTP server")
        }
        loop = Loop(base: base, http: http)
        do throws(Errno) { wake = try Sys.makePipe() } catch {
            haul_evhttp_free(http)
            haul_event_base_free(base)
            for fd in sockets { Sys.close(fd) }
            throw ServeError(.internalError, "cannot make a pipe: \(error)")
        }
        self.handler = handler
        self.limits = limits
        try configure(sockets)
        let me = Unmanaged.passRetained(self)
        Sys.startThread(name: "haul-http") { me.takeRetainedValue().run() }
    }

    private func configure(_ sockets: [Int32]) throws(ServeError) {
        let methods = Int32(HAUL_EVHTTP_GET | HAUL_EVHTTP_POST | HAUL_EVHTTP_HEAD)
        haul_evhttp_set_limits(
            loop.http, limits.headerBytes, limits.bodyBytes, Int32(limits.timeoutSeconds), methods)
        let me = Unmanaged.passUnretained(self).toOpaque()
        haul_evhttp_set_gencb(
            loop.http,
            { request, arg in
                guard let request, let arg else { return }
                Unmanaged<HTTPServer>.fromOpaque(arg).takeUnretainedValue().received(request)
            }, me)
        let reader = haul_event_new_reader(
            loop.base, wake.read,
            { _, _, arg in
                guard let arg else { return }
                Unmanaged<HTTPServer>.fromOpaque(arg).takeUnretainedValue().drain()
            }, me)
        let timer = haul_event_new_timer(
            loop.base, Int32(Self.tickMilliseconds),
            { _, _, arg in
                guard let arg else { return }
                Unmanaged<HTTPServer>.fromOpaque(arg).takeUnretainedValue().tick()
            }, me)
        loop.events = [reader, timer].compactMap { $0 }
        var failed: Int32?
        for fd in sockets where haul_evhttp_accept_socket(loop.http, fd) != 0 { failed = fd }
        if loop.events.count != 2 || failed != nil {
            teardown()
            for fd in sockets { Sys.close(fd) }
            throw ServeError(.internalError, "libevent cannot serve the sockets")
        }
    }

    /// The loop's thread: runs until ``stop()``, then frees everything (closing every
    /// connection: their exchanges hear of it).
    private func run() {
        loopThread.withLock { $0 = pthread_self() }
        _ = haul_event_base_dispatch(loop.base)
        teardown()
        ended.withLock { $0 = true }
    }

    private func teardown() {
        for event in loop.events { haul_event_free(event) }
        loop.events = []
        haul_evhttp_free(loop.http)
        haul_event_base_free(loop.base)
        queue.withLock {
            $0.closed = true
            $0.work = []
        }
        Sys.close(wake.read)
        Sys.close(wake.write)
    }

    /// Runs `work` on the loop's thread (soon; in order); dropped once the loop has ended.
    func onLoop(_ work: @escaping @Sendable () -> Void) {
        queue.withLock { q in
            guard !q.closed else { return }
            q.work.append(work)
            if q.work.count == 1 { Sys.poke(wake.write) }  // under the lock: the pipe is open
        }
    }

    private func drain() {
        let work = queue.withLock { q -> [@Sendable () -> Void] in
            guard !q.closed else { return [] }
            Sys.drain(wake.read)
            defer { q.work.removeAll() }
            return q.work
        }
        for item in work { item() }
    }

    private func received(_ raw: OpaquePointer) {
        let request = HTTPRequest(raw)
        let exchange = HTTPExchange(server: self, request: raw, method: request.method, limits: limits)
        if let refusal = Self.refusal(of: request) {
            exchange.reply(.text(400, refusal + "\n", closing: true))
        } else {
            waiting.withLock { $0[ObjectIdentifier(exchange)] = WaitingExchange(exchange: exchange, since: .now) }
            handler(request, exchange)
        }
        drain()  // a reply given at once goes out now
    }

    /// Why a request that evhttp let through is refused, or nil.
    static func refusal(of request: HTTPRequest) -> String? {
        guard request.target.hasPrefix("/") else { return "the request target must be a path" }
        let lengths = request.headers.filter { $0.name.lowercased() == "content-length" }.count
        let chunked = request.header("Transfer-Encoding") != nil
        if lengths > 1 || (lengths == 1 && chunked) { return "a request with two lengths" }
        if request.method != "POST", (lengths == 1 && request.header("Content-Length") != "0") || chunked {
            return "a \(request.method) request with a body"
        }
        return nil
    }

    /// The exchange has replied (or started its stream, or its caller left).
    func answered(_ exchange: HTTPExchange) {
        _ = waiting.withLock { $0.removeValue(forKey: ObjectIdentifier(exchange)) }
    }

    /// The loop's timer: late replies, then whatever ``onTick(_:)`` asked for.
    static let tickMilliseconds = 250

    private func tick() {
        expireLateReplies()
        for body in ticks.withLock({ $0 }) { body() }
        drain()
    }

    /// Calls `body` on the loop's thread four times a second (the event streams' pace).
    package func onTick(_ body: @escaping @Sendable () -> Void) { ticks.withLock { $0.append(body) } }

    private func expireLateReplies() {
        let now = ContinuousClock.now
        let late = waiting.withLock { w -> [HTTPExchange] in
            w = w.filter { $0.value.exchange != nil }
            return w.values.filter { now - $0.since > .milliseconds(Int64(limits.replySeconds * 1000)) }
                .compactMap(\.exchange)
        }
        for exchange in late { exchange.reply(.text(503, "no reply in time\n")) }
        if !late.isEmpty { drain() }
    }

    /// Stops the loop and closes every connection and socket. From another thread it waits
    /// until that is done; from a handler (the loop's thread) it returns at once, and the loop
    /// ends after the handler.
    package func stop() {
        guard
            stopping.withLock({ s -> Bool in
                defer { s = true }
                return !s
            })
        else { return }
        onLoop { [self] in _ = haul_event_base_loopbreak(loop.base) }
        let onLoopThread = loopThread.withLock { $0.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
        guard !onLoopThread else { return }
        while !ended.withLock({ $0 }) { usleep(1000) }
    }
}
