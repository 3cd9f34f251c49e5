#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Where a download goes.
package enum DownloadTarget: Sendable, Equatable {
    /// Exactly this file.
    case file(String)
    /// This directory, under the server-suggested name (Content-Disposition, else the URL).
    case directory(String)

    /// The file of a `.file` target.
    package var namedFile: String? {
        guard case .file(let path) = self else { return nil }
        return path
    }
}

/// How one file download behaves.
package struct EngineOptions: Sendable {
    package var headers = HTTPHeaders()
    package var retry = RetryPolicy()
    package var connectTimeout: Double = 30
    package var idleTimeout: Double = 30
    package var maxRedirects = 20
    /// Credentials per host (`--netrc`), for every hop of a redirect chain.
    package var netrc: Netrc?
    /// Continue from a partial file with a record (the default); false discards it.
    package var resume = true
    /// Replace an existing destination that is not a Haul partial.
    package var overwrite = false
    /// Ask the server about a file already at the destination (`-N`, docs/conditional-get.md):
    /// a 304 keeps it, a new version replaces it, and its validators are kept in ``validators``.
    package var revalidates = false
    /// Where the validators of revalidated files are kept (nil: nowhere; the file's time is
    /// then asked about).
    package var validators: ValidatorStore?
    /// Create the missing directories above a `.file` target.
    package var createDirectories = false
    /// Once the download has succeeded, its file stays claimed for the rest of the process
    /// (``DestinationClaims/keep(_:savedFrom:)``): the rest of a `haul get` run may not write it
    /// again. False: the claim ends with the download.
    package var keepsClaimWhenSaved = false
    package var connection = ConnectionSettings()
    /// Digests the whole file must have.
    package var checksums: [Checksum] = []
    /// Whether the digests a server vouches for the file with (`Repr-Digest`) are checked when
    /// no ``checksums`` are given (given ones are the caller's word on the file, and win).
    package var checksServerDigests = true
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
    /// The answer to the first probe, already made (``ExpressDownload``); the
    /// ``SegmentedDownloader`` takes it or cancels it.
    package var prefetched: PrefetchedProbe?

    package init() {}
}

extension EngineOptions {
    /// What a file is checked against, given the digests its answers vouched for.
    package func expected(vouched: [Checksum]) -> [Checksum] {
        checksums.isEmpty && checksServerDigests ? vouched : checksums
    }

    /// A request to `url` with these options' timeouts, connection settings and pacing: one of
    /// `connections` transfers sharing the download's rate limit, and the overall budget.
    package func request(_ url: URL, headers: HTTPHeaders, connections: Int = 1) -> TransportRequest {
        var request = TransportRequest(
            url: url, headers: headers, connectTimeout: connectTimeout, idleTimeout: idleTimeout, connection: connection
        )
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
    /// The file in place was asked about and is the server's version (`-N`): kept as it is.
    package var notModified = false
    /// The ETag and Last-Modified of the file, as the answer named them (for revalidation).
    package var etag: String? = nil
    package var lastModified: String? = nil
}

/// Downloads one URL into one file, resuming and retrying as docs/resume.md describes.
///
/// The decisions live in ``DownloadStateMachine`` (with ``ResumeStateMachine``'s head rules and a
/// ``RetryBudget``); this type performs them:
/// transport requests, the partial file and record, redirects, sleeps.
package final class FileDownloader: Sendable {
    package let url: URL
    package let target: DownloadTarget
    package let options: EngineOptions
    private let transport: any HTTPTransport
    package let onEvent: @Sendable (DownloadEngineEvent) -> Void
    /// One reporter for the whole download, so a resumed attempt keeps its speed history.
    let reporter: ProgressReporter
    /// Its place on disk, claimed for the ``SegmentedDownloader`` that runs this download
    /// (every download starts there), which releases or keeps the claim when done.
    let store: DownloadStore

    /// The file in place that the first request asks the server about (`-N`), if any.
    let condition: Condition?

    package init(
        url: URL, target: DownloadTarget, options: EngineOptions, transport: any HTTPTransport,
        claims: DestinationClaims.Owner, condition: Condition? = nil,
        onEvent: @escaping @Sendable (DownloadEngineEvent) -> Void = { _ in }
    ) {
        self.url = url
        self.target = target
        self.options = options
        self.condition = condition
        self.transport = transport
        self.onEvent = onEvent
        store = DownloadStore(url: url, owner: claims, resume: options.resume, overwrite: options.overwrite)
        reporter = ProgressReporter(interval: options.progressInterval) { onEvent(.progress($0)) }
    }

    /// Downloads the file. `priorFailures`: tries already spent on this file (a segmented
    /// download's probe that got a busy answer and waited), counted against the retries.
    package func run(priorFailures: Int = 0) async throws(HaulError) -> DownloadOutcome {
        try Self.validate(url)
        ProgressClock.shared.add(reporter)
        defer { ProgressClock.shared.remove(reporter) }
        // A destination known before the request may be replaced by a revalidated download
        // (a new version, or the rest of one a partial holds); one the answer names may not.
        let known = try store.knownDestination(of: target, creatingDirectories: options.createDirectories)
        var place = try (condition?.path ?? known).map { (destination) throws(HaulError) in
            try store.claim(destination, replacingFile: options.revalidates)
        }
        var machine = DownloadStateMachine(
            record: place?.record, origin: url, retry: options.retry, priorFailures: priorFailures,
            maxRestarts: options.maxRestarts, checkpointInterval: options.checkpointInterval, notes: options.notes)
        machine.resume.condition = condition
        var hashing = Attempt.Hashing()
        while true {
            try checkCancelled(place?.destination)
            machine.attemptStarting(at: monotonicSeconds())
            let attempt = Attempt(downloader: self, machine: machine, place: place, hashing: hashing)
            let end: DownloadStateMachine.AttemptEnd
            switch await perform(attempt) {
            case .done(let outcome):
                return outcome
            case .failed(let error, let transient):
                attempt.finishWithCheckpoint(after: error)
                end = .failed(
                    error, transient: transient, reached: attempt.partial?.writtenBytes ?? 0,
                    connectRefused: attempt.connectRefused)
            case .again:
                end = .askAgain
            case .restart(let reason):
                // Another version: its bytes go, whatever comes next (a restart judged from the
                // answer's head has opened no partial yet; the one on disk is discarded by name).
                (attempt.partial ?? attempt.place?.makePartial())?.discard()
                end = .restart(reason: reason)
            }
            machine = attempt.machine
            place = attempt.place ?? place
            hashing = attempt.hashing
            switch machine.attemptEnded(end, received: attempt.receivedBytes > 0) {
            case .askAgain:
                continue
            case .restart(let reason):
                hashing = Attempt.Hashing()  // another version: other digests
                onEvent(.restarted(reason: reason))
            case .retry(let number, let delay, let error):
                onEvent(.retrying(attempt: number, error: error, delay: delay))
                do { try await Task.sleep(nanoseconds: Seconds.nanoseconds(delay)) } catch {
                    throw cancelledError(place?.destination)
                }
            case .fail(let error) where error.code == .serverChangedFile && error.path == nil:
                throw HaulError(error.code, error.message, path: place?.destination)  // restarts ran out
            case .fail(let error):
                throw error
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
        var chain = RedirectChain(
            url: url, headers: options.headers, maxRedirects: options.maxRedirects, netrc: options.netrc)
        while true {
            let current = chain.current
            var request = options.request(current, headers: chain.headers)
            for (name, value) in attempt.machine.resume.resumeHeaders() { request.headers.replace(name, value) }
            let task = transport.start(request, handler: attempt)
            let result = await task.finishedOrCancelled()
            // From here on the attempt's partial and record are touched by this task only.
            reporter.idle()
            await attempt.checkpointsSettled()
            if let failure = attempt.failure { return .failed(failure, transient: false) }
            if case .failure(let error) = result, error.kind == .cancelled || Task.isCancelled {
                return .failed(cancelledError(attempt.destination), transient: false)
            }
            if case .redirect(let next)? = attempt.action {
                do { try chain.follow(to: next) } catch { return .failed(error, transient: false) }
                attempt.action = nil
                continue
            }
            return await outcome(of: attempt, result, from: current)
        }
    }

    /// What a request of `attempt` to `current` came to, once it ended (not redirected).
    private func outcome(
        of attempt: Attempt, _ result: Result<Void, TransportError>, from current: URL
    ) async -> AttemptResult {
        switch attempt.action {
        case .redirect?:
            return .failed(HaulError(.invalidResponse, "redirect not followed from \(show(current))"), transient: false)
        case .alreadyComplete?:
            if attempt.partial == nil, let place = attempt.place { attempt.partial = place.makePartial() }
            do {
                let bytes = attempt.machine.resume.record?.totalLength ?? 0
                // The partial holds the whole file and maybe more (bytes past the record's
                // claim): exactly the file's bytes are put in place.
                try attempt.partial?.open(at: bytes)
                return .done(try await finalize(attempt, bytes: bytes, alreadyComplete: true))
            } catch { return .failed(error, transient: false) }
        case .notModified(let seen)?:
            guard let condition = attempt.machine.resume.condition else { break }
            do {
                return .done(
                    try await condition.kept(
                        etag: seen.etag, lastModified: seen.lastModified, verifying: options.checksums))
            } catch { return .failed(error, transient: false) }
        case .restart(let reason)?:
            return .restart(reason)
        case .retry(let error)?:
            return .failed(error, transient: true)
        case .fail(let error)?:
            return .failed(error, transient: false)
        case .write?:
            guard case .success = result else { break }
            let total = attempt.machine.resume.record?.totalLength
            let have = attempt.partial?.writtenBytes ?? 0
            if let total, have != total {
                return .failed(
                    HaulError(
                        .incompleteBody, "connection closed after \(have) of \(total) bytes from \(show(current))"),
                    transient: true)
            }
            do { return .done(try await finalize(attempt, bytes: have, alreadyComplete: false)) } catch {
                return .failed(error, transient: false)
            }
        case nil:
            if attempt.askAgain { return .again }
            if let existing = attempt.existingComplete {
                do {
                    return .done(
                        try await DownloadStore.confirmComplete(
                            existing.path, bytes: existing.bytes,
                            verifying: options.expected(vouched: attempt.hashing.vouched)))
                } catch { return .failed(error, transient: false) }
            }
        }
        guard case .failure(let error) = result else {
            return .failed(HaulError(.invalidResponse, "no response from \(show(current))"), transient: true)
        }
        let (haulError, transient) = classify(error, current)
        if attempt.action == nil { attempt.connectRefused = error.kind == .connect }
        return .failed(haulError, transient: transient)
    }

    /// Verifies the checksums (with the digests hashed while writing, where they cover every
    /// byte), renames the partial into place and reports the final progress.
    private func finalize(
        _ attempt: Attempt, bytes: Int64, alreadyComplete: Bool
    ) async throws(HaulError)
        -> DownloadOutcome
    {
        guard let partial = attempt.partial else { throw HaulError(.invalidResponse, "no partial file") }
        try await partial.commit(
            replacing: attempt.place?.replacesFile ?? options.overwrite,
            verifying: attempt.hashing.verification(of: bytes, options))
        reporter.finish(bytes, total: bytes)
        let record = attempt.machine.resume.record
        return DownloadOutcome(
            path: partial.destination, bytes: bytes, alreadyComplete: alreadyComplete, etag: record?.etag,
            lastModified: record?.lastModified)
    }

    private func classify(_ error: TransportError, _ url: URL) -> (HaulError, Bool) {
        let e = error.haulError(
            url: url, origin: self.url, connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout)
        return (e, e.isTransient)
    }

    // MARK: - Cancel and checks

    private func checkCancelled(_ destination: String?) throws(HaulError) {
        if Task.isCancelled { throw cancelledError(destination) }
    }

    private func cancelledError(_ destination: String?) -> HaulError {
        HaulError(.cancelled, "cancelled", path: destination.map(DownloadStore.partialPath(of:)))
    }

    static func validate(_ url: URL) throws(HaulError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw HaulError(.invalidURL, "unsupported URL \(ResumeRecord.redacted(url)) (only http and https)")
        }
        guard let host = url.host, !host.isEmpty else {
            throw HaulError(.invalidURL, "URL has no host: \(ResumeRecord.redacted(url))")
        }
    }

    func show(_ u: URL) -> String { ResumeRecord.shown(u, origin: url) }
    func emit(_ e: DownloadEngineEvent) { onEvent(e) }
}
