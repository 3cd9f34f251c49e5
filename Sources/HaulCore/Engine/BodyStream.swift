#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A response body as a bounded queue between a transport and one consumer, with real flow
/// control: when more than `window` bytes wait unread, the transport is paused (curl stops
/// reading the socket) until the consumer has drained half of them.
package final class BodyStream: TransportHandler, Sendable {
    private struct State {
        var response: TransportResponse?
        var responseWaiter: CheckedContinuation<Result<TransportResponse, TransportError>, Never>?
        var chunks: [Data] = []
        var head = 0
        var buffered = 0
        var paused = false
        var end: Result<Void, TransportError>?
        var consumer: CheckedContinuation<Void, Never>?
        var wantsBody = true
        var task: (any TransportTask)?
    }

    package let window: Int
    private let state = Locked(State())
    private var task: (any TransportTask)? { state.withLock { $0.task } }

    package init(window: Int) { self.window = window }

    /// Starts `request` on `transport` and waits for the response head (or the failure).
    package func start(
        _ request: TransportRequest, on transport: any HTTPTransport
    ) async -> Result<
        TransportResponse, TransportError
    > {
        let task = transport.start(request, handler: self)
        // A cancel() that came before the task existed stops it now.
        let unwanted = state.withLock { s -> Bool in
            s.task = task
            return !s.wantsBody
        }
        if unwanted { task.cancel() }
        task.onFinish { self.finish($0) }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { c in
                let ready = state.withLock { s -> Result<TransportResponse, TransportError>? in
                    if let r = s.response { return .success(r) }
                    if case .failure(let e)? = s.end { return .failure(e) }
                    if s.end != nil { return .failure(TransportError(.connectionLost, "no response")) }
                    s.responseWaiter = c
                    return nil
                }
                if let ready { c.resume(returning: ready) }
            }
        } onCancel: {
            task.cancel()
        }
    }

    /// Whether the transfer has ended (its answer is all here, or it failed).
    package var hasEnded: Bool { state.withLock { $0.end != nil } }

    /// Stops the transfer (the consumer lost interest).
    package func cancel() {
        state.withLock { $0.wantsBody = false }
        task?.cancel()
    }

    /// The next chunk, nil at the end of the body.
    /// - Throws: `TransportError` when the transfer failed.
    package func next() async throws(TransportError) -> Data? {
        while true {
            if Task.isCancelled {
                cancel()
                throw TransportError(.cancelled, "cancelled")
            }
            enum Step {
                case chunk(Data, resume: Bool)
                case end(Result<Void, TransportError>)
                case wait
            }
            let step = state.withLock { s -> Step in
                if s.head < s.chunks.count {
                    let c = s.chunks[s.head]
                    s.head += 1
                    if s.head > 64 && s.head * 2 > s.chunks.count {
                        s.chunks.removeFirst(s.head)
                        s.head = 0
                    }
                    s.buffered -= c.count
                    var resume = false
                    if s.paused && s.buffered <= window / 2 {
                        s.paused = false
                        resume = true
                    }
                    return .chunk(c, resume: resume)
                }
                if let end = s.end { return .end(end) }
                return .wait
            }
            switch step {
            case .chunk(let data, let resume):
                if resume { task?.resume() }
                return data
            case .end(let result):
                try result.get()
                return nil
            case .wait:
                await withTaskCancellationHandler {
                    await withCheckedContinuation { c in
                        let ready = state.withLock { s -> Bool in
                            if s.head < s.chunks.count || s.end != nil { return true }
                            s.consumer = c
                            return false
                        }
                        if ready { c.resume() }
                    }
                } onCancel: {
                    let c = state.withLock { s -> CheckedContinuation<Void, Never>? in
                        defer { s.consumer = nil }
                        return s.consumer
                    }
                    c?.resume()
                }
            }
        }
    }

    package func transportDidReceive(response: TransportResponse) -> Bool {
        let waiter = state.withLock { s -> CheckedContinuation<Result<TransportResponse, TransportError>, Never>? in
            s.response = response
            defer { s.responseWaiter = nil }
            return s.responseWaiter
        }
        waiter?.resume(returning: .success(response))
        return true
    }

    package func transportDidReceive(body: UnsafeRawBufferPointer) -> BodyDisposition {
        let (disposition, consumer) = state.withLock { s -> (BodyDisposition, CheckedContinuation<Void, Never>?) in
            guard s.wantsBody else { return (.abort, nil) }
            if s.buffered >= window {
                s.paused = true
                return (.pause, nil)  // not consumed: the transport delivers it again on resume
            }
            s.chunks.append(Data(body))
            s.buffered += body.count
            defer { s.consumer = nil }
            return (.proceed, s.consumer)
        }
        consumer?.resume()
        return disposition
    }

    private func finish(_ result: Result<Void, TransportError>) {
        let (waiter, consumer) = state.withLock {
            s -> (
                CheckedContinuation<Result<TransportResponse, TransportError>, Never>?,
                CheckedContinuation<Void, Never>?
            )
            in
            s.end = result
            defer {
                s.responseWaiter = nil
                s.consumer = nil
            }
            return (s.responseWaiter, s.consumer)
        }
        if let waiter {
            switch result {
            case .failure(let e): waiter.resume(returning: .failure(e))
            case .success: waiter.resume(returning: .failure(TransportError(.connectionLost, "no response")))
            }
        }
        consumer?.resume()
    }
}
