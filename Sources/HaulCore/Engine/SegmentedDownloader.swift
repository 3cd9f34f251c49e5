#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// How many connections a download may use.
package struct SegmentOptions: Sendable {
    /// Connections for one file (1 means a plain single-connection download).
    package var connections: Int = 1
    /// No range is split below this size.
    package var minSplit: Int64 = 1 << 20
    /// A connection slower than this (bytes/s over `slowWindow`) is replaced (nil: no floor).
    package var lowestSpeed: Int64?
    /// Replace a connection much slower than the others (see ``SlowConnectionDetector``).
    package var replacesSlowConnections = true
    /// Seconds a connection is watched before its speed counts.
    package var slowWindow: Double = 3
    /// `connections` below 1 mean 1.
    package init(connections: Int = 1, minSplit: Int64 = 1 << 20, lowestSpeed: Int64? = nil) {
        self.connections = max(1, connections)
        self.minSplit = minSplit
        self.lowestSpeed = lowestSpeed
    }
}

/// Downloads one file over several connections, each fetching a byte range into one
/// preallocated partial file with positional writes; a connection that finishes steals half of
/// the largest remaining range. The resume record lists every written range, so a rerun (after
/// kill -9, say) fetches only the gaps. Every range response must be a 206 for exactly the range
/// asked, of the same total and validator as the probe; anything else discards the partial and
/// falls back to one connection from zero, so a file is never assembled from two versions.
package final class SegmentedDownloader: Sendable {
    let url: URL
    private let target: DownloadTarget
    let options: EngineOptions
    let segmentOptions: SegmentOptions
    let transport: any HTTPTransport
    let onEvent: @Sendable (DownloadEngineEvent) -> Void
    /// The download's claim on its file, shared with the one-connection download it may become.
    private let claims = DestinationClaims.Owner()

    package init(
        url: URL, target: DownloadTarget, options: EngineOptions, segments: SegmentOptions,
        transport: any HTTPTransport, onEvent: @escaping @Sendable (DownloadEngineEvent) -> Void = { _ in }
    ) {
        self.url = url
        self.target = target
        self.options = options
        self.segmentOptions = segments
        self.transport = transport
        self.onEvent = onEvent
    }

    private var store: DownloadStore {
        DownloadStore(url: url, owner: claims, resume: options.resume, overwrite: options.overwrite)
    }

    private func single(_ condition: Condition?) -> FileDownloader {
        FileDownloader(
            url: url, target: target, options: options, transport: transport, claims: claims, condition: condition,
            onEvent: onEvent)
    }

    package func run() async throws(HaulError) -> DownloadOutcome {
        defer { DestinationClaims.shared.releaseAll(of: claims) }
        let outcome = try await download()
        if options.revalidates, let validators = options.validators {
            validators.save(
                url, target: target, path: outcome.path, etag: outcome.etag, lastModified: outcome.lastModified,
                settingTime: !outcome.notModified)
        }
        if options.keepsClaimWhenSaved { DestinationClaims.shared.keep(claims, savedFrom: url) }
        return outcome
    }

    private func download() async throws(HaulError) -> DownloadOutcome {
        let resuming = store.waitingRecord(at: target)
        // A file in place is asked about (`-N`) unless a partial of this URL is to be continued.
        let condition =
            options.revalidates && resuming == nil ? options.validators?.condition(for: url, target: target) : nil
        // One connection is a plain download, unless a partial left by several has gaps between
        // its ranges: then they are fetched one after another, where a plain resume would ask
        // for everything after the first range's bytes again.
        if segmentOptions.connections == 1, (resuming?.ranges.count ?? 0) < 2 {
            return try await single(condition).run()
        }
        try FileDownloader.validate(url)
        // A named file's destination is claimed and its side files judged before any request
        // (a refusal asks nothing of the server); into a directory, once the answer names it,
        // unless it holds a file to ask about.
        var place: DownloadStore.Place?
        try store.prepare(target, creatingDirectories: options.createDirectories)
        if let path = condition?.path ?? target.namedFile {
            place = try store.claim(path, replacingFile: options.revalidates)
        }
        let (found, failedTries) = try await probe(resuming: resuming != nil, asking: condition)
        guard let probe = found else { return try await single(condition).run(priorFailures: failedTries) }
        if probe.notModified, let condition {
            var kept = try await DownloadStore.confirmComplete(
                condition.path, bytes: condition.size, verifying: options.checksums, notModified: true)
            kept.etag = probe.etagAsSent ?? condition.etag
            kept.lastModified = probe.lastModified ?? condition.lastModified
            return kept
        }
        let adopted = Locked(false)
        defer { if !adopted.get() { probe.held?.task.cancel() } }
        let destination: String
        switch target {
        case .file(let path): destination = path
        case .directory(let dir):
            destination = dir + "/" + SafeFileName.suggestedName(contentDisposition: probe.contentDisposition, url: url)
        }
        let claimed: DownloadStore.Place
        if let place { claimed = place } else { claimed = try store.claim(destination) }
        let partial = claimed.makePartial()
        if let whole = probe.wholeBody {
            if claimed.record != nil { partial.discard() }  // this URL's own partial: the whole file came now
            let probe = probe
            return try await save(whole, of: probe, at: claimed)
        }
        // Without a validator (no strong ETag, no Last-Modified) a change of the file between two
        // ranges could not be seen, and the parts could come from two versions: one connection.
        guard let total = probe.total, total >= 2 * segmentOptions.minSplit,
            probe.etag != nil || probe.lastModified != nil
        else {
            probe.held?.task.cancel()  // before the single download: it must not hold a connection slot
            return try await single(condition).run()
        }
        return try await download(probe, total: total, into: claimed, partial: partial, adopted: adopted)
    }

    /// The ranged download, once the probe found a file to split at `place`: continues the
    /// partial there when it is of the probe's version, else starts it afresh.
    private func download(
        _ probe: Probe, total: Int64, into place: DownloadStore.Place, partial: PartialFile, adopted: Locked<Bool>
    ) async throws(HaulError) -> DownloadOutcome {
        let destination = place.destination
        var completed: [ByteRange] = []
        if let record = place.record {
            if RangeAnswer.isSameVersion(record.fileVersion, probe.version) {
                completed = record.ranges
            } else {
                partial.discard()
                onEvent(.restarted(reason: "file changed on the server since the partial download"))
            }
        }
        if completed.isEmpty, let size = try place.fileInPlace(serverSize: total) {
            return try await DownloadStore.confirmComplete(
                destination, bytes: size, verifying: options.expected(vouched: probe.vouched))
        }
        try partial.openPreallocated(total: total, completed: completed)
        // A fresh download keeps the probe's answer as its first range (unless it is a resume
        // probe's single byte).
        let held = completed.isEmpty && probe.heldEnd >= segmentOptions.minSplit ? probe.held : nil
        if held == nil { probe.held?.task.cancel() }  // now, not at the end: it holds a connection slot
        let run = SegmentedRun(
            of: self, total: total, probe: probe, partial: partial,
            planner: SegmentPlanner(
                total: total, completed: completed, connections: segmentOptions.connections,
                minSplit: segmentOptions.minSplit, first: held.map { _ in probe.heldEnd }))
        let record = ResumeRecord(
            url: ResumeRecord.redacted(url), finalURL: ResumeRecord.location(probe.finalURL), etag: probe.etag,
            lastModified: probe.lastModified, totalLength: total)
        onEvent(
            .started(
                status: 206, url: probe.finalURL, destination: destination, offset: run.completedBytes,
                totalBytes: total))
        if let held {  // after `started`: its bytes flow from here on
            run.adopt(held.task, from: held.fetch, end: probe.heldEnd)
            adopted.set(true)
        }
        do {
            try await run.execute(record: record)
        } catch  where error.code == .serverChangedFile {
            return try await startOver(at: destination, partial: partial, because: error.message)
        }
        try await partial.commit(
            replacing: place.replacesFile, verifying: Verification(options.expected(vouched: probe.vouched)))
        run.reporter.finish(total, total: total)
        return DownloadOutcome(
            path: destination, bytes: total, alreadyComplete: false, etag: probe.etagAsSent,
            lastModified: probe.lastModified)
    }

    /// A range answer did not match: never mix versions. The partial goes, and the download
    /// starts over on one connection.
    private func startOver(
        at destination: String, partial: PartialFile, because reason: String
    ) async throws(HaulError) -> DownloadOutcome {
        partial.discard()
        onEvent(.restarted(reason: reason))
        var fresh = options
        fresh.resume = false
        return try await FileDownloader(
            url: url, target: .file(destination), options: fresh, transport: transport, claims: claims,
            onEvent: onEvent
        ).run()
    }

    // MARK: - Probe

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
        var request = options.request(chain.current, headers: chain.headers, connections: segmentOptions.connections)
        request.headers.replace("Range", "bytes=0-\(limit - 1)")
        for (name, value) in condition?.headers ?? [] { request.headers.replace(name, value) }
        let head = ProbeFetch(limit: limit)
        return (head, transport.start(request, handler: head))
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
        resuming ? 1 : Int(min(2 * segmentOptions.minSplit, 8 << 20))
    }

    /// `GET Range: bytes=0-(limit-1)` (HEAD is often refused or wrong): size, range support,
    /// validators, final URL. A file of at most `probeLimit` bytes comes whole (a 206 for all
    /// of it, or a 200 from a server without ranges) and is kept; for a larger one the transfer
    /// stops after the head. Nil when a larger file cannot be split (no ranges, no size) or
    /// anything is off; the caller then uses one connection. Throws when the answer broke HTTP
    /// (conflicting lengths): one connection would get the same.
    /// With a `condition`, the probe asks about the file in place too: a 304, or an answer of its
    /// version, comes back as a probe that is ``Probe/notModified``.
    private func probe(
        resuming: Bool, asking condition: Condition?
    ) async throws(HaulError) -> (
        Probe?, failedTries: Int
    ) {
        let probeLimit = probeLimit(resuming: resuming)
        var chain = RedirectChain(
            url: url, headers: options.headers, maxRedirects: options.maxRedirects, netrc: options.netrc)
        while true {
            let (head, task) = startProbe(chain, limit: probeLimit, asking: condition)
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

    /// A small file that came whole with the probe: written, verified, synced and put in place in
    /// one job on the ``FileWorker``. Unless it may replace the destination, it is written with
    /// no name and named once synced (``WholeFile``), which needs no partial and no record.
    private func save(
        _ body: [UInt8], of probe: Probe, at place: DownloadStore.Place
    ) async throws(HaulError)
        -> DownloadOutcome
    {
        let total = Int64(body.count)
        let saved = try await FileWorker.shared.perform { [self] () throws(HaulError) -> FileWorker.Step<Saved> in
            if let size = try place.fileInPlace(serverSize: total) {
                return .done(.existing(DownloadOutcome(path: place.destination, bytes: size, alreadyComplete: true)))
            }
            onEvent(
                .started(
                    status: probe.status, url: probe.finalURL, destination: place.destination, offset: 0,
                    totalBytes: total))
            if !place.replacesFile, let whole = try WholeFile.create(for: place.destination) {
                try whole.write(body, verifying: Verification(options.expected(vouched: probe.vouched)))
                return whole.committing { .named($0) }
            }
            return try write(body, of: probe, at: place).committing(
                replacing: place.replacesFile, verifying: Verification(options.expected(vouched: probe.vouched)),
                then: .written
            )
        }
        switch saved {
        case .existing(let existing):
            return try await DownloadStore.confirmComplete(
                existing.path, bytes: existing.bytes, verifying: options.expected(vouched: probe.vouched))
        case .written, .named(.linked): break
        case .named(.refused):
            // This system would not name the file (nothing is left of it): the partial's way.
            _ = try await FileWorker.shared.perform { [self] () throws(HaulError) -> FileWorker.Step<Saved> in
                try write(body, of: probe, at: place).committing(replacing: false, then: .written)
            }
        case .named(.taken):
            // Another program took the name while the file was synced: the bytes are kept as a
            // partial with its record, as a partial's rename would have kept them.
            let kept = try await FileWorker.shared.perform { [self] () throws(HaulError) -> FileWorker.Step<String> in
                .done(try write(body, of: probe, at: place).partPath)
            }
            throw HaulError(
                .destinationExists, "\(place.destination) appeared during the download; the data is in \(kept)",
                path: place.destination)
        }
        onEvent(.progress(TransferProgress(completedBytes: total, totalBytes: total)))
        return DownloadOutcome(
            path: place.destination, bytes: total, alreadyComplete: false, etag: probe.etagAsSent,
            lastModified: probe.lastModified)
    }

    /// What the file worker's job made of a small file.
    private enum Saved: Sendable {
        /// It was there already, complete (to be confirmed).
        case existing(DownloadOutcome)
        /// Written as a partial and renamed into place.
        case written
        /// Written with no name, then named (or not).
        case named(WholeFile.Named)
    }

    private func record(of probe: Probe, total: Int64) -> ResumeRecord {
        ResumeRecord(
            url: ResumeRecord.redacted(url), finalURL: ResumeRecord.location(probe.finalURL),
            etag: probe.etag, lastModified: probe.lastModified, totalLength: total)
    }

    /// Writes `body` as the destination's partial, its record first.
    private func write(
        _ body: [UInt8], of probe: Probe, at place: DownloadStore.Place
    ) throws(HaulError) -> PartialFile {
        let partial = place.makePartial()
        // Nothing is left at the side-file names (``DownloadStore/claim(_:)``), so the partial is
        // created exclusively.
        try partial.open(at: 0)
        // Its record first (no sync: it claims no bytes), so that a kill before the rename
        // leaves a partial haul can vouch for, not one the next run must refuse.
        try partial.checkpoint(record(of: probe, total: Int64(body.count)), syncingData: false)
        let failure = body.withUnsafeBytes { buffer -> HaulError? in
            do throws(HaulError) {
                try partial.write(buffer)
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw failure }
        return partial
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
        task.onFinish { [head] _ in head.fulfill(()) }
        await head.value()
        if holding { return nil }  // the transfer goes on, paused, for a connection to adopt
        return await task.finished()
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
