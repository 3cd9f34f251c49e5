import Foundation
import HaulCore

/// A response's status line and headers.
public struct HTTPResponse: Sendable, Equatable {
    /// The status code.
    public var statusCode: Int
    /// Header fields in the order received.
    public var headers: [HTTPField]
    /// The URL that answered (after redirects).
    public var url: URL

    /// One header field.
    public struct HTTPField: Sendable, Equatable {
        /// The field name as sent.
        public var name: String
        /// The field value.
        public var value: String
    }

    /// The first value of a header, compared case-insensitively.
    public func value(forHeader name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// `Content-Length`, when sent.
    public var expectedContentLength: Int64? { value(forHeader: "Content-Length").flatMap { Int64($0) } }

    init(_ r: TransportResponse, url: URL) {
        statusCode = r.status
        headers = r.headers.map { HTTPField(name: $0.name, value: $0.value) }
        self.url = url
    }
}

/// A GET request with extra headers, for ``HaulSession/data(for:maxBytes:)``.
public struct HaulRequest: Sendable {
    /// The URL.
    public var url: URL
    /// Extra headers (on top of the configuration's).
    public var headers: [String: String] = [:]
    /// Creates a request.
    public init(url: URL, headers: [String: String] = [:]) {
        self.url = url
        self.headers = headers
    }
}

/// A response body as an `AsyncSequence` of chunks with back-pressure: when the consumer falls
/// behind by more than the window, the transfer pauses (no socket reads) until it catches up.
/// Iteration throws ``HaulError``.
public struct ByteStream: AsyncSequence, Sendable {
    /// A chunk of the body.
    public typealias Element = Data
    let body: BodyStream
    let url: URL
    let idleTimeout: Double

    /// The iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let body: BodyStream
        let url: URL
        let idleTimeout: Double
        /// The next chunk, nil at the end.
        public mutating func next() async throws -> Data? {
            do { return try await body.next() } catch {
                throw error.haulError(url: url, connectTimeout: idleTimeout, idleTimeout: idleTimeout)
            }
        }
    }

    /// Starts iterating.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: body, url: url, idleTimeout: idleTimeout) }

    /// Stops the transfer.
    public func cancel() { body.cancel() }

    /// Collects the whole body, failing with ``HaulError/Code/responseTooLarge`` past `maxBytes`.
    public func collect(upTo maxBytes: Int) async throws(HaulError) -> Data {
        var data = Data()
        var iterator = makeAsyncIterator()
        do {
            while let chunk = try await iterator.next() {
                if data.count + chunk.count > maxBytes {
                    cancel()
                    throw HaulError(
                        .responseTooLarge, "body of \(ResumeRecord.redacted(url)) exceeds \(maxBytes) bytes")
                }
                data.append(chunk)
            }
        } catch {
            cancel()
            throw error as? HaulError ?? HaulError(.network, "\(error)")
        }
        return data
    }
}

/// Receives a streamed body; every method has a no-op default.
public protocol DataStreamDelegate: AnyObject, Sendable {
    /// The response head arrived.
    func stream(didReceive response: HTTPResponse)
    /// A chunk arrived; the next one is not read until this returns (back-pressure).
    func stream(didReceive data: Data)
    /// The body is complete.
    func streamDidFinish()
    /// The request or the body failed.
    func stream(didFailWith error: HaulError)
}

extension DataStreamDelegate {
    /// Does nothing.
    public func stream(didReceive response: HTTPResponse) {}
    /// Does nothing.
    public func stream(didReceive data: Data) {}
    /// Does nothing.
    public func streamDidFinish() {}
    /// Does nothing.
    public func stream(didFailWith error: HaulError) {}
}

extension HaulSession {
    /// The default cap of ``data(from:maxBytes:)``: 64 MiB.
    public static let defaultMaxDataBytes = 64 << 20

    /// Fetches `url` into memory.
    ///
    /// ```swift
    /// let (data, response) = try await session.data(from: url)
    /// ```
    /// Any status is returned (check ``HTTPResponse/statusCode``); redirects are followed;
    /// transient failures are retried from the start; gzip/deflate bodies are decoded.
    /// - Parameter maxBytes: Fails with ``HaulError/Code/responseTooLarge`` past this many bytes
    ///   (checked against Content-Length before reading).
    public func data(
        from url: URL, maxBytes: Int = HaulSession.defaultMaxDataBytes
    ) async throws(HaulError) -> (
        Data, HTTPResponse
    ) {
        try await data(for: HaulRequest(url: url), maxBytes: maxBytes)
    }

    /// Fetches a request into memory (see ``data(from:maxBytes:)``).
    public func data(
        for request: HaulRequest, maxBytes: Int = HaulSession.defaultMaxDataBytes
    ) async throws(HaulError)
        -> (Data, HTTPResponse)
    {
        var failures = 0
        while true {
            do throws(HaulError) {
                let (response, stream) = try await bytes(for: request, window: min(maxBytes, 4 << 20) + 1)
                if let length = response.expectedContentLength, length > maxBytes {
                    stream.cancel()
                    throw HaulError(
                        .responseTooLarge,
                        "body of \(ResumeRecord.redacted(request.url)) is \(length) bytes, more than \(maxBytes)")
                }
                return (try await stream.collect(upTo: maxBytes), response)
            } catch  where [.network, .timeout].contains(error.code) && !error.message.hasPrefix("cannot resolve") {
                failures += 1
                let policy = retryPolicy
                guard case .retry(let delay) = policy.decide(failures: failures, retryAfter: nil) else { throw error }
                do { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) } catch {
                    throw HaulError(.cancelled, "cancelled")
                }
            }
        }
    }

    /// The completion-handler form of ``data(from:maxBytes:)``; the handler runs on a background thread.
    public func data(
        from url: URL, maxBytes: Int = HaulSession.defaultMaxDataBytes,
        completionHandler: @escaping @Sendable (Result<(Data, HTTPResponse), HaulError>) -> Void
    ) {
        deliver(to: completionHandler) { () throws(HaulError) in try await self.data(from: url, maxBytes: maxBytes) }
    }

    /// Opens `url` and returns its response head and body stream.
    ///
    /// ```swift
    /// let (response, body) = try await session.bytes(from: url)
    /// for try await chunk in body { consume(chunk) }
    /// ```
    /// - Parameter window: Bytes buffered ahead of the consumer before the transfer pauses.
    public func bytes(from url: URL, window: Int = 1 << 20) async throws(HaulError) -> (HTTPResponse, ByteStream) {
        try await bytes(for: HaulRequest(url: url), window: window)
    }

    /// Opens a request (see ``bytes(from:window:)``).
    public func bytes(
        for request: HaulRequest, window: Int = 1 << 20
    ) async throws(HaulError) -> (
        HTTPResponse, ByteStream
    ) {
        let transport = try transport.get()
        var chain = RedirectChain(
            url: request.url, headers: headers(adding: request.headers), maxRedirects: configuration.maxRedirects)
        while true {
            var t = TransportRequest(
                url: chain.current, headers: chain.headers, connectTimeout: configuration.timeout.connect,
                idleTimeout: configuration.timeout.idle, caFile: configuration.trustedCertificatesFile)
            t.decodeContent = true
            let body = BodyStream(window: max(1, window))
            switch await body.start(t, on: transport) {
            case .failure(let error):
                throw haulError(error, chain.current)
            case .success(let response):
                if [301, 302, 303, 307, 308].contains(response.status), let location = response.headers["Location"],
                    let next = URL(string: location, relativeTo: chain.current)?.absoluteURL
                {
                    body.cancel()
                    try chain.follow(to: next)
                    continue
                }
                return (
                    HTTPResponse(response, url: chain.current),
                    ByteStream(body: body, url: chain.current, idleTimeout: configuration.timeout.idle)
                )
            }
        }
    }

    /// Streams `url` to a delegate, one chunk at a time; returns a task you may cancel.
    @discardableResult
    public func stream(from url: URL, delegate: any DataStreamDelegate) -> Task<Void, Never> {
        Task {
            do {
                let (response, body) = try await bytes(from: url, window: 256 << 10)
                delegate.stream(didReceive: response)
                for try await chunk in body { delegate.stream(didReceive: chunk) }
                delegate.streamDidFinish()
            } catch {
                delegate.stream(didFailWith: error as? HaulError ?? HaulError(.network, "\(error)"))
            }
        }
    }

    /// The configuration's headers with `extra` on top (sorted, so requests are reproducible).
    func headers(adding extra: [String: String]) -> HTTPHeaders {
        var headers = HTTPHeaders()
        for (name, value) in configuration.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            headers.add(name, value)
        }
        for (name, value) in extra.sorted(by: { $0.key < $1.key }) { headers.replace(name, value) }
        return headers
    }

    var retryPolicy: RetryPolicy {
        RetryPolicy(
            maxRetries: configuration.retry.maxRetries, baseDelay: configuration.retry.initialDelay,
            maxDelay: configuration.retry.maxDelay, maxRetryAfter: configuration.retry.maxRetryAfter)
    }

    func haulError(_ error: TransportError, _ url: URL) -> HaulError {
        error.haulError(
            url: url, connectTimeout: configuration.timeout.connect, idleTimeout: configuration.timeout.idle)
    }
}
