import Foundation

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
    private let url: URL
    private let target: DownloadTarget
    private let options: EngineOptions
    private let segmentOptions: SegmentOptions
    private let transport: any HTTPTransport
    private let onEvent: @Sendable (DownloadEngineEvent) -> Void
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

    private var single: FileDownloader {
        FileDownloader(
            url: url, target: target, options: options, transport: transport, claims: claims, onEvent: onEvent)
    }

    package func run() async throws(HaulError) -> DownloadOutcome {
        defer { DestinationClaims.shared.releaseAll(of: claims) }
        let outcome = try await download()
        if options.keepsClaimWhenSaved { DestinationClaims.shared.keep(claims, savedFrom: url) }
        return outcome
    }

    private func download() async throws(HaulError) -> DownloadOutcome {
        let resuming = resumableRecord()
        // One connection is a plain download, unless a partial left by several has gaps between
        // its ranges: then they are fetched one after another, where a plain resume would ask
        // for everything after the first range's bytes again.
        if segmentOptions.connections == 1, (resuming?.ranges.count ?? 0) < 2 { return try await single.run() }
        try FileDownloader.validate(url)
        // A named file's destination is claimed and its side files judged before any request
        // (a refusal asks nothing of the server); into a directory, once the answer names it.
        var existingSize: Int64?
        var resumable: ResumeRecord?
        if case .file(let path) = target {
            try PartialFile.prepareDirectory(of: path, creating: options.createDirectories)
            (existingSize, resumable) = try prepare(path)
        }
        let (found, failedTries) = try await probe(resuming: resuming != nil)
        guard let probe = found else { return try await single.run(priorFailures: failedTries) }
        let adopted = Locked(false)
        defer { if !adopted.get() { probe.held?.task.cancel() } }
        let destination: String
        switch target {
        case .file(let path): destination = path
        case .directory(let dir):
            try PartialFile.createDirectory(dir)
            destination = dir + "/" + SafeFileName.suggestedName(contentDisposition: probe.contentDisposition, url: url)
        }
        if case .directory = target { (existingSize, resumable) = try prepare(destination) }
        let partial = PartialFile(destination: destination)
        if let whole = probe.wholeBody {
            if resumable != nil { partial.discard() }  // this URL's own partial: the whole file came now
            let probe = probe
            return try await store(whole, of: probe, at: destination, existingSize: existingSize)
        }
        // Without a validator (no strong ETag, no Last-Modified) a change of the file between two
        // ranges could not be seen, and the parts could come from two versions: one connection.
        guard let total = probe.total, total >= 2 * segmentOptions.minSplit,
            probe.etag != nil || probe.lastModified != nil
        else {
            probe.held?.task.cancel()  // before the single download: it must not hold a connection slot
            return try await single.run()
        }
        var completed: [ByteRange] = []
        if let record = resumable {
            let same =
                record.totalLength == total
                && (record.etag != nil ? record.etag == probe.etag : record.lastModified == probe.lastModified)
                && (record.etag != nil || record.lastModified != nil)
            if same {
                completed = record.ranges
            } else {
                partial.discard()
                onEvent(.restarted(reason: "file changed on the server since the partial download"))
            }
        }
        if completed.isEmpty, !options.overwrite, let size = existingSize {
            if size == total {
                return try await PartialFile.confirmComplete(destination, bytes: size, sha256: options.sha256)
            }
            throw .destinationExists(destination, size: size, serverSize: total)
        }
        try partial.openPreallocated(total: total, completed: completed)
        // A fresh download keeps the probe's answer as its first range (unless it is a resume
        // probe's single byte).
        let held = completed.isEmpty && probe.heldEnd >= segmentOptions.minSplit ? probe.held : nil
        if held == nil { probe.held?.task.cancel() }  // now, not at the end: it holds a connection slot
        let run = SegmentedRun(
            origin: url, total: total, probe: probe, partial: partial,
            planner: SegmentPlanner(
                total: total, completed: completed, connections: segmentOptions.connections,
                minSplit: segmentOptions.minSplit, first: held.map { _ in probe.heldEnd }),
            options: options, transport: transport, segments: segmentOptions, onEvent: onEvent)
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
            // A range answer did not match: never mix versions. Start over on one connection.
            partial.discard()
            onEvent(.restarted(reason: error.message))
            var fresh = options
            fresh.resume = false
            return try await FileDownloader(
                url: url, target: .file(destination), options: fresh, transport: transport, claims: claims,
                onEvent: onEvent
            ).run()
        }
        try await partial.commit(replacing: options.overwrite, verifying: options.sha256)
        run.reporter.finish(total, total: total)
        return DownloadOutcome(path: destination, bytes: total, alreadyComplete: false)
    }

    /// Claims `destination` and judges what is there (``PartialFile/prepare(for:resume:overwrite:)``):
    /// the size of a file in its place, and the record of this URL's partial to resume.
    private func prepare(_ destination: String) throws(HaulError) -> (existingSize: Int64?, record: ResumeRecord?) {
        try DestinationClaims.shared.claim(destination, for: claims)
        let existingSize = try PartialFile.checkDestination(destination, overwrite: options.overwrite)
        let record = try PartialFile(destination: destination).prepare(
            for: url, resume: options.resume, overwrite: options.overwrite)
        return (existingSize, record)
    }

    // MARK: - Probe

    struct Probe: Sendable {
        var finalURL: URL
        var headers: HTTPHeaders
        var status: Int
        var total: Int64?
        var etag: String?
        var lastModified: String?
        var contentDisposition: String?
        /// The whole file, when it was small enough to come with the probe's answer.
        var wholeBody: [UInt8]?
        /// For a larger file, the probe's answer (bytes `[0, heldEnd)`), paused after its head:
        /// the first range, for the first connection to adopt. Cancelled if nobody does.
        var held: (task: any TransportTask, fetch: ProbeFetch)?
        var heldEnd: Int64 = 0
    }

    /// The record of a partial of this URL to resume, if any: a named file's own, or in a
    /// directory the one the record index knows for the URL.
    private func resumableRecord() -> ResumeRecord? {
        guard options.resume else { return nil }
        let destination: String
        switch target {
        case .file(let path): destination = path
        case .directory(let dir):
            guard let found = RecordIndex.shared.destination(of: ResumeRecord.redacted(url), in: dir) else {
                return nil
            }
            destination = found
        }
        guard case .partial(let record) = try? PartialFile(destination: destination).inspect(),
            record.url == ResumeRecord.redacted(url)
        else { return nil }
        return record
    }

    /// The most a probe keeps: a file this small needs no split, so it arrives in the probe's
    /// answer and that one request is the whole download.
    /// When a partial download of this file is there to resume (`resuming`), its first range is
    /// probably written already: then the probe asks for one byte, so nothing is fetched twice.
    /// (Into a directory this was known only for a partial under the name the answer gave, after
    /// the probe had asked for 2 MiB.)
    private func probeLimit(resuming: Bool) -> Int {
        resuming ? 1 : Int(min(2 * segmentOptions.minSplit, 8 << 20))
    }

    /// `GET Range: bytes=0-(limit-1)` (HEAD is often refused or wrong): size, range support,
    /// validators, final URL. A file of at most `probeLimit` bytes comes whole (a 206 for all
    /// of it, or a 200 from a server without ranges) and is kept; for a larger one the transfer
    /// stops after the head. Nil when a larger file cannot be split (no ranges, no size) or
    /// anything is off; the caller then uses one connection. Throws when the answer broke HTTP
    /// (conflicting lengths): one connection would get the same.
    private func probe(resuming: Bool) async throws(HaulError) -> (Probe?, failedTries: Int) {
        let probeLimit = probeLimit(resuming: resuming)
        var chain = RedirectChain(url: url, headers: options.headers, maxRedirects: options.maxRedirects)
        while true {
            // Its answer may become the first range: paced like one.
            var request = options.request(
                chain.current, headers: chain.headers, connections: segmentOptions.connections)
            request.headers.replace("Range", "bytes=0-\(probeLimit - 1)")
            let head = ProbeFetch(limit: probeLimit)
            let task = transport.start(request, handler: head)
            // Ends with the answer's end, or with its head when a larger file's first range is
            // held for a connection.
            let result = await withTaskCancellationHandler {
                await head.headOrEnd(of: task)
            } onCancel: {
                task.cancel()  // a suspend or Ctrl-C during the probe does not wait for its head
            }
            guard let response = head.response else {
                task.cancel()
                if case .failure(let error) = result, error.kind == .invalidResponse {
                    throw error.haulError(
                        url: chain.current, origin: url, connectTimeout: options.connectTimeout,
                        idleTimeout: options.idleTimeout)
                }
                return (nil, 0)
            }
            if let next = RedirectChain.target(of: response, askedFor: chain.current) {
                task.cancel()
                guard (try? chain.follow(to: next)) != nil else { return (nil, 0) }
                continue
            }
            // The file is not there for us whatever the Range: the answer, not a second request
            // without Range.
            if [401, 403, 404, 410].contains(response.status) {
                task.cancel()
                throw .httpStatus(response.status, from: ResumeRecord.shown(chain.current, origin: url))
            }
            var probe = Probe(
                finalURL: chain.current, headers: chain.headers, status: response.status, total: nil,
                etag: response.headers.strongETag, lastModified: response.headers.lastModified,
                contentDisposition: response.headers["Content-Disposition"])
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
                // A 429 or 503 is the first of the retries' tries: waited out here (the time the
                // server's Retry-After or the retry policy sets), then the single engine goes on
                // counting from it; with no retry left it is the answer.
                guard HTTPStatus.isTransient(response.status) else { return (nil, 0) }
                let busy = HaulError.httpStatus(
                    response.status, from: ResumeRecord.shown(chain.current, origin: url), headers: response.headers)
                let delay = try options.retry.delay(after: busy, failures: 1)
                onEvent(.retrying(attempt: 1, error: busy, delay: delay))
                try? await Task.sleep(nanoseconds: Seconds.nanoseconds(delay))  // a cancel: the engine stops at once
                return (nil, 1)
            }
            probe.total = total
            if head.holding {
                probe.held = (task, head)
                probe.heldEnd = Int64(probeLimit)
            }
            return (probe, 0)
        }
    }

    /// A small file that came whole with the probe: written, verified, synced and put in place in
    /// one job on the ``FileWorker``.
    private func store(
        _ body: [UInt8], of probe: Probe, at destination: String, existingSize: Int64?
    ) async throws(HaulError)
        -> DownloadOutcome
    {
        let total = Int64(body.count)
        let existing = try await FileWorker.shared.perform {
            [self] () throws(HaulError) -> FileWorker.Step<DownloadOutcome?> in
            switch try write(body, of: probe, at: destination, existingSize: existingSize) {
            case .alreadyComplete(let outcome): return .done(outcome)
            case .written(let partial):
                return try partial.committing(replacing: options.overwrite, verifying: options.sha256, then: nil)
            }
        }
        if let existing {
            return try await PartialFile.confirmComplete(existing.path, bytes: existing.bytes, sha256: options.sha256)
        }
        onEvent(.progress(TransferProgress(completedBytes: total, totalBytes: total)))
        return DownloadOutcome(path: destination, bytes: total, alreadyComplete: false)
    }

    private enum Written {
        case alreadyComplete(DownloadOutcome)
        case written(PartialFile)
    }

    private func write(
        _ body: [UInt8], of probe: Probe, at destination: String, existingSize: Int64?
    ) throws(HaulError) -> Written {
        let total = Int64(body.count)
        if !options.overwrite, let size = existingSize {
            if size == total {
                return .alreadyComplete(DownloadOutcome(path: destination, bytes: size, alreadyComplete: true))
            }
            throw .destinationExists(destination, size: size, serverSize: total)
        }
        let partial = PartialFile(destination: destination)
        // Nothing is left at the side-file names (``prepare(_:)``), so the partial is created
        // exclusively.
        onEvent(
            .started(
                status: probe.status, url: probe.finalURL, destination: destination, offset: 0, totalBytes: total))
        try partial.open(at: 0)
        // Its record first (no sync: it claims no bytes), so that a kill before the rename
        // leaves a partial haul can vouch for, not one the next run must refuse.
        try partial.checkpoint(
            ResumeRecord(
                url: ResumeRecord.redacted(url), finalURL: ResumeRecord.location(probe.finalURL),
                etag: probe.etag, lastModified: probe.lastModified, totalLength: total),
            syncingData: false)
        let failure = body.withUnsafeBytes { buffer -> HaulError? in
            do throws(HaulError) {
                try partial.write(buffer)
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw failure }
        return .written(partial)
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
        let length = response.headers.contentLength
        let encoded = (response.headers["Content-Encoding"] ?? "identity").lowercased() != "identity"
        guard let length, !encoded else { return false }
        let range = response.headers["Content-Range"].flatMap(HTTPParsing.contentRange)
        switch response.status {
        case 206 where range?.start == 0 && range?.total == length && length <= limit:
            break  // all of a small file
        case 206 where range?.start == 0 && length == limit && (range?.total ?? 0) > Int64(limit):
            holding = true  // the first range of a larger one
            head.fulfill(())
            return true
        case 200 where length <= limit:
            break
        default:
            return false
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

/// One segmented transfer: the workers, the shared plan and the checkpoints.
private final class SegmentedRun: Sendable {
    /// The URL the download was asked for; the ranges go where its redirects ended
    /// (``location``).
    let origin: URL
    let total: Int64
    let probe: SegmentedDownloader.Probe
    let partial: PartialFile
    let options: EngineOptions
    let transport: any HTTPTransport
    let onEvent: @Sendable (DownloadEngineEvent) -> Void
    let connections: Int
    let segments: SegmentOptions
    private struct State {
        var planner: SegmentPlanner
        /// The download's retries, shared by its connections (each range's bytes refill it).
        var budget: RetryBudget
        /// Running fetches by serial, for the slow-connection watchdog.
        var fetches: [Int: SegmentFetch] = [:]
        var nextFetch = 0
        /// Judges the speeds of the running fetches (fed by the watchdog and by ended fetches).
        var detector = SlowConnectionDetector()
        /// Bytes per second of the last ranges that ended whole on their connection (answer to
        /// last byte), for ``SegmentedRun/raceSlowerRange()``.
        var recentSpeeds: [Double] = []
        /// The probe's held answer, for the first worker.
        var adopted: (fetch: SegmentFetch, task: any TransportTask, end: Int64)?
        /// Where ranges are asked for, and with which headers: the probe's final URL, until a
        /// range answered from a newer one (an expired signed link signed again).
        var location: (url: URL, headers: HTTPHeaders)
        /// When, and at how many bytes written, the ranges were last noted in the record.
        var lastNote: (at: Double, bytes: Int64) = (monotonicSeconds(), 0)
    }
    private let state: Locked<State>
    /// Progress of all ranges together.
    let reporter: ProgressReporter

    init(
        origin: URL, total: Int64, probe: SegmentedDownloader.Probe, partial: PartialFile,
        planner: SegmentPlanner, options: EngineOptions, transport: any HTTPTransport, segments: SegmentOptions,
        onEvent: @escaping @Sendable (DownloadEngineEvent) -> Void
    ) {
        self.connections = segments.connections
        self.segments = segments
        self.origin = origin
        self.total = total
        self.probe = probe
        self.partial = partial
        self.options = options
        self.transport = transport
        self.onEvent = onEvent
        state = Locked(
            State(planner: planner, budget: RetryBudget(options.retry), location: (probe.finalURL, probe.headers)))
        reporter = ProgressReporter(interval: options.progressInterval) { onEvent(.progress($0)) }
    }

    var completedBytes: Int64 { state.withLock { $0.planner.completedBytes } }

    /// Where ranges are asked for now.
    var location: (url: URL, headers: HTTPHeaders) { state.withLock { $0.location } }

    /// The probe was redirected: its final URL may stop working (a signed link expires) while
    /// the original one still leads to the file.
    var redirected: Bool { probe.finalURL.absoluteString != origin.absoluteString }

    /// A range answered from `url`: later ranges are asked there.
    func moved(to url: URL, headers: HTTPHeaders) {
        state.withLock { s in
            if s.location.url.absoluteString != url.absoluteString { s.location = (url, headers) }
        }
    }

    /// Takes over the probe's paused answer as the fetch of the first segment (`[0, end)`,
    /// planned as running) and lets its bytes flow.
    func adopt(_ task: any TransportTask, from probe: ProbeFetch, end: Int64) {
        guard let segment = state.withLock({ $0.planner.segments.first { $0.start == 0 && $0.active } }) else {
            task.cancel()
            return
        }
        let fetch = SegmentFetch(run: self, segment: segment)
        // Before its bytes flow: the transport's thread reads it (ThreadSanitizer saw the write
        // in perform(adopting:) race with the first bytes).
        fetch.requestedEnd = end
        probe.adopt(fetch)
        state.withLock { $0.adopted = (fetch, task, end) }
        task.resume()
    }

    func execute(record: ResumeRecord) async throws(HaulError) {
        try checkpoint(record)
        reporter.begin(at: completedBytes, total: total)
        ProgressClock.shared.add(reporter)
        defer {
            ProgressClock.shared.remove(reporter)
            reporter.idle()
        }
        let outcome: Result<Void, HaulError> = await withTaskGroup(of: Result<Void, HaulError>.self) { group in
            group.addTask {
                // Checkpoints every second while the workers run.
                while !Task.isCancelled {
                    try? await Task.sleep(nanoseconds: Seconds.nanoseconds(self.options.checkpointInterval))
                    if Task.isCancelled { break }
                    try? self.checkpoint(record)
                }
                return .success(())
            }
            let watching = segments.lowestSpeed != nil || segments.replacesSlowConnections
            if watching {
                group.addTask {
                    await self.watchForSlowConnections()
                    return .success(())
                }
            }
            for _ in 0..<connections {
                group.addTask { await self.worker() }
            }
            var result: Result<Void, HaulError> = .success(())
            var workersLeft = connections
            while workersLeft > 0, let r = await group.next() {
                // The checkpoint and watchdog tasks only end when cancelled; every other result
                // is a worker's.
                workersLeft -= 1
                if case .failure = r {
                    result = r
                    group.cancelAll()
                    break
                }
                // Every byte is in: a connection still waiting for a range to race (it looks
                // every 50 ms) has nothing left to do.
                if state.withLock({ $0.planner.isComplete }) { break }
            }
            group.cancelAll()
            return result
        }
        try? checkpoint(record)
        if Task.isCancelled { throw HaulError(.cancelled, "cancelled", path: partial.partPath) }
        try outcome.get()
        guard state.withLock({ $0.planner.isComplete }) else {
            throw HaulError(.incompleteBody, "segmented download of \(ResumeRecord.redacted(origin)) stopped early")
        }
    }

    /// fsync the data, then a record claiming exactly what was written before it.
    private func checkpoint(_ base: ResumeRecord) throws(HaulError) {
        let ranges = state.withLock { $0.planner.writtenRanges }
        var record = base
        record.ranges = ranges
        record.updatedAt = ISO8601DateFormatter().string(from: Date())
        try partial.checkpoint(record)
        partial.reserve(ahead: ByteRange.gaps(in: total, leftBy: ranges))
    }

    /// How long a running range's answer must have flowed before its speed is judged: a range
    /// whose head has just come in has written next to nothing, and would look slow to any race.
    static let judgeRangesAfter = 0.5

    /// With no range to take or split, a free connection races a running one for its rest
    /// (``SegmentPlanner/hedge(_:)``) when a new request is expected to bring it in at most half
    /// the time: the speed of ranges that ended lately, from their answer to their last byte, is
    /// at least twice the running range's own so far. The first to write the last byte
    /// completes the range and the other stops. A stalled or slowed connection no longer holds
    /// up the end; and a server that gives each request an allowance at once (nginx's
    /// `limit_rate` sends a request's first 2 MiB at once, then 2 MiB every 0.5 s; the halves
    /// stolen at the end came in within milliseconds) hands a new request the rest at once,
    /// where the running one would wait for its next burst. Where connections run alike (a
    /// steady per-connection cap, a fast link) new requests are no faster and nothing is asked
    /// twice. Not under a rate limit: a paced connection is slow on purpose, and the duplicate
    /// would take the others' budget. Nil when no range can be raced any more.
    private func raceSlowerRange() async -> SegmentPlanner.Segment? {
        guard connections > 1, options.maxBytesPerSecond == nil, options.sharedRate == nil else { return nil }
        enum Next {
            case take(SegmentPlanner.Segment)
            case wait
            case none
        }
        while !Task.isCancelled {
            let now = monotonicSeconds()
            let next = state.withLock { s -> Next in
                if let segment = s.planner.assign() { return .take(segment) }  // a range came free
                let candidates = s.planner.hedgeable
                if candidates.isEmpty { return .none }  // in the endgame the list only shrinks
                guard let fresh = s.recentSpeeds.max() else { return .wait }
                // Each candidate's speed since its answer began (one that has not answered yet,
                // or only just, has none: not raced).
                var speeds: [Int: Double] = [:]
                for id in candidates {
                    let running = s.fetches.values.filter { $0.segment.id == id }
                    guard running.count == 1, let fetch = running.first, let since = fetch.answeredAt,
                        now - since >= Self.judgeRangesAfter,
                        let cursor = s.planner.segments.first(where: { $0.id == id })?.cursor
                    else { continue }
                    speeds[id] = Double(cursor - fetch.segment.cursor) / (now - since)
                }
                return s.planner.race(fresh: fresh, speeds: speeds).map { .take($0) } ?? .wait
            }
            switch next {
            case .take(let segment): return segment
            case .none: return nil
            case .wait: try? await Task.sleep(nanoseconds: 50_000_000)
            }
        }
        return nil
    }

    /// Takes work until none is left, retrying a failed range from where it stopped.
    private func worker() async -> Result<Void, HaulError> {
        var slowStreak = 0  // replacements in a row: a range that stays slow ends the download
        while !Task.isCancelled {
            let adopted = state.withLock { s in
                defer { s.adopted = nil }
                return s.adopted
            }
            let fetch: SegmentFetch
            if let adopted {
                fetch = adopted.fetch
            } else {
                var next = state.withLock { $0.planner.assign() }
                if next == nil { next = await raceSlowerRange() }
                guard let segment = next else { return .success(()) }
                fetch = SegmentFetch(run: self, segment: segment)
            }
            let serial = state.withLock { s -> Int in
                s.nextFetch += 1
                s.fetches[s.nextFetch] = fetch
                return s.nextFetch
            }
            let result = await fetch.perform(adopting: adopted.map { ($0.task, $0.end) })
            let now = monotonicSeconds()
            state.withLock {
                $0.planner.release(fetch.segment.id)
                $0.fetches[serial] = nil
                if let since = fetch.answeredAt {
                    $0.detector.ended(serial, bytes: fetch.wrote, seconds: now - since, at: now)
                    // Timed on the transport's clock (head to last byte), not to this task's
                    // turn, which can come much later on a loaded machine.
                    let last = fetch.lastByteAt ?? now
                    if case .success = result, !fetch.settled, fetch.wrote >= 64 << 10, last > since {
                        $0.recentSpeeds = $0.recentSpeeds.suffix(3) + [Double(fetch.wrote) / (last - since)]
                    }
                }
            }
            switch result {
            case .success:
                slowStreak = 0
                state.withLock { $0.budget.progressed(fetch.wrote) }
                continue
            case .failure(let error) where fetch.replaced:
                // Replaced at once on a new connection; a range slow on every try fails.
                slowStreak += 1
                guard slowStreak <= options.retry.maxRetries else {
                    var final = error
                    final.isTransient = false
                    return .failure(final)
                }
                onEvent(.retrying(attempt: slowStreak, error: error, delay: 0))
            case .failure(let error) where error.isTransient:
                slowStreak = 0
                // Turned away before its range began (a 503 or 429, a refused or reset
                // connection) while other connections fetch: the server admits fewer connections
                // than asked for (many mirrors allow two per client). This one ends; its range
                // goes back to the plan for the connections let in. Before, its retries used up
                // the download's budget in a second and failed the download.
                if !fetch.flowing, state.withLock({ $0.fetches.values.contains { $0.flowing } }) {
                    return .success(())
                }
                let retry = state.withLock { s -> Result<(attempt: Int, delay: Double), HaulError> in
                    s.budget.progressed(fetch.wrote)
                    do throws(HaulError) { return .success(try s.budget.failed(error)) } catch {
                        return .failure(error)
                    }
                }
                guard case .success(let (failures, delay)) = retry else { return retry.map { _ in () } }
                onEvent(.retrying(attempt: failures, error: error, delay: delay))
                try? await Task.sleep(nanoseconds: Seconds.nanoseconds(delay))
            case .failure(let error):
                return .failure(error)
            }
        }
        return .success(())
    }

    /// Samples every running fetch a few times a second and replaces the slow ones (their
    /// bytes stay written; the worker asks for the rest of the range on a new connection).
    private func watchForSlowConnections() async {
        // Paced connections (a rate limit) are slow on purpose, and one connection (filling the
        // gaps of a partial) has no others to be slower than: only an absolute floor applies.
        let paced = options.maxBytesPerSecond != nil || options.sharedRate != nil
        state.withLock {
            $0.detector = SlowConnectionDetector(
                window: segments.slowWindow, lowestSpeed: segments.lowestSpeed,
                relative: segments.replacesSlowConnections && !paced && connections > 1)
        }
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: 250_000_000)
            let now = monotonicSeconds()
            let running = state.withLock { s -> [Int: (SegmentFetch, Int64, Int64)] in
                var out: [Int: (SegmentFetch, Int64, Int64)] = [:]
                // Only answered fetches: one still waiting for a connection slot is not slow.
                for (serial, fetch) in s.fetches where fetch.answered {
                    guard let segment = s.planner.segments.first(where: { $0.id == fetch.segment.id }) else { continue }
                    out[serial] = (fetch, segment.cursor - fetch.segment.cursor, segment.remaining)
                }
                return out
            }
            let verdicts = state.withLock { $0.detector.observe(running.mapValues { ($0.1, $0.2) }, at: now) }

            for verdict in verdicts {
                guard let (fetch, _, _) = running[verdict.fetch] else { continue }
                let limit = segments.lowestSpeed.map { " (limit \($0) B/s)" } ?? ""
                fetch.replace(
                    because: "connection for bytes \(fetch.segment.cursor)- at \(Int(verdict.speed)) B/s, "
                        + verdict.reason + limit + "; replaced")
            }
        }
    }

    fileprivate func end(of id: Int) -> Int64 { state.withLock { $0.planner.end(of: id) ?? 0 } }

    fileprivate func wrote(_ id: Int, upTo cursor: Int64, by writer: SegmentFetch) {
        let now = monotonicSeconds()
        let (done, racing, note) = state.withLock { s -> (Int64, [SegmentFetch], [ByteRange]?) in
            let done = s.planner.advance(id, to: cursor)
            // A hedged segment is complete: the connection behind stops now, not at its next bytes
            // (with a per-request allowance those come up to half a second later).
            let racing = done ? s.fetches.values.filter { $0.segment.id == id && $0 !== writer } : []
            var note: [ByteRange]?
            let written = s.planner.completedBytes
            if options.notes.isDue(bytesSince: written - s.lastNote.bytes, secondsSince: now - s.lastNote.at) {
                s.lastNote = (now, written)
                note = s.planner.writtenRanges
            }
            return (s.planner.completedBytes, racing, note)
        }
        // What is written so far goes in the record (no sync) when ``NotePolicy`` says: a kill -9
        // costs no more.
        if let note { partial.note(written: note) }
        for fetch in racing { fetch.settle() }
        reporter.update(done, total: total)
    }
}

/// One range request: validates the 206 and writes its bytes at their offsets.
/// Unchecked Sendable: its vars are the transport thread's while the request runs and its
/// worker's after `finished()`; what the watchdog and the other connections read is locked.
private final class SegmentFetch: TransportHandler, @unchecked Sendable {
    let run: SegmentedRun
    let segment: SegmentPlanner.Segment
    var cursor: Int64
    var wrote: Int64 = 0
    var failure: HaulError?
    var reachedEnd = false
    var requestedEnd: Int64 = 0
    /// Where the current request went, and with which headers.
    private var asking: (url: URL, headers: HTTPHeaders)?
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
            url: location.url, headers: location.headers, maxRedirects: run.options.maxRedirects)
        var signedAgain = false
        while true {
            let end = run.end(of: segment.id)
            guard cursor < end, !settled else { return .success(()) }
            requestedEnd = end
            (redirect, refused, failure) = (nil, false, nil)
            asking = (chain.current, chain.headers)
            let result = await finish(start(chain.current, headers: chain.headers, end: end))
            if let next = redirect {
                do throws(HaulError) { try chain.follow(to: next) } catch { return .failure(error) }
                continue
            }
            if refused && !signedAgain && !replaced && !Task.isCancelled {
                signedAgain = true
                chain = RedirectChain(
                    url: run.origin, headers: run.options.headers, maxRedirects: run.options.maxRedirects)
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
        let result = await withTaskCancellationHandler {
            await task.finished()
        } onCancel: {
            task.cancel()
        }
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
        let range = response.headers["Content-Range"].flatMap(HTTPParsing.contentRange)
        let etag = response.headers.strongETag
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
        } else if range?.start != cursor || range?.total != run.total {
            problem = "server answered a range with \(response.headers["Content-Range"] ?? "no Content-Range")"
        } else {
            // The probe's ETag is a strong one (a weak answer counts as none, as for the probe).
            problem = ResumeStateMachine.versionMismatch(
                etag: run.probe.etag, lastModified: run.probe.lastModified,
                seen: .init(etag: etag, lastModified: response.headers.lastModified, totalLength: run.total))
        }
        if let problem {
            failure = HaulError(.serverChangedFile, problem)
            return false
        }
        if let asking { run.moved(to: asking.url, headers: asking.headers) }
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
