import Foundation

/// Where a download goes.
package enum DownloadTarget: Sendable, Equatable {
    /// Exactly this file.
    case file(String)
    /// This directory, under the server-suggested name (Content-Disposition, else the URL).
    case directory(String)
}

/// How one file download behaves.
package struct EngineOptions: Sendable {
    package var headers = HTTPHeaders()
    package var retry = RetryPolicy()
    package var connectTimeout: Double = 30
    package var idleTimeout: Double = 30
    package var maxRedirects = 20
    /// Continue from a partial file with a record (the default); false discards it.
    package var resume = true
    /// Replace an existing destination that is not a Haul partial.
    package var overwrite = false
    /// Create the missing directories above a `.file` target.
    package var createDirectories = false
    /// Once the download has succeeded, its file stays claimed for the rest of the process
    /// (``DestinationClaims/keep(_:savedFrom:)``): the rest of a `haul get` run may not write it
    /// again. False: the claim ends with the download.
    package var keepsClaimWhenSaved = false
    package var caFile: String?
    /// Expected SHA-256 of the whole file (lower-case hex).
    package var sha256: String?
    /// Seconds between progress events.
    package var progressInterval: Double = 0.1
    /// Seconds between durable checkpoints of the resume record.
    package var checkpointInterval: Double = 1
    /// When the bytes written since the last checkpoint are noted in the record (no sync):
    /// what a kill -9 can cost at most.
    package var notes = NotePolicy()
    /// Restarts from zero (the file changed on the server) before giving up.
    package var maxRestarts = 3
    /// Bytes per second for the whole download (shared by its connections); nil for no limit.
    package var maxBytesPerSecond: Int64?
    /// A budget shared with other downloads (an overall limit).
    package var sharedRate: RateBudget?

    package init() {}
}

extension EngineOptions {
    /// A request to `url` with these options' timeouts, CA file and pacing: one of
    /// `connections` transfers sharing the download's rate limit, and the overall budget.
    package func request(_ url: URL, headers: HTTPHeaders, connections: Int = 1) -> TransportRequest {
        var request = TransportRequest(
            url: url, headers: headers, connectTimeout: connectTimeout, idleTimeout: idleTimeout, caFile: caFile)
        request.maxReceiveRate = maxBytesPerSecond.map { max(1, $0 / Int64(max(1, connections))) }
        request.sharedRate = sharedRate
        return request
    }
}

/// What the engine reports while it works.
package enum DownloadEngineEvent: Sendable {
    case started(status: Int, url: URL, destination: String, offset: Int64, totalBytes: Int64?)
    case progress(TransferProgress)
    case retrying(attempt: Int, error: HaulError, delay: Double)
    case restarted(reason: String)
}

/// The result of a finished download.
package struct DownloadOutcome: Sendable, Equatable {
    package var path: String
    package var bytes: Int64
    /// Nothing was transferred: the file was already complete on disk.
    package var alreadyComplete: Bool
}

/// Downloads one URL into one file, resuming and retrying as docs/resume.md describes.
///
/// The decisions live in ``ResumeStateMachine`` and ``RetryPolicy``; this type performs them:
/// transport requests, the partial file and record, redirects, sleeps.
package final class FileDownloader: Sendable {
    package let url: URL
    package let target: DownloadTarget
    package let options: EngineOptions
    private let transport: any HTTPTransport
    package let onEvent: @Sendable (DownloadEngineEvent) -> Void
    /// One reporter for the whole download, so a resumed attempt keeps its speed history.
    fileprivate let reporter: ProgressReporter
    /// The claim on its file (``DestinationClaims``) of the ``SegmentedDownloader`` that runs
    /// this download (every download starts there), which releases or keeps it when done.
    private let claims: DestinationClaims.Owner

    package init(
        url: URL, target: DownloadTarget, options: EngineOptions, transport: any HTTPTransport,
        claims: DestinationClaims.Owner, onEvent: @escaping @Sendable (DownloadEngineEvent) -> Void = { _ in }
    ) {
        self.url = url
        self.target = target
        self.options = options
        self.transport = transport
        self.onEvent = onEvent
        self.claims = claims
        reporter = ProgressReporter(interval: options.progressInterval) { onEvent(.progress($0)) }
    }

    /// Downloads the file. `priorFailures`: tries already spent on this file (a segmented
    /// download's probe that got a busy answer and waited), counted against the retries.
    package func run(priorFailures: Int = 0) async throws(HaulError) -> DownloadOutcome {
        try Self.validate(url)
        ProgressClock.shared.add(reporter)
        defer { ProgressClock.shared.remove(reporter) }
        var destination: String?
        switch target {
        case .file(let path):
            try PartialFile.prepareDirectory(of: path, creating: options.createDirectories)
            destination = path
        case .directory(let dir):
            try PartialFile.createDirectory(dir)
            destination = findRecord(in: dir)
        }

        var machine = ResumeStateMachine(record: nil, origin: url)
        var existingSize: Int64?
        if let destination {
            (machine, existingSize) = try prepare(destination)
        }
        var budget = RetryBudget(options.retry, failures: priorFailures)
        var restarts = 0
        var everReceived = false
        // The most bytes the partial has held: only an attempt that gets past it made progress
        // (one that started over, on a 200 to a Range, and failed as early did not).
        var furthest = machine.resumeOffset
        while true {
            try checkCancelled(destination)
            let attempt = Attempt(
                downloader: self, machine: machine, destination: destination, existingSize: existingSize)
            let result = await perform(attempt)
            machine = attempt.machine
            destination = attempt.destination ?? destination
            existingSize = attempt.existingSize
            everReceived = everReceived || attempt.receivedBytes > 0

            let failure: HaulError
            switch result {
            case .done(let outcome):
                return outcome
            case .failed(let error, let transient):
                attempt.finishWithCheckpoint(after: error)
                machine = attempt.machine
                if !transient || (error.code == .network && !everReceived && attempt.connectRefused) {
                    throw error
                }
                failure = error
            case .again:
                continue
            case .restart(let reason):
                attempt.partial?.discard()
                machine.reset()
                restarts += 1
                if restarts > options.maxRestarts {
                    throw HaulError(
                        .serverChangedFile, "gave up after \(restarts) restarts: \(reason)", path: destination)
                }
                onEvent(.restarted(reason: reason))
                continue
            }
            let reached = attempt.partial?.writtenBytes ?? 0
            if reached > furthest {
                budget.progressed(reached - furthest)
                furthest = reached
            }
            let (number, delay) = try budget.failed(failure)
            onEvent(.retrying(attempt: number, error: failure, delay: delay))
            do { try await Task.sleep(nanoseconds: Seconds.nanoseconds(delay)) } catch {
                throw cancelledError(destination)
            }
        }
    }

    // MARK: - One attempt (with its redirects)

    enum AttemptResult {
        case done(DownloadOutcome)
        case failed(HaulError, transient: Bool)
        case restart(String)
        case again
    }

    private func perform(_ attempt: Attempt) async -> AttemptResult {
        var chain = RedirectChain(url: url, headers: options.headers, maxRedirects: options.maxRedirects)
        while true {
            let current = chain.current
            var request = options.request(current, headers: chain.headers)
            for (name, value) in attempt.machine.resumeHeaders() { request.headers.replace(name, value) }
            let task = transport.start(request, handler: attempt)
            let result = await withTaskCancellationHandler {
                await task.finished()
            } onCancel: {
                task.cancel()
            }
            // From here on the attempt's partial and record are touched by this task only.
            reporter.idle()
            await attempt.checkpointsSettled()
            if let failure = attempt.failure { return .failed(failure, transient: false) }
            if case .failure(let error) = result, error.kind == .cancelled || Task.isCancelled {
                return .failed(cancelledError(attempt.destination), transient: false)
            }
            switch attempt.action {
            case .redirect(let next)?:
                do { try chain.follow(to: next) } catch { return .failed(error, transient: false) }
                attempt.action = nil
                continue
            case .alreadyComplete?:
                if attempt.partial == nil, let destination = attempt.destination {
                    attempt.partial = PartialFile(destination: destination)
                }
                do {
                    let bytes = attempt.machine.record?.totalLength ?? 0
                    // The partial holds the whole file and maybe more (bytes past the record's
                    // claim): exactly the file's bytes are put in place.
                    try attempt.partial?.open(at: bytes)
                    return .done(try await finalize(attempt, bytes: bytes, alreadyComplete: true))
                } catch { return .failed(error, transient: false) }
            case .restart(let reason)?:
                return .restart(reason)
            case .retry(let error)?:
                return .failed(error, transient: true)
            case .fail(let error)?:
                return .failed(error, transient: false)
            case .write?:
                switch result {
                case .success:
                    let total = attempt.machine.record?.totalLength
                    let have = attempt.partial?.writtenBytes ?? 0
                    if let total, have != total {
                        return .failed(
                            HaulError(
                                .incompleteBody,
                                "connection closed after \(have) of \(total) bytes from \(show(current))"
                            ), transient: true)
                    }
                    do {
                        return .done(try await finalize(attempt, bytes: have, alreadyComplete: false))
                    } catch { return .failed(error, transient: false) }
                case .failure(let error):
                    let (haulError, transient) = classify(error, current)
                    return .failed(haulError, transient: transient)
                }
            case nil:
                if attempt.askAgain { return .again }
                if let existing = attempt.existingComplete {
                    do {
                        return .done(
                            try await PartialFile.confirmComplete(
                                existing.path, bytes: existing.bytes, sha256: options.sha256))
                    } catch { return .failed(error, transient: false) }
                }
                guard case .failure(let error) = result else {
                    return .failed(HaulError(.invalidResponse, "no response from \(show(current))"), transient: true)
                }
                let (haulError, transient) = classify(error, current)
                attempt.connectRefused = error.kind == .connect
                return .failed(haulError, transient: transient)
            }
        }
    }

    /// Verifies the checksum, renames the partial into place and reports the final progress.
    private func finalize(
        _ attempt: Attempt, bytes: Int64, alreadyComplete: Bool
    ) async throws(HaulError)
        -> DownloadOutcome
    {
        guard let partial = attempt.partial else { throw HaulError(.invalidResponse, "no partial file") }
        try await partial.commit(replacing: options.overwrite, verifying: options.sha256)
        reporter.finish(bytes, total: bytes)
        return DownloadOutcome(path: partial.destination, bytes: bytes, alreadyComplete: alreadyComplete)
    }

    private func classify(_ error: TransportError, _ url: URL) -> (HaulError, Bool) {
        let e = error.haulError(
            url: url, origin: self.url, connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout)
        return (e, e.isTransient)
    }

    // MARK: - Destination and record

    /// In directory mode, a partial whose record names this URL is where a rerun continues.
    private func findRecord(in dir: String) -> String? {
        guard options.resume else { return nil }
        return RecordIndex.shared.destination(of: ResumeRecord.redacted(url), in: dir)
    }

    /// The state machine for a known destination: its record when resuming, nothing otherwise.
    /// Claims the destination and reads its record; also returns the size of a file already
    /// there (refusing a directory, device or FIFO).
    fileprivate func prepare(
        _ destination: String
    ) throws(HaulError) -> (machine: ResumeStateMachine, existingSize: Int64?) {
        try DestinationClaims.shared.claim(destination, for: claims)
        let existingSize = try PartialFile.checkDestination(destination, overwrite: options.overwrite)
        let record = try PartialFile(destination: destination).prepare(
            for: url, resume: options.resume, overwrite: options.overwrite)
        return (ResumeStateMachine(record: record, origin: url), existingSize)
    }

    private func checkCancelled(_ destination: String?) throws(HaulError) {
        if Task.isCancelled { throw cancelledError(destination) }
    }

    private func cancelledError(_ destination: String?) -> HaulError {
        HaulError(.cancelled, "cancelled", path: destination.map { $0 + ".part" })
    }

    static func validate(_ url: URL) throws(HaulError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw HaulError(.invalidURL, "unsupported URL \(ResumeRecord.redacted(url)) (only http and https)")
        }
        guard let host = url.host, !host.isEmpty else {
            throw HaulError(.invalidURL, "URL has no host: \(ResumeRecord.redacted(url))")
        }
    }

    fileprivate func show(_ u: URL) -> String { ResumeRecord.shown(u, origin: url) }
    fileprivate func emit(_ e: DownloadEngineEvent) { onEvent(e) }
}

/// One request chain: receives the response and body on the transport's thread. Its state is
/// mutated only there while the transfer runs, and read by the engine after `finished()`
/// returns, which orders the accesses; hence `@unchecked Sendable`.
private final class Attempt: TransportHandler, @unchecked Sendable {
    let downloader: FileDownloader
    var machine: ResumeStateMachine
    var destination: String?
    /// The size of a file at the destination when the download was prepared (nil: none).
    var existingSize: Int64?
    var partial: PartialFile?
    var action: ResumeStateMachine.Action?
    var failure: HaulError?
    var existingComplete: DownloadOutcome?
    var receivedBytes: Int64 = 0
    /// Leading body bytes still to compare with the partial instead of writing them.
    private var toCompare: Int64 = 0
    var connectRefused = false
    /// The destination turned out to hold a partial of this URL: ask again with Range.
    var askAgain = false
    private var lastCheckpoint = monotonicSeconds()
    /// When, and at how many bytes written, the record last claimed them (checkpoint or note).
    private var lastNote: (at: Double, bytes: Int64) = (monotonicSeconds(), 0)
    /// The periodic checkpoint running on a Dispatch worker, if any (at most one), and the
    /// error of the last one. Off the transport's thread: its fsync on a slow disk held every
    /// transfer of the process, this one's cancel included (tested).
    private let inFlight = Locked<(done: OneShot<Void>?, error: HaulError?)>((nil, nil))

    init(downloader: FileDownloader, machine: ResumeStateMachine, destination: String?, existingSize: Int64?) {
        self.downloader = downloader
        self.machine = machine
        self.destination = destination
        self.existingSize = existingSize
    }

    func transportDidReceive(response: TransportResponse) -> Bool {
        let action = machine.responseReceived(status: response.status, headers: response.headers, url: response.url)
        self.action = action
        guard case .write(let offset, let discard, let validators) = action else { return false }
        // A 206 for a partial without a validator starts before the resume offset: its first
        // bytes are compared with the disk, not written.
        toCompare = response.status == 206 ? machine.overlapBytes : 0
        if discard {
            downloader.emit(.restarted(reason: "server sent the whole file (HTTP 200) instead of the range asked for"))
        }
        do {
            return try begin(offset: offset, validators: validators, response: response)
        } catch {
            failure = error
            return false
        }
    }

    private func begin(
        offset: Int64, validators: ResumeStateMachine.Validators, response: TransportResponse
    )
        throws(HaulError) -> Bool
    {
        let options = downloader.options
        if destination == nil, case .directory(let dir) = downloader.target {
            let name = SafeFileName.suggestedName(
                contentDisposition: response.headers["Content-Disposition"], url: downloader.url)
            let dest = dir + "/" + name
            destination = dest
            (machine, existingSize) = try downloader.prepare(dest)
            if machine.resumeOffset > 0 {
                // A partial of this URL exists under the suggested name: ask again with Range.
                askAgain = true
                self.action = nil
                return false
            }
        }
        guard let destination else { return false }
        if machine.record == nil, !options.overwrite, let size = existingSize {
            if let total = validators.totalLength, total == size, offset == 0 {
                existingComplete = DownloadOutcome(path: destination, bytes: size, alreadyComplete: true)
                action = nil
                return false
            }
            throw .destinationExists(destination, size: size, serverSize: validators.totalLength)
        }
        let file = partial ?? PartialFile(destination: destination)
        partial = file
        let previous = machine.record
        try file.open(at: offset)
        machine.accept(offset: offset, validators: validators, url: downloader.url, finalURL: response.url)
        downloader.reporter.begin(at: offset, total: machine.record?.totalLength)
        if let previous, !previous.claimsTheSame(as: machine.record) || previous.partial != file.boundIdentity {
            // The record on disk describes other bytes now (a restart from zero, or another
            // version): replace it before writing anything.
            try checkpoint()
        } else if previous != nil {
            // A resume of the same version from where the record ends: the record stays true
            // while bytes are added after it, so no sync holds up the transfer's thread here.
            lastCheckpoint = monotonicSeconds()
        } else if let record = stampedRecord(file) {
            // A fresh download's record is written before its first byte: a partial without one
            // is never trusted (a kill before an asynchronous first record left a partial the
            // next run refused). It claims no bytes, so nothing is synced: a small write here.
            try file.checkpoint(record, syncingData: false)
            lastCheckpoint = monotonicSeconds()
        }
        downloader.emit(
            .started(
                status: response.status, url: response.url, destination: destination, offset: offset,
                totalBytes: validators.totalLength))
        return true
    }

    func transportDidReceive(body: UnsafeRawBufferPointer) -> BodyDisposition {
        guard let partial else { return .abort }
        var body = body
        if toCompare > 0 {
            let n = Int(min(Int64(body.count), toCompare))
            let same: Bool
            do {
                same = try partial.holds(
                    UnsafeRawBufferPointer(rebasing: body[0..<n]), at: partial.writtenBytes - toCompare)
            } catch {
                failure = error
                return .abort
            }
            guard same else {
                action = .restart(
                    reason:
                        "file changed on the server: the bytes before \(partial.writtenBytes) differ from the partial"
                        + " (the server sends no ETag or Last-Modified to ask with)")
                return .abort
            }
            toCompare -= Int64(n)
            body = UnsafeRawBufferPointer(rebasing: body[n...])
            if body.isEmpty { return .proceed }
        }
        do {
            try partial.write(body)
        } catch {
            failure = error
            return .abort
        }
        receivedBytes += Int64(body.count)
        let now = monotonicSeconds()
        if let error = inFlight.withLock({ $0.error }) {
            failure = error
            return .abort
        }
        if now - lastCheckpoint >= downloader.options.checkpointInterval {
            checkpointInBackground(partial)
        } else if downloader.options.notes.isDue(
            bytesSince: partial.writtenBytes - lastNote.bytes, secondsSince: now - lastNote.at)
        {
            partial.note(written: [ByteRange(0, partial.writtenBytes)])
            lastNote = (now, partial.writtenBytes)
        }
        downloader.reporter.update(partial.writtenBytes, total: machine.record?.totalLength, at: now)
        return .proceed
    }

    private func checkpoint() throws(HaulError) {
        guard let partial, let record = stampedRecord(partial) else { return }
        try partial.checkpoint(record)
        lastCheckpoint = monotonicSeconds()
    }

    /// The record claiming what `partial` holds so far, stamped with the time.
    private func stampedRecord(_ partial: PartialFile) -> ResumeRecord? {
        machine.advance(to: partial.writtenBytes)
        guard var record = machine.record else { return nil }
        record.updatedAt = ISO8601DateFormatter().string(from: Date())
        return record
    }

    /// Starts a checkpoint of what is written so far on a Dispatch worker, unless one runs. The
    /// record claims the bytes written before the fsync starts, so it never claims more than
    /// the disk holds; the transfer goes on writing meanwhile.
    private func checkpointInBackground(_ partial: PartialFile, syncingData: Bool = true) {
        lastCheckpoint = monotonicSeconds()
        guard let record = stampedRecord(partial) else { return }
        let syncingData = syncingData || record.ranges.contains { $0.count > 0 }
        let done = OneShot<Void>()
        guard
            inFlight.withLock({ s -> Bool in
                guard s.done == nil else { return false }
                s.done = done
                return true
            })
        else { return }
        Sys.blockingQueue().async { [inFlight] in
            var failed: HaulError?
            do throws(HaulError) { try partial.checkpoint(record, syncingData: syncingData) } catch { failed = error }
            inFlight.withLock { s in
                s.done = nil
                if let failed, s.error == nil { s.error = failed }
            }
            done.fulfill(())
        }
    }

    /// Waits for the checkpoint in flight, if any; a failed one becomes the attempt's failure.
    func checkpointsSettled() async {
        if let done = inFlight.withLock({ $0.done }) { await done.value() }
        if failure == nil, let error = inFlight.withLock({ $0.error }) { failure = error }
    }

    /// Best effort: make the record claim what was written before a failure or cancel.
    /// Checkpoints what the attempt wrote before it failed with `error`, and closes the partial.
    /// Not after a checksum mismatch: that deleted the partial and its record (the checkpoint
    /// wrote the record again, left beside no partial).
    func finishWithCheckpoint(after error: HaulError) {
        guard let partial, machine.record != nil, error.code != .checksumMismatch else { return }
        if failure?.code == .diskFull {
            // The record needs a block of its own: give back the partial's last bytes so that
            // the checkpoint can claim the rest instead of failing for want of space.
            partial.releaseTail(PartialFile.diskFullHeadroom)
        }
        try? checkpoint()
        partial.close()
    }
}
