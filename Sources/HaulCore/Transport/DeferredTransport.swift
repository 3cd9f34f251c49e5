/// A transport made at its first transfer rather than with its session: a session (and the
/// command's reading of its arguments, its look at the disk) need not wait the ~9 ms that
/// libcurl and its libraries take to load, which a background load then hides (docs/startup.md).
package final class DeferredTransport: HTTPTransport {
    private let make: @Sendable () -> Result<any HTTPTransport, TransportError>

    /// `make` is called at every transfer's start: it must be cheap once it has succeeded (a
    /// `static let`, as ``CurlTransport/shared``).
    package init(_ make: @escaping @Sendable () -> Result<any HTTPTransport, TransportError>) { self.make = make }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        switch make() {
        case .success(let transport): return transport.start(request, handler: handler)
        case .failure(let error): return FailedTransportTask(error)
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
