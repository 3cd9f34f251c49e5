/// A transport made when first needed rather than with its session: making a session does not
/// wait the ~9 ms that libcurl and its libraries take to load (docs/startup.md). The session
/// calls ``resolve()`` before it touches the disk, so that a transport that cannot load fails a
/// download before anything is created or removed.
package final class DeferredTransport: HTTPTransport {
    private let make: @Sendable () -> Result<any HTTPTransport, HaulError>
    /// The transport once made (made once: a URLSession transport is a URLSession).
    private let made = Locked<(any HTTPTransport)?>(nil)

    package init(_ make: @escaping @Sendable () -> Result<any HTTPTransport, HaulError>) { self.make = make }

    /// The transport, made on the first call (later callers wait for that one); a failure is
    /// tried again at the next call.
    package func resolve() -> Result<any HTTPTransport, HaulError> {
        made.withLock { made in
            if let made { return .success(made) }
            let result = make()
            if case .success(let transport) = result { made = transport }
            return result
        }
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        switch resolve() {
        case .success(let transport): return transport.start(request, handler: handler)
        case .failure(let error): return FailedTransportTask(TransportError(.other, error.message))
        }
    }
}

/// A transfer that failed before it began (a transport that could not load, a request it cannot
/// make).
package final class FailedTransportTask: TransportTask {
    private let error: TransportError
    package init(_ error: TransportError) { self.error = error }
    package func pause() {}
    package func resume() {}
    package func cancel() {}
    package func finished() async -> Result<Void, TransportError> { .failure(error) }
    package func onFinish(_ body: @escaping @Sendable (Result<Void, TransportError>) -> Void) { body(.failure(error)) }
}
