#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A transport that runs at most `limit` transfers at once against one host (scheme, host,
/// port), for every download, range and upload of a session together; the others wait in
/// order and start as slots free up. Waiting transfers can be paused or cancelled like running
/// ones.
package final class HostLimitedTransport: HTTPTransport {
    private let base: any HTTPTransport
    private let limit: Int
    private let hosts = Locked<[String: (active: Int, waiting: [QueuedTransfer])]>([:])

    package init(_ base: any HTTPTransport, limit: Int) {
        self.base = base
        self.limit = max(1, limit)
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        let host = request.url.originKey
        let transfer = QueuedTransfer { [self] in release(host) }
        let now = hosts.withLock { h -> Bool in
            var entry = h[host] ?? (0, [])
            defer { h[host] = entry }
            guard entry.active < limit else {
                entry.waiting.append(transfer)
                return false
            }
            entry.active += 1
            return true
        }
        transfer.prepare(request, handler: handler, base: base)
        if now { transfer.begin() }
        return transfer
    }

    /// A transfer ended (or was cancelled while waiting): the next waiting one starts.
    private func release(_ host: String) {
        let next = hosts.withLock { h -> QueuedTransfer? in
            guard var entry = h[host] else { return nil }
            defer { h[host] = entry.active == 0 && entry.waiting.isEmpty ? nil : entry }
            while !entry.waiting.isEmpty {
                let candidate = entry.waiting.removeFirst()
                if !candidate.isCancelled { return candidate }
            }
            entry.active -= 1
            return nil
        }
        next?.begin()
    }
}

/// A transfer that may wait for a slot before it reaches the real transport.
private final class QueuedTransfer: TransportTask, Sendable {
    private struct State {
        var task: (any TransportTask)?
        var request: TransportRequest?
        var handler: (any TransportHandler)?
        var base: (any HTTPTransport)?
        var cancelled = false
        var paused = false
        var began = false
    }
    private let state = Locked(State())
    private let done = OneShot<Result<Void, TransportError>>()
    private let onEnd: @Sendable () -> Void

    init(onEnd: @escaping @Sendable () -> Void) { self.onEnd = onEnd }

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    func prepare(_ request: TransportRequest, handler: any TransportHandler, base: any HTTPTransport) {
        state.withLock {
            $0.request = request
            $0.handler = handler
            $0.base = base
        }
    }

    /// Holds a slot from here until the transfer ends.
    func begin() {
        let start = state.withLock { s -> (TransportRequest, any TransportHandler, any HTTPTransport)? in
            s.began = true
            guard !s.cancelled, let r = s.request, let h = s.handler, let b = s.base else { return nil }
            return (r, h, b)
        }
        guard let (request, handler, base) = start else {
            onEnd()
            done.fulfill(.failure(TransportError(.cancelled, "cancelled")))
            return
        }
        let task = base.start(request, handler: handler)
        let (pause, cancel) = state.withLock { s -> (Bool, Bool) in
            s.task = task
            s.request = nil
            s.handler = nil
            return (s.paused, s.cancelled)
        }
        if pause { task.pause() }
        if cancel { task.cancel() }
        task.onFinish { [self] result in
            onEnd()
            done.fulfill(result)
        }
    }

    func pause() {
        let task = state.withLock { s -> (any TransportTask)? in
            s.paused = true
            return s.task
        }
        task?.pause()
    }

    func resume() {
        let task = state.withLock { s -> (any TransportTask)? in
            s.paused = false
            return s.task
        }
        task?.resume()
    }

    func cancel() {
        let (task, waiting) = state.withLock { s -> ((any TransportTask)?, Bool) in
            s.cancelled = true
            return (s.task, !s.began)
        }
        task?.cancel()
        // Still waiting: it ends now; its place in the queue is skipped when reached.
        if waiting { done.fulfill(.failure(TransportError(.cancelled, "cancelled"))) }
    }

    func finished() async -> Result<Void, TransportError> { await done.value() }
    func onFinish(_ body: @escaping @Sendable (Result<Void, TransportError>) -> Void) { done.whenFulfilled(body) }
}

extension URL {
    /// Scheme, host and port (the default port when none is given), lower-cased: the key of the
    /// per-host caps, the manager's on downloads and this transport's on connections.
    package var originKey: String {
        let scheme = self.scheme?.lowercased() ?? ""
        return "\(scheme)://\(host?.lowercased() ?? ""):\(port ?? (scheme == "https" ? 443 : 80))"
    }
}
