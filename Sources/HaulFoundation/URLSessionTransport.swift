import Foundation
import HaulCore

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A transport over Foundation's URLSession: the natural one on Apple platforms.
///
/// On Linux it passes the same conformance tests as ``CurlTransport`` with known limits
/// (docs/transports.md): `pause()` suspends the task, which on swift-corelibs-foundation does not
/// stop the socket; it is slower and uses more CPU; and a custom CA file is not supported.
package final class URLSessionTransport: HTTPTransport, Sendable {
    private let session: URLSession
    private let delegate: Delegate

    package init() {
        let delegate = Delegate()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        self.delegate = delegate
        self.session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        if request.body != nil {
            // Streaming a body needs an InputStream subclass, which swift-corelibs-foundation does
            // not support well; uploads use the curl transport (docs/transports.md).
            return FailedTransportTask(TransportError(.other, "uploads need the curl transport"))
        }
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        // Saturated: Foundation converts it to curl's milliseconds and traps on infinity.
        // 0 or less is no idle timeout, as in the curl transport.
        urlRequest.timeoutInterval =
            request.idleTimeout > 0 ? max(1, Seconds.clamped(request.idleTimeout)) : Seconds.longest
        urlRequest.setValue(HaulVersion.userAgent, forHTTPHeaderField: "User-Agent")
        if !request.decodeContent { urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding") }
        for (name, value) in request.headers {
            // As in the curl transport: refused, not dropped (a dropped If-Range could splice).
            guard HTTPHeaders.problem(name: name, value: value) == nil else {
                return FailedTransportTask(
                    TransportError(.invalidURL, "a request header cannot be sent (a line break or NUL in it)"))
            }
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        let task = session.dataTask(with: urlRequest)
        let transfer = URLSessionTransfer(
            task: task, handler: handler, url: request.url, deliveries: session.delegateQueue)
        delegate.transfers.withLock { $0[task.taskIdentifier] = transfer }
        task.resume()
        return transfer
    }

    private final class Delegate: NSObject, URLSessionDataDelegate, Sendable {
        let transfers = Locked<[Int: URLSessionTransfer]>([:])

        func transfer(_ task: URLSessionTask) -> URLSessionTransfer? {
            transfers.withLock { $0[task.taskIdentifier] }
        }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            // The engine follows redirects itself; hand it the 3xx.
            if let t = transfer(task) { t.deliver(response) }
            completionHandler(nil)
        }

        func urlSession(
            _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
            completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
        ) {
            guard let t = transfer(dataTask), let http = response as? HTTPURLResponse else {
                completionHandler(.cancel)
                return
            }
            completionHandler(t.deliver(http) ? .allow : .cancel)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            transfer(dataTask)?.body(data)
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let t = transfers.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
            t.complete(error)
        }
    }
}

/// One URLSession transfer. Delegate callbacks arrive serially on the session's queue.
private final class URLSessionTransfer: TransportTask, Sendable {
    let task: URLSessionDataTask
    let handler: any TransportHandler
    let url: URL
    /// The serial queue that delivers the body; a resume redelivers the held chunks there too.
    let deliveries: OperationQueue
    let done = OneShot<Result<Void, TransportError>>()
    private struct State {
        var delivered = false
        var aborted = false
        var cancelled = false
        /// Why the answer's framing cannot be trusted (a Content-Length that is not a number).
        var invalid: String?
        /// Chunks held back while the handler has paused, in order.
        var held: Data?
        /// The transfer's end when it came while chunks were held: reported after they are
        /// delivered (a suspended task on Linux keeps receiving, to the end).
        var pendingEnd: Result<Void, TransportError>?
    }
    private let lock = Locked(State())

    init(task: URLSessionDataTask, handler: any TransportHandler, url: URL, deliveries: OperationQueue) {
        self.task = task
        self.handler = handler
        self.url = url
        self.deliveries = deliveries
    }

    @discardableResult
    func deliver(_ response: HTTPURLResponse) -> Bool {
        if lock.withLock({ $0.delivered }) { return true }
        var headers = HTTPHeaders()
        for (k, v) in response.allHeaderFields {
            if let k = k as? String, let v = v as? String { headers.add(k, v) }
        }
        if !headers.contains("Transfer-Encoding"), let problem = headers.contentLengthProblem {
            lock.withLock {
                $0.delivered = true
                $0.invalid = problem
            }
            task.cancel()  // a .cancel disposition alone leaves the task open until its timeout
            return false
        }
        let ok = handler.transportDidReceive(
            response: TransportResponse(status: response.statusCode, headers: headers, url: url))
        lock.withLock {
            $0.delivered = true
            if !ok { $0.aborted = true }
        }
        return ok
    }

    func body(_ data: Data) {
        // While paused, anything URLSession still delivers queues behind the held chunk, in order.
        let skip = lock.withLock { s -> Bool in
            if s.aborted { return true }
            if s.held != nil {
                s.held!.append(data)
                return true
            }
            return false
        }
        if skip { return }
        let disposition = data.withUnsafeBytes { handler.transportDidReceive(body: $0) }
        switch disposition {
        case .proceed: break
        case .pause:
            lock.withLock { $0.held = data }
            suspendTask()
        case .abort:
            lock.withLock { $0.aborted = true }
            task.cancel()
        }
    }

    /// Holds back what arrives from now on (delivered by ``resume()``).
    func pause() {
        lock.withLock { s in if s.held == nil { s.held = Data() } }
        suspendTask()
    }

    /// On Linux pausing holds the chunks here and leaves the task running: there a suspended
    /// task keeps receiving anyway, and a suspend and resume can deliver the body a second time
    /// from byte 0.
    private func suspendTask() {
        #if !os(Linux)
            task.suspend()
        #endif
    }

    /// Redelivers what was held back, then lets the task go on. On the delivery queue: a chunk
    /// URLSession delivers meanwhile (a suspended task on Linux keeps delivering) can then only
    /// come after the held ones; redelivered from the caller's thread, a newer chunk could
    /// reach the handler first when the handler was slow (tested).
    func resume() {
        deliveries.addOperation { [self] in
            let held = lock.withLock { s -> Data? in
                defer { s.held = nil }
                return s.held
            }
            if let held, !held.isEmpty { body(held) }
            let end = lock.withLock { s -> Result<Void, TransportError>?? in
                guard s.held == nil else { return nil }  // the handler paused again
                defer { s.pendingEnd = nil }
                if s.aborted, s.pendingEnd != nil {
                    return .failure(TransportError(.aborted, "aborted by the handler"))
                }
                return .some(s.pendingEnd)
            }
            switch end {
            case .none: break
            case .some(.none):
                #if !os(Linux)
                    task.resume()
                #endif
            case .some(.some(let result)): done.fulfill(result)
            }
        }
    }

    func cancel() {
        let ended = lock.withLock { s -> Bool in
            s.cancelled = true
            defer { s.pendingEnd = nil }
            return s.pendingEnd != nil
        }
        if ended { return done.fulfill(.failure(TransportError(.cancelled, "cancelled"))) }
        task.cancel()
    }

    func finished() async -> Result<Void, TransportError> { await done.value() }
    func onFinish(_ body: @escaping @Sendable (Result<Void, TransportError>) -> Void) { done.whenFulfilled(body) }

    func complete(_ error: (any Error)?) {
        let result = outcome(error)
        let report = lock.withLock { s -> Bool in
            guard s.held != nil, !s.cancelled, !s.aborted, s.invalid == nil else { return true }
            s.pendingEnd = result
            return false
        }
        if report { done.fulfill(result) }
    }

    private func outcome(_ error: (any Error)?) -> Result<Void, TransportError> {
        let s = lock.withLock { $0 }
        if s.cancelled { return .failure(TransportError(.cancelled, "cancelled")) }
        if let invalid = s.invalid { return .failure(TransportError(.invalidResponse, invalid)) }
        if s.aborted { return .failure(TransportError(.aborted, "aborted by the handler")) }
        guard let error else {
            return s.delivered ? .success(()) : .failure(TransportError(.connectionLost, "empty reply from server"))
        }
        let urlError = error as? URLError
        let message = error.localizedDescription
        let kind: TransportError.Kind
        switch urlError?.code {
        case .cannotFindHost?, .dnsLookupFailed?: kind = .resolve
        case .cannotConnectToHost?: kind = .connect
        case .timedOut?: kind = s.delivered ? .idleTimeout : .connectTimeout
        case .networkConnectionLost?, .notConnectedToInternet?, .cannotParseResponse?, .badServerResponse?,
            .zeroByteResource?, .cannotDecodeRawData?, .cannotDecodeContentData?:
            kind = .connectionLost
        case .secureConnectionFailed?, .serverCertificateUntrusted?, .serverCertificateHasBadDate?,
            .serverCertificateHasUnknownRoot?, .serverCertificateNotYetValid?, .clientCertificateRejected?,
            .clientCertificateRequired?:
            kind = .tls
        case .badURL?, .unsupportedURL?: kind = .invalidURL
        case .cancelled?: kind = s.delivered ? .aborted : .cancelled
        // swift-corelibs-foundation reports a body cut short ("transfer closed with N bytes
        // remaining") as an unknown error; after the headers it can only be a lost connection.
        case .unknown? where s.delivered: kind = .connectionLost
        default: kind = .other
        }
        return .failure(TransportError(kind, message))
    }
}
