import CHaulEvent
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An HTTP/1.1 server on libevent's evhttp (dlopen()ed on start), its loop on a thread of its
/// own. The sockets are made by the caller (``Sys/listenTCP(address:port:backlog:)``,
/// ``Sys/listenUnix(path:backlog:)``); evhttp parses and enforces the ``Limits``. Each request
/// goes to the handler on the loop's thread with an ``HTTPExchange``, which replies at once or
/// later from any thread, whole or as a stream.
package final class HTTPServer: @unchecked Sendable {
    /// What evhttp refuses before a handler sees it.
    package struct Limits: Sendable {
        /// Bytes of request line and headers (431/400 past it).
        package var headerBytes = 16 << 10
        /// Bytes of body (413 past it).
        package var bodyBytes = 1 << 20
        /// Seconds a connection may take to send a request, or be idle between two.
        package var timeoutSeconds = 30
        package init() {}
    }

    package typealias Handler = @Sendable (HTTPRequest, HTTPExchange) -> Void

    private let base: OpaquePointer
    private let http: OpaquePointer
    private let handler: Handler
    private let wake: (read: Int32, write: Int32)
    private var wakeEvent: OpaquePointer?
    /// Work for the loop's thread, from any thread.
    private let pending = Locked<[@Sendable () -> Void]>([])
    private let stopped = Locked<Bool>(false)
    private let finished = Locked<Bool>(false)

    /// Starts serving `sockets` (listening, non-blocking; the server closes them when it stops).
    package init(sockets: [Int32], limits: Limits = Limits(), handler: @escaping Handler) throws(ServeError) {
        var reason = [CChar](repeating: 0, count: 512)
        guard haul_event_load(&reason, reason.count) == 0 else {
            throw ServeError(
                .internalError, String(decoding: reason.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            )
        }
        guard let base = haul_event_base_new() else { throw ServeError(.internalError, "libevent: no event base") }
        guard let http = haul_evhttp_new(base) else {
            haul_event_base_free(base)
            throw ServeError(.internalError, "libevent: no HTTP server")
        }
        do throws(Errno) { wake = try Sys.makePipe() } catch {
            haul_evhttp_free(http)
            haul_event_base_free(base)
            throw ServeError(.internalError, "cannot make a pipe: \(error)")
        }
        self.base = base
        self.http = http
        self.handler = handler
        let methods = Int32(HAUL_EVHTTP_GET | HAUL_EVHTTP_POST | HAUL_EVHTTP_HEAD)
        haul_evhttp_set_limits(http, limits.headerBytes, limits.bodyBytes, Int32(limits.timeoutSeconds), methods)
        haul_evhttp_set_close_handler { arg in
            guard let arg else { return }
            Unmanaged<HTTPExchange>.fromOpaque(arg).takeRetainedValue().connectionClosed()
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        haul_evhttp_set_gencb(
            http,
            { request, arg in
                guard let request, let arg else { return }
                Unmanaged<HTTPServer>.fromOpaque(arg).takeUnretainedValue().received(request)
            }, me)
        wakeEvent = haul_event_new_reader(
            base, wake.read,
            { _, _, arg in
                guard let arg else { return }
                Unmanaged<HTTPServer>.fromOpaque(arg).takeUnretainedValue().drain()
            }, me)
        for fd in sockets where haul_evhttp_accept_socket(http, fd) != 0 {
            throw ServeError(.internalError, "libevent cannot serve socket \(fd)")
        }
        let loop = Unmanaged.passRetained(self)
        Sys.startThread(name: "haul-http") {
            let server = loop.takeRetainedValue()
            _ = haul_event_base_dispatch(server.base)
            server.finished.withLock { $0 = true }
        }
    }

    /// Runs `work` on the loop's thread (soon; in order).
    func onLoop(_ work: @escaping @Sendable () -> Void) {
        let first = pending.withLock { queue -> Bool in
            queue.append(work)
            return queue.count == 1
        }
        if first { Sys.poke(wake.write) }
    }

    private func drain() {
        Sys.drain(wake.read)
        let work = pending.withLock { queue -> [@Sendable () -> Void] in
            defer { queue.removeAll() }
            return queue
        }
        for item in work { item() }
    }

    private func received(_ raw: OpaquePointer) {
        let request = HTTPRequest(raw)
        let exchange = HTTPExchange(server: self, request: raw)
        handler(request, exchange)
        drain()  // a reply given at once goes out now
    }

    /// Stops the loop and closes every connection and socket; waits until it has.
    package func stop() {
        guard
            stopped.withLock({ s -> Bool in
                defer { s = true }
                return !s
            })
        else { return }
        onLoop { [self] in _ = haul_event_base_loopbreak(base) }
        while !finished.withLock({ $0 }) { usleep(1000) }
        if let wakeEvent { haul_event_free(wakeEvent) }
        haul_evhttp_free(http)  // closes the connections: their exchanges hear of it
        haul_event_base_free(base)
        Sys.close(wake.read)
        Sys.close(wake.write)
    }
}
