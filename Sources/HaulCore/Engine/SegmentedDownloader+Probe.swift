#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The probe: one `GET` with a Range that learns the file's size, range support, validators and
/// final URL (and, with `-N`, whether the file in place is the server's), and whose answer may be
/// the first range or the whole file.
extension SegmentedDownloader {
    struct Probe: Sendable {
        var finalURL: URL
        var headers: HTTPHeaders
        /// Whether the probe's redirects went through https (no netrc password over http then).
        var beenOnTLS = false
        var status: Int
        var total: Int64?
        var etag: String?
        var lastModified: String?
        /// The ETag as the answer sent it, weak or strong (kept for revalidation).
        var etagAsSent: String?
        var contentDisposition: String?
        /// The answer says the file asked about is the server's (a 304, or a body of its version).
        var notModified = false
        /// The digests its answer vouched for the whole file with (`Repr-Digest`, RFC 9530).
        var vouched: [Checksum] = []
        /// The whole file, when it was small enough to come with the probe's answer.
        var wholeBody: [UInt8]?
        /// For a larger file, the probe's answer (bytes `[0, heldEnd)`), paused after its head:
        /// the first range, for the first connection to adopt. Cancelled if nobody does.
        var held: (task: any TransportTask, fetch: ProbeFetch)?
        var heldEnd: Int64 = 0

        /// The version its answer named (a weak ETag counts as none).
        var version: RangeAnswer.Version { .init(etag: etag, lastModified: lastModified, total: total) }
    }

    /// Sends the probe, `Range: bytes=0-(limit-1)`, to where `chain` is. Its answer may become
    /// the first range: paced like one.
    private func startProbe(
        _ chain: RedirectChain, limit: Int, asking condition: Condition?
    ) -> (ProbeFetch, any TransportTask) {
        let head = ProbeFetch(limit: limit)
        let request = Self.probeRequest(
            chain, options: options, limit: limit, connections: segmentOptions.connections, asking: condition)
        return (head, transport.start(request, handler: head))
    }

    /// The probe's request to where `chain` is (with its headers: netrc's credentials among
    /// them), asking for the first `limit` bytes; the express way sends the same one.
    static func probeRequest(
        _ chain: RedirectChain, options: EngineOptions, limit: Int, connections: Int, asking condition: Condition?
    ) -> TransportRequest {
        var request = options.request(chain.current, headers: chain.headers, connections: connections)
        request.headers.replace("Range", "bytes=0-\(limit - 1)")
        for (name, value) in condition?.headers ?? [] { request.headers.replace(name, value) }
        return request
    }

    /// A probe answered with neither the file nor a range: one connection goes on, after the
    /// wait a 429 or 503 asks for. That answer is the first of the retries' tries: waited out
    /// here (the server's Retry-After, or the retry policy's delay), and the single engine goes
    /// on counting from it; with no retry left it is the answer. Returns the tries spent.
    private func waitOutBusyAnswer(_ response: TransportResponse, from asked: URL) async throws(HaulError) -> Int {
        guard HTTPStatus.isTransient(response.status) else { return 0 }
        let busy = HaulError.httpStatus(
            response.status, from: ResumeRecord.shown(asked, origin: url), headers: response.headers)
        return try await waitOutFirstFailure(busy)
    }

    /// The probe's try failed with `error`, a transient one: the backoff is waited out (or the
    /// failure thrown, with no retries left) and the try counted.
    private func waitOutFirstFailure(_ error: HaulError) async throws(HaulError) -> Int {
        let delay = try options.retry.delay(after: error, failures: 1)
        onEvent(.retrying(attempt: 1, error: error, delay: delay))
        try? await Task.sleep(nanoseconds: Seconds.nanoseconds(delay))  // a cancel: the engine stops at once
        return 1
    }

    /// After a probe that got no answer: the failure when one connection would end there too
    /// (an answer that broke HTTP, a TLS failure, a name that does not resolve, a refused
    /// connection, which ``DownloadStateMachine`` takes for an answer), else the tries it spent,
    /// as ``waitOutBusyAnswer(_:from:)`` counts them: a lost connection or a timeout is one
    /// failed try, waited out before the next one (or the failure, with no retries left).
    private func waitOutFailedProbe(_ failure: TransportError, at asked: URL) async throws(HaulError) -> Int {
        let error = failure.haulError(
            url: asked, origin: url, connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout)
        switch failure.kind {
        case .invalidResponse, .tls, .resolve, .invalidURL, .connect, .proxy, .proxyStatus: throw error
        case .connectTimeout, .idleTimeout, .connectionLost: return try await waitOutFirstFailure(error)
        case .aborted, .cancelled, .other: return 0
        }
    }

    /// The most a probe keeps: a file this small needs no split, so it arrives in the probe's
    /// answer and that one request is the whole download.
    /// When a partial download of this file is there to resume (`resuming`), its first range is
    /// probably written already: then the probe asks for one byte, so nothing is fetched twice.
    private func probeLimit(resuming: Bool) -> Int {
        resuming ? 1 : Self.probeLimit(minSplit: segmentOptions.minSplit)
    }

    /// Twice the smallest split, at most 8 MiB (a split that large cannot overflow it).
    static func probeLimit(minSplit: Int64) -> Int {
        minSplit >= 4 << 20 ? 8 << 20 : Int(2 * max(1, minSplit))
    }

    /// `GET Range: bytes=0-(limit-1)` (HEAD is often refused or wrong): size, range support,
    /// validators, final URL. A file of at most `probeLimit` bytes comes whole (a 206 for all
    /// of it, or a 200 from a server without ranges) and is kept; for a larger one the transfer
    /// stops after the head. Nil when a larger file cannot be split (no ranges, no size) or
    /// anything is off; the caller then uses one connection. Throws when the answer broke HTTP
    /// (conflicting lengths): one connection would get the same.
    /// With a `condition`, the probe asks about the file in place too: a 304, or an answer of its
    /// version, comes back as a probe that is ``Probe/notModified``.
    func probe(
        resuming: Bool, asking condition: Condition?
    ) async throws(HaulError) -> (
        Probe?, failedTries: Int
    ) {
        let probeLimit = probeLimit(resuming: resuming)
        var chain = RedirectChain(
            url: url, headers: options.headers, maxRedirects: options.maxRedirects, netrc: options.netrc)
        // An answer made ahead (the express way's) is this first probe's, unless the probe is
        // to continue a partial or ask about a file in place: those ask other questions.
        var prefetched: (ProbeFetch, any TransportTask)?
        if resuming || condition != nil { dropPrefetched() } else { prefetched = takePrefetched(limit: probeLimit) }
        while true {
            let (head, task) = prefetched ?? startProbe(chain, limit: probeLimit, asking: condition)
            prefetched = nil
            // Ends with the answer's end, or with its head when a larger file's first range is
            // held for a connection.
            let result = await withTaskCancellationHandler {
                await head.headOrEnd(of: task)
            } onCancel: {
                task.cancel()  // a suspend or Ctrl-C during the probe does not wait for its head
            }
            guard let response = head.response else {
                task.cancel()
                guard case .failure(let failure) = result else { return (nil, 0) }
                return (nil, try await waitOutFailedProbe(failure, at: chain.current))
            }
            if let next = RedirectChain.target(of: response, askedFor: chain.current) {
                task.cancel()
                guard (try? chain.follow(to: next)) != nil else { return (nil, 0) }
                continue
            }
            return try await judge(response, result, of: head, task, at: chain, limit: probeLimit, asking: condition)
        }
    }

    /// What the probe's answer (neither a failure nor a redirect) tells.
    private func judge(
        _ response: TransportResponse, _ result: Result<Void, TransportError>?, of head: ProbeFetch,
        _ task: any TransportTask, at chain: RedirectChain, limit probeLimit: Int, asking condition: Condition?
    ) async throws(HaulError) -> (Probe?, failedTries: Int) {
        // The file is not there for us whatever the Range: the answer, not a second request
        // without Range.
        if [401, 403, 404, 407, 410].contains(response.status) {
            task.cancel()
            throw .httpStatus(response.status, from: ResumeRecord.shown(chain.current, origin: url))
        }
        var probe = Probe(
            finalURL: chain.current, headers: chain.headers, beenOnTLS: chain.beenOnTLS, status: response.status,
            total: nil,
            etag: response.headers.strongETag, lastModified: response.headers.lastModified,
            contentDisposition: response.headers["Content-Disposition"])
        probe.vouched = Checksum.vouched(by: response.headers, status: response.status)
        probe.etagAsSent = response.headers.etag
        if let condition,
            response.status == 304 || condition.unchanged(response.headers, total: Self.total(of: response))
        {
            task.cancel()
            probe.notModified = true
            return (probe, 0)
        }
        if case .success = result, !head.holding, let expected = head.expected, head.body.count == expected {
            probe.total = expected
            probe.wholeBody = head.body
            return (probe, 0)
        }
        guard response.status == 206,
            let range = response.headers["Content-Range"].flatMap(HTTPParsing.contentRange),
            range.start == 0, let total = range.total
        else {
            task.cancel()
            return (nil, try await waitOutBusyAnswer(response, from: chain.current))
        }
        probe.total = total
        if head.holding {
            probe.held = (task, head)
            probe.heldEnd = Int64(probeLimit)
        }
        return (probe, 0)
    }

    /// The length of the whole file an answer with a body tells: a 206's Content-Range total, a
    /// 200's Content-Length.
    private static func total(of response: TransportResponse) -> Int64? {
        switch response.status {
        case 206: response.headers["Content-Range"].flatMap(HTTPParsing.contentRange)?.total
        case 200: response.headers.contentLength
        default: nil
        }
    }
}

/// The probe's handler: keeps the body of a small, complete answer; holds a larger file's
/// first range (paused after the head) for a connection to adopt; otherwise stops after the head.
/// Unchecked Sendable: its vars are written on the transport's thread before the head (or the
/// end) is signalled through `head`, and read by the prober after it.
final class ProbeFetch: TransportHandler, @unchecked Sendable {
    let limit: Int
    var response: TransportResponse?
    var body: [UInt8] = []
    /// The body's length, when it is kept.
    var expected: Int64?
    /// A larger file's first `limit` bytes, waiting for ``adopt(_:)``.
    var holding = false
    private let head = OneShot<Void>()
    private let target = Locked<(any TransportHandler)?>(nil)

    init(limit: Int) { self.limit = limit }

    /// Waits for the end of the answer, or only for its head when it is held (then nil).
    func headOrEnd(of task: any TransportTask) async -> Result<Void, TransportError>? {
        await withCheckedContinuation { c in onHeadOrEnd(of: task) { c.resume(returning: $0) } }
    }

    /// Calls `body` once: with nil when a larger file's first range is held (the transfer goes
    /// on, paused, for a connection to adopt), else with the transfer's end.
    func onHeadOrEnd(of task: any TransportTask, _ body: @escaping @Sendable (Result<Void, TransportError>?) -> Void) {
        let called = Locked(false)
        let once: @Sendable (Result<Void, TransportError>?) -> Void = { result in
            let first = called.withLock { c -> Bool in
                defer { c = true }
                return !c
            }
            if first { body(result) }
        }
        head.whenFulfilled { [self] _ in if holding { once(nil) } }
        task.onFinish { [head] result in
            once(result)
            head.fulfill(())  // lets go of the observer above (and what it holds)
        }
    }

    /// From now on the body goes to `handler` (a range fetch), from the first byte.
    func adopt(_ handler: any TransportHandler) { target.set(handler) }

    func transportDidReceive(response: TransportResponse) -> Bool {
        // Only a held answer wakes the waiter at its head; otherwise the end does (one wake-up
        // for a small file instead of two).
        self.response = response
        let length: Int64
        switch ProbeAnswer.judge(status: response.status, headers: response.headers, limit: limit) {
        case .whole(let all): length = all
        case .firstRange:
            holding = true
            head.fulfill(())
            return true
        case .nothingToKeep: return false
        }
        expected = length
        body.reserveCapacity(Int(length))
        return true
    }

    func transportDidReceive(body chunk: UnsafeRawBufferPointer) -> BodyDisposition {
        if holding {
            guard let target = target.get() else { return .pause }  // delivered again on resume
            return target.transportDidReceive(body: chunk)
        }
        guard body.count + chunk.count <= limit else { return .abort }
        body.append(contentsOf: chunk)
        return .proceed
    }
}
