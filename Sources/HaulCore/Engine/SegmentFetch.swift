#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One range request: validates the 206 and writes its bytes at their offsets.
/// Unchecked Sendable: its vars are the transport thread's while the request runs and its
/// worker's after `finished()`; what the watchdog and the other connections read is locked.
final class SegmentFetch: TransportHandler, @unchecked Sendable {
    let run: SegmentedRun
    let segment: SegmentPlanner.Segment
    var cursor: Int64
    var wrote: Int64 = 0
    var failure: HaulError?
    var reachedEnd = false
    var requestedEnd: Int64 = 0
    /// Where the current request went, and with which headers.
    private var asking: (url: URL, headers: HTTPHeaders, beenOnTLS: Bool)?
    /// The answer was a redirect to this URL.
    private var redirect: URL?
    /// The answer refused a redirect's target (401, 403, 404, 410): an expired signed link.
    private var refused = false
    /// The response head arrived (the transfer is on the wire, not queued for a slot).
    private let answer = Locked<Double?>(nil)
    var answered: Bool { answer.get() != nil }
    /// When the response head arrived (monotonic seconds).
    var answeredAt: Double? { answer.get() }
    /// A 206 for the range was accepted: its bytes flow.
    private let accepted = Locked(false)
    var flowing: Bool { accepted.get() }
    /// When its last bytes were written (monotonic seconds).
    private let lastByte = Locked<Double?>(nil)
    var lastByteAt: Double? { lastByte.get() }

    /// Set by the watchdog; the transfer is cancelled and the range asked again elsewhere.
    private let replacement = Locked<(reason: String?, task: (any TransportTask)?, settled: Bool)>((nil, nil, false))
    var replaced: Bool { replacement.withLock { $0.reason != nil } }
    /// Another connection completed this range (a hedge): this one stopped, its part done.
    var settled: Bool { replacement.withLock { $0.settled } }

    /// Stops the transfer because another connection wrote the rest of the range.
    func settle() {
        let task = replacement.withLock { r -> (any TransportTask)? in
            guard !r.settled else { return nil }
            r.settled = true
            return r.task
        }
        task?.cancel()
    }

    func replace(because reason: String) {
        let task = replacement.withLock { r -> (any TransportTask)? in
            guard r.reason == nil else { return nil }
            r.reason = reason
            return r.task
        }
        task?.cancel()
    }

    init(run: SegmentedRun, segment: SegmentPlanner.Segment) {
        self.run = run
        self.segment = segment
        cursor = segment.cursor
    }

    /// Fetches the rest of the segment: with `held`, by continuing the probe's answer (already
    /// validated, ending at `held.end`); otherwise with its own range request.
    ///
    /// A range answer may redirect (followed, as the probe's were). When the probe was redirected
    /// and its final URL now refuses the range (401, 403, 404 or 410: a storage service's signed
    /// link has expired, as GitHub's release downloads' do after minutes), the range is asked of
    /// the original URL once more, whose redirect signs a fresh link; the answer is checked
    /// against the probe's validators as any other, so another file is never written in.
    func perform(adopting held: (task: any TransportTask, end: Int64)? = nil) async -> Result<Void, HaulError> {
        if let held {
            // requestedEnd was set by SegmentedRun.adopt, before the answer's bytes flowed.
            answer.set(monotonicSeconds())  // the probe's head arrived just before
            accepted.set(true)
            return await finish(held.task)
        }
        let location = run.location
        var chain = RedirectChain(
            url: location.url, headers: location.headers, maxRedirects: run.options.maxRedirects,
            netrc: run.options.netrc, beenOnTLS: location.beenOnTLS)
        var signedAgain = false
        while true {
            let end = run.end(of: segment.id)
            guard cursor < end, !settled else { return .success(()) }
            requestedEnd = end
            (redirect, refused, failure) = (nil, false, nil)
            asking = (chain.current, chain.headers, chain.beenOnTLS)
            let result = await finish(start(chain.current, headers: chain.headers, end: end))
            if let next = redirect {
                do throws(HaulError) { try chain.follow(to: next) } catch { return .failure(error) }
                continue
            }
            if refused && !signedAgain && !replaced && !Task.isCancelled {
                signedAgain = true
                chain = RedirectChain(
                    url: run.origin, headers: run.options.headers, maxRedirects: run.options.maxRedirects,
                    netrc: run.options.netrc)
                continue
            }
            return result
        }
    }

    private func start(_ url: URL, headers: HTTPHeaders, end: Int64) -> any TransportTask {
        // The download's limit is shared by its connections.
        var request = run.options.request(url, headers: headers, connections: run.connections)
        request.headers.replace("Range", "bytes=\(cursor)-\(end - 1)")
        if let etag = run.probe.etag {
            request.headers.replace("If-Range", etag)
        } else if let lastModified = run.probe.lastModified {
            request.headers.replace("If-Range", lastModified)
        }
        return run.transport.start(request, handler: self)
    }

    private func finish(_ task: any TransportTask) async -> Result<Void, HaulError> {
        let replacedEarly = replacement.withLock { r -> Bool in
            r.task = task
            return r.reason != nil || r.settled
        }
        if replacedEarly { task.cancel() }
        let result = await task.finishedOrCancelled()
        if settled { return .success(()) }
        if let failure { return .failure(failure) }
        if reachedEnd { return .success(()) }
        if let reason = replacement.withLock({ $0.reason }) {
            var e = HaulError(.network, reason)
            e.isTransient = true
            return .failure(e)
        }
        switch result {
        case .success:
            if cursor < run.end(of: segment.id) {
                var e = HaulError(
                    .incompleteBody, "range of \(ResumeRecord.redacted(run.origin)) ended early at \(cursor)")
                e.isTransient = true
                return .failure(e)
            }
            return .success(())
        case .failure(let error):
            if error.kind == .cancelled { return .failure(HaulError(.cancelled, "cancelled")) }
            return .failure(
                error.haulError(
                    url: asking?.url ?? run.origin, origin: run.origin, connectTimeout: run.options.connectTimeout,
                    idleTimeout: run.options.idleTimeout))
        }
    }

    func transportDidReceive(response: TransportResponse) -> Bool {
        answer.set(monotonicSeconds())
        var problem: String?
        if let asking, let next = RedirectChain.target(of: response, askedFor: asking.url) {
            redirect = next
            return false
        }
        if response.status == 200 {
            problem = "server sent the whole file for a range request"
        } else if response.status != 206 {
            if HTTPStatus.isTransient(response.status) {
                failure = HaulError(
                    .httpStatus, "HTTP \(response.status) \(HTTPStatus.reason(response.status)) for a range",
                    httpStatus: response.status,
                    retryAfter: response.headers["Retry-After"].flatMap { HTTPParsing.retryAfter($0) })
                failure!.isTransient = true
                return false
            }
            let from = asking?.url ?? run.origin
            failure = .httpStatus(response.status, from: ResumeRecord.shown(from, origin: run.origin))
            refused =
                [401, 403, 404, 410].contains(response.status) && run.redirected
                && from.absoluteString != run.origin.absoluteString
            return false
        } else if case .mismatch(let reason) = RangeAnswer.check(
            response.headers, from: cursor,
            of: run.probe.version,
            totalRequired: true)
        {
            problem = reason
        }
        if let problem {
            failure = HaulError(.serverChangedFile, problem)
            return false
        }
        if let asking { run.moved(to: asking.url, headers: asking.headers, beenOnTLS: asking.beenOnTLS) }
        accepted.set(true)
        return true
    }

    func transportDidReceive(body: UnsafeRawBufferPointer) -> BodyDisposition {
        let end = run.end(of: segment.id)  // may have shrunk: another connection took the rest
        let take = Int(min(Int64(body.count), max(0, end - cursor)))
        if take > 0 {
            do { try run.partial.write(UnsafeRawBufferPointer(rebasing: body[0..<take]), at: cursor) } catch {
                failure = error
                return .abort
            }
            cursor += Int64(take)
            wrote += Int64(take)
            lastByte.set(monotonicSeconds())
            run.wrote(segment.id, upTo: cursor, by: self)
        }
        if cursor >= end {
            reachedEnd = true
            // The response ends here unless another connection took the tail: then stop early.
            return take == body.count && cursor == requestedEnd ? .proceed : .abort
        }
        return .proceed
    }
}
