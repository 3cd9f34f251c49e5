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
        defer {
            dropPrefetched()
            DestinationClaims.shared.releaseAll(of: claims)
        }
        let resuming = store.waitingRecord(at: target)
        // A file in place is asked about (`-N`) unless a partial of this URL is to be continued,
        // or it is to be replaced anyway (`--overwrite`).
        let condition =
            options.revalidates && !options.overwrite && resuming == nil
            ? options.validators?.condition(for: url, target: target) : nil
        let outcome = try await download(resuming: resuming, asking: condition)
        if options.revalidates, let validators = options.validators {
            if let condition, outcome.notModified {
                validators.saveUnchanged(
                    url, target: target, asked: condition, etag: outcome.etag, lastModified: outcome.lastModified)
            } else {
                validators.save(
                    url, target: target, path: outcome.path, etag: outcome.etag, lastModified: outcome.lastModified,
                    settingTime: true)
            }
        }
        if options.keepsClaimWhenSaved { DestinationClaims.shared.keep(claims, savedFrom: url) }
        return outcome
    }

    private func download(
        resuming: ResumeRecord?, asking condition: Condition?
    ) async throws(HaulError)
        -> DownloadOutcome
    {
        // One connection is a plain download, unless a partial left by several has gaps between
        // its ranges: then they are fetched one after another, where a plain resume would ask
        // for everything after the first range's bytes again.
        if segmentOptions.connections == 1, (resuming?.ranges.count ?? 0) < 2 {
            dropPrefetched()  // a held transfer must not keep a connection slot from this one
            return try await single(condition).run()
        }
        try FileDownloader.validate(url)
        // A named file's destination is claimed and its side files judged before any request
        // (a refusal asks nothing of the server); into a directory, once the answer names it,
        // unless it holds a file to ask about or this URL's partial to continue.
        var place: DownloadStore.Place?
        let known = try store.knownDestination(of: target, creatingDirectories: options.createDirectories)
        if let path = condition?.path ?? known {
            place = try store.claim(path, replacingFile: options.revalidates)
        }
        let (found, failedTries) = try await probe(resuming: resuming != nil, asking: condition)
        guard let probe = found else { return try await single(condition).run(priorFailures: failedTries) }
        if probe.notModified, let condition {
            return try await condition.kept(
                etag: probe.etagAsSent, lastModified: probe.lastModified, verifying: options.checksums)
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
        guard let total = probe.total, total / 2 >= segmentOptions.minSplit,
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

    /// The answer to the first probe made ahead (``EngineOptions/prefetched``), for a fresh
    /// download's first probe to `url` with `limit`: taken once; nil (and its transfer
    /// cancelled) when it was not made for this probe.
    func takePrefetched(limit: Int) -> (ProbeFetch, any TransportTask)? {
        guard let prefetched = options.prefetched else { return nil }
        guard prefetched.limit == limit, prefetched.url == url else {
            prefetched.drop()
            return nil
        }
        return prefetched.take()
    }

    /// Cancels the prefetched answer's transfer, if it was not taken (a download that makes no
    /// probe, or one that asks another question).
    func dropPrefetched() { options.prefetched?.drop() }

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
