import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A response body as an `AsyncSequence` of chunks with back-pressure: when the consumer falls
/// behind by more than the window, the transfer pauses (no socket reads) until it catches up.
/// Iteration throws ``HaulError``.
///
/// A connection that drops or stalls mid-body is continued where it broke, as downloads are:
/// after the retry policy's delay, a `Range` request for the next byte with `If-Range` naming the
/// first answer's validator. The stream never yields bytes of another version: if the file
/// changed on the server it ends with ``HaulError/Code/serverChangedFile``. A body without a
/// validator (no strong ETag, no Last-Modified), a compressed body, or the answer to a request
/// that set its own `Range` is not continued: the drop ends the stream with its error.
public struct ByteStream: AsyncSequence, Sendable {
    /// A chunk of the body.
    public typealias Element = Data
    let source: ResumingBody

    /// The iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: ResumingBody
        /// The next chunk, nil at the end.
        public mutating func next() async throws -> Data? { try await source.next() }
    }

    /// Starts iterating.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(source: source) }

    /// Stops the transfer.
    public func cancel() { source.cancel() }

    /// Collects the whole body, failing with ``HaulError/Code/responseTooLarge`` past `maxBytes`.
    public func collect(upTo maxBytes: Int) async throws(HaulError) -> Data {
        var data = Data()
        var iterator = makeAsyncIterator()
        do {
            while let chunk = try await iterator.next() {
                if data.count + chunk.count > maxBytes {
                    cancel()
                    throw HaulError(
                        .responseTooLarge, "body of \(source.shownURL) exceeds \(maxBytes) bytes")
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
    /// transient failures are retried (a body that drops midway is continued with `Range` and
    /// `If-Range` when it can be, else fetched again); gzip/deflate bodies are decoded.
    /// - Parameters:
    ///   - url: The http or https URL to fetch.
    ///   - maxBytes: Fails with ``HaulError/Code/responseTooLarge`` past this many bytes
    ///     (checked against Content-Length before reading).
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
        let fetched = try await withinResourceTimeout("fetch of \(ResumeRecord.redacted(request.url))") {
            [self] () throws(HaulError) in
            let (data, response) = try await cachedFetch(request, maxBytes: maxBytes)
            return FetchedData(data: data, response: response)
        }
        return (fetched.data, fetched.response)
    }

    private struct FetchedData: Sendable {
        var data: Data
        var response: HTTPResponse
    }

    /// Fetches `request` (with `extraHeaders` on top), retrying from the start.
    func fetch(
        _ request: HaulRequest, maxBytes: Int, extraHeaders: [(String, String)] = []
    ) async throws(HaulError) -> (Data, HTTPResponse) {
        var budget = RetryBudget(retryPolicy)
        while true {
            // A body the stream continues after drops has had its retries when it fails.
            var retriedWithin = false
            do throws(HaulError) {
                let (response, stream) = try await bytes(
                    for: request, window: min(maxBytes, 4 << 20) + 1, extraHeaders: extraHeaders)
                retriedWithin = stream.source.continuesAfterDrops
                if let length = response.expectedContentLength, length > maxBytes {
                    stream.cancel()
                    throw HaulError(
                        .responseTooLarge,
                        "body of \(ResumeRecord.redacted(request.url)) is \(length) bytes, more than \(maxBytes)")
                }
                return (try await stream.collect(upTo: maxBytes), response)
            } catch
                where [.network, .timeout].contains(error.code) && !retriedWithin
                && !error.message.hasPrefix("cannot resolve")
            {
                // Each try starts from the first byte: no progress carries over.
                let (_, delay) = try budget.failed(error)
                do { try await Task.sleep(nanoseconds: Seconds.nanoseconds(delay)) } catch {
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
    /// - Parameters:
    ///   - url: The http or https URL to open.
    ///   - window: Bytes buffered ahead of the consumer before the transfer pauses.
    public func bytes(from url: URL, window: Int = 1 << 20) async throws(HaulError) -> (HTTPResponse, ByteStream) {
        try await bytes(for: HaulRequest(url: url), window: window)
    }

    /// Opens a request (see ``bytes(from:window:)``).
    public func bytes(
        for request: HaulRequest, window: Int = 1 << 20
    ) async throws(HaulError) -> (
        HTTPResponse, ByteStream
    ) {
        try await bytes(for: request, window: window, extraHeaders: [])
    }

    func bytes(
        for request: HaulRequest, window: Int, extraHeaders: [(String, String)]
    ) async throws(HaulError) -> (HTTPResponse, ByteStream) {
        let (response, body, url) = try await open(
            request, extraHeaders: extraHeaders, decodeContent: request.decodesContent, window: window)
        let source = ResumingBody(
            session: self, request: request, first: response, url: url, body: body, window: window)
        return (HTTPResponse(response, url: url), ByteStream(source: source))
    }

    /// Sends `request` (with `extraHeaders` on top), following redirects; returns the answer's
    /// head, its body and the URL that gave it.
    func open(
        _ request: HaulRequest, extraHeaders: [(String, String)], decodeContent: Bool, window: Int
    ) async throws(HaulError) -> (TransportResponse, BodyStream, URL) {
        let transport = try readyTransport()
        var chain = RedirectChain(
            url: request.url, headers: try headers(adding: request.headers, for: request.url),
            maxRedirects: configuration.maxRedirects, netrc: netrc)
        while true {
            var headers = chain.headers
            for (name, value) in extraHeaders { headers.replace(name, value) }
            var t = TransportRequest(
                url: chain.current, headers: headers, connectTimeout: configuration.timeout.connect,
                idleTimeout: configuration.timeout.idle, connection: configuration.connectionSettings)
            t.decodeContent = decodeContent
            let body = BodyStream(window: max(1, window))
            switch await body.start(t, on: transport) {
            case .failure(let error):
                throw haulError(error, chain.current, origin: request.url)
            case .success(let response):
                if let next = RedirectChain.target(of: response, askedFor: chain.current) {
                    body.cancel()
                    try chain.follow(to: next)
                    continue
                }
                return (response, body, chain.current)
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

    /// The headers of a request for `url`: the configuration's, `extra` on top (sorted, so
    /// requests are reproducible), and the session's ``HaulConfiguration/credential`` unless the
    /// request has its own (an `Authorization` header, or a user name in the URL). A header that
    /// cannot be sent as given (a name that is no token, a line break in a value) is a
    /// ``HaulError/Code/usage`` error before any request, never dropped silently.
    func headers(adding extra: [String: String], for url: URL) throws(HaulError) -> HTTPHeaders {
        var headers = HTTPHeaders()
        for (name, value) in configuration.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            headers.add(name, value)
        }
        for (name, value) in extra.sorted(by: { $0.key < $1.key }) { headers.replace(name, value) }
        for (name, value) in headers {
            if let problem = HTTPHeaders.problem(name: name, value: value) { throw HaulError(.usage, problem) }
        }
        if let credential = configuration.credential, url.user == nil, !headers.contains("Authorization") {
            headers.add(
                "Authorization", BasicCredential(user: credential.user, password: credential.password).authorization)
        }
        return headers
    }

    var retryPolicy: RetryPolicy {
        RetryPolicy(
            maxRetries: configuration.retry.maxRetries, baseDelay: configuration.retry.initialDelay,
            maxDelay: configuration.retry.maxDelay, maxRetryAfter: configuration.retry.maxRetryAfter)
    }

    /// The user-facing error for a transport failure talking to `url`, on the way to `origin`.
    func haulError(_ error: TransportError, _ url: URL, origin: URL) -> HaulError {
        error.haulError(
            url: url, origin: origin, connectTimeout: configuration.timeout.connect,
            idleTimeout: configuration.timeout.idle)
    }
}

/// The body behind a ``ByteStream``: one answer's bytes, continued after a drop by a `Range` +
/// `If-Range` request whose answer the download engine's ``ResumeStateMachine`` judges. Read by
/// one consumer at a time; ``cancel()`` may come from anywhere.
/// Unchecked Sendable: its vars are the one consumer's; ``cancel()`` touches only `shared`, locked.
final class ResumingBody: @unchecked Sendable {
    private let session: HaulSession
    private let request: HaulRequest
    private let window: Int
    /// The URL of the first answer.
    let url: URL
    /// How messages name it (``ResumeRecord/shown(_:origin:)``: a redirect target without its query).
    var shownURL: String { ResumeRecord.shown(url, origin: request.url) }
    /// What was delivered, as a record of the first answer's version; nil when the body cannot
    /// be continued.
    private var machine: DownloadStateMachine?
    private var delivered: Int64 = 0
    /// Bytes still to drop from an answer that started again from byte 0 (the same version, from
    /// a server that ignores ranges).
    private var skip: Int64 = 0
    private var ended = false
    private let shared: Locked<(body: BodyStream, cancelled: Bool, wake: OneShot<Void>?)>

    init(session: HaulSession, request: HaulRequest, first: TransportResponse, url: URL, body: BodyStream, window: Int)
    {
        self.session = session
        self.request = request
        self.window = window
        self.url = url
        shared = Locked((body, false, nil))
        let h = first.headers
        let etag = h.strongETag
        let lastModified = h.lastModified
        let encoding = h["Content-Encoding"]?.trimmingASCIIWhitespace().lowercased() ?? "identity"
        // Decoded bodies cannot be continued midway: ranges count the encoded bytes.
        let continuable =
            first.status == 200 && !request.headers.keys.contains { $0.lowercased() == "range" }
            && (encoding == "identity" || !request.decodesContent) && h["Accept-Ranges"]?.lowercased() != "none"
            && (etag != nil || lastModified != nil)
        if continuable {
            // Its head rules and its retries; a stream is never restarted (it cannot take back
            // what it yielded) and has no partial to checkpoint.
            machine = DownloadStateMachine(
                record: ResumeRecord(
                    url: ResumeRecord.redacted(request.url), finalURL: ResumeRecord.location(url), etag: etag,
                    lastModified: lastModified, totalLength: h.contentLength), origin: request.url,
                retry: session.retryPolicy, maxRestarts: 0, checkpointInterval: .infinity, notes: NotePolicy())
        }
    }

    /// Whether a drop is followed by a request for the rest (else it ends the stream).
    var continuesAfterDrops: Bool { machine != nil }

    func cancel() {
        let (body, wake) = shared.withLock { s -> (BodyStream, OneShot<Void>?) in
            s.cancelled = true
            return (s.body, s.wake)
        }
        body.cancel()
        wake?.fulfill(())
    }

    func next() async throws(HaulError) -> Data? {
        while !ended {
            let body = shared.withLock { $0.body }
            do {
                guard var chunk = try await body.next() else {
                    ended = true
                    return nil
                }
                if skip > 0 {
                    let dropped = min(skip, Int64(chunk.count))
                    chunk.removeFirst(Int(dropped))
                    skip -= dropped
                    if chunk.isEmpty { continue }
                }
                delivered += Int64(chunk.count)
                machine?.resume.advance(to: delivered)
                return chunk
            } catch {
                let failure = session.haulError(error, url, origin: request.url)
                guard failure.isTransient, machine != nil else { throw failure }
                try await continueAfter(failure)
            }
        }
        return nil
    }

    /// Waits out the retry policy and asks for the rest, until an answer continues the body or
    /// the policy gives up (then `failure`, or the last error, is thrown).
    private func continueAfter(_ failure: HaulError) async throws(HaulError) {
        var last = failure
        while true {
            guard var decisions = machine else { throw last }
            let next = decisions.attemptEnded(
                .failed(last, transient: true, reached: delivered, connectRefused: false), received: true)
            machine = decisions
            switch next {
            case .retry(_, let delay, _): try await pause(delay)
            case .fail(let error): throw error
            case .askAgain, .restart: throw last
            }
            do throws(HaulError) {
                try await reopen()
                return
            } catch  where error.isTransient {
                last = error
            }
        }
    }

    private func reopen() async throws(HaulError) {
        guard let machine else { return }
        let (response, body, answered) = try await session.open(
            request, extraHeaders: machine.resume.resumeHeaders(), decodeContent: false, window: window)
        let offset = delivered
        var accepted = false
        defer { if !accepted { body.cancel() } }
        switch machine.resume.responseReceived(status: response.status, headers: response.headers, url: answered) {
        case .write(let start, let startsOver, let seen):
            if startsOver {
                // A 200: the range was ignored, or If-Range found another version.
                guard let record = machine.resume.record,
                    RangeAnswer.isSameVersion(
                        record.fileVersion,
                        RangeAnswer.Version(etag: seen.etag, lastModified: seen.lastModified, total: seen.totalLength))
                else {
                    throw HaulError(
                        .serverChangedFile,
                        "\(shownURL) changed on the server after \(offset) bytes were streamed")
                }
                skip = offset
            } else if start != offset {
                throw HaulError(.invalidResponse, "server continued at byte \(start), asked for \(offset)")
            }
        case .alreadyComplete:
            ended = true
        case .notModified:  // a stream sends no condition
            throw HaulError(.invalidResponse, "unexpected 304 Not Modified from \(shownURL)")
        case .restart(let reason):
            throw HaulError(.serverChangedFile, "cannot continue \(shownURL): \(reason)")
        case .retry(var error):
            error.isTransient = true
            throw error
        case .fail(let error):
            throw error
        case .redirect(let next):
            throw HaulError(.invalidResponse, "unexpected redirect to \(ResumeRecord.shown(next, origin: request.url))")
        }
        accepted = true
        let cancelled = shared.withLock { s -> Bool in
            if !s.cancelled { s.body = body }
            return s.cancelled
        }
        if cancelled {
            body.cancel()
            throw HaulError(.cancelled, "cancelled")
        }
    }

    /// Sleeps `seconds`, ending early (with `cancelled`) when the stream or its task is cancelled.
    private func pause(_ seconds: Double) async throws(HaulError) {
        let wake = OneShot<Void>()
        let cancelled = shared.withLock { s -> Bool in
            s.wake = wake
            return s.cancelled
        }
        if !cancelled {
            let timer = Task {
                try? await Task.sleep(nanoseconds: Seconds.nanoseconds(seconds))
                wake.fulfill(())
            }
            await withTaskCancellationHandler {
                await wake.value()
            } onCancel: {
                wake.fulfill(())
            }
            timer.cancel()
        }
        if Task.isCancelled || shared.withLock({ $0.cancelled }) { throw HaulError(.cancelled, "cancelled") }
    }
}
