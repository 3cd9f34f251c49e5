#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One segmented transfer: the workers, the shared plan and the checkpoints.
final class SegmentedRun: Sendable {
    /// The download this run is the ranged part of: its URL, options, transport and events.
    let download: SegmentedDownloader
    let total: Int64
    let probe: SegmentedDownloader.Probe
    let partial: PartialFile
    /// The URL the download was asked for; the ranges go where its redirects ended
    /// (``location``).
    var origin: URL { download.url }
    var options: EngineOptions { download.options }
    var transport: any HTTPTransport { download.transport }
    var onEvent: @Sendable (DownloadEngineEvent) -> Void { download.onEvent }
    var segments: SegmentOptions { download.segmentOptions }
    var connections: Int { download.segmentOptions.connections }
    private struct State {
        var planner: SegmentPlanner
        /// The download's retries, shared by its connections (each range's bytes refill it).
        var decisions: RangesStateMachine
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
        var location: (url: URL, headers: HTTPHeaders, beenOnTLS: Bool)
        /// When, and at how many bytes written, the ranges were last noted in the record.
        var lastNote: (at: Double, bytes: Int64) = (monotonicSeconds(), 0)
    }
    private let state: Locked<State>
    /// Progress of all ranges together.
    let reporter: ProgressReporter

    init(
        of download: SegmentedDownloader, total: Int64, probe: SegmentedDownloader.Probe, partial: PartialFile,
        planner: SegmentPlanner
    ) {
        self.download = download
        self.total = total
        self.probe = probe
        self.partial = partial
        state = Locked(
            State(
                planner: planner, decisions: RangesStateMachine(retry: download.options.retry),
                location: (probe.finalURL, probe.headers, probe.beenOnTLS)))
        let onEvent = download.onEvent
        reporter = ProgressReporter(interval: download.options.progressInterval) { onEvent(.progress($0)) }
    }

    var completedBytes: Int64 { state.withLock { $0.planner.completedBytes } }

    /// Where ranges are asked for now.
    var location: (url: URL, headers: HTTPHeaders, beenOnTLS: Bool) { state.withLock { $0.location } }

    /// The probe was redirected: its final URL may stop working (a signed link expires) while
    /// the original one still leads to the file.
    var redirected: Bool { probe.finalURL.absoluteString != origin.absoluteString }

    /// A range answered from `url`: later ranges are asked there.
    func moved(to url: URL, headers: HTTPHeaders, beenOnTLS: Bool) {
        state.withLock { s in
            if s.location.url.absoluteString != url.absoluteString { s.location = (url, headers, beenOnTLS) }
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
        // Before its bytes flow: the transport's thread reads it (written in perform(adopting:),
        // it races with the first bytes, as ThreadSanitizer reports).
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
        record.updatedAt = Date().formatted(.iso8601)
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
    /// completes the range and the other stops. A stalled or slowed connection does not hold
    /// up the end; and a server that gives each request an allowance at once (nginx's
    /// `limit_rate` sends a request's first 2 MiB at once, then 2 MiB every 0.5 s; the halves
    /// stolen at the end come in within milliseconds) hands a new request the rest at once,
    /// where the running one would wait for its next burst. Where connections run alike (a
    /// steady per-connection cap, a fast link) new requests are no faster and nothing is asked
    /// twice. Not under a rate limit: a paced connection is slow on purpose, and the duplicate
    /// would take the others' budget. Nil when no range can be raced any more.
    private func raceSlowerRange() async -> SegmentPlanner.Segment? {
        guard connections > 1, options.maxBytesPerSecond == nil, options.sharedRate?.rate == nil else { return nil }
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
            ended(fetch, serial: serial, result)
            let end: RangesStateMachine.FetchEnd
            switch result {
            case .success: end = .fetched
            case .failure(let error) where fetch.replaced: end = .replaced(error)
            case .failure(let error):
                let othersFlowing = state.withLock { $0.fetches.values.contains { $0.flowing } }
                end = .failed(error, flowing: fetch.flowing, othersFlowing: othersFlowing)
            }
            switch state.withLock({ $0.decisions.rangeEnded(end, slowStreak: &slowStreak) }) {
            case .takeNext: continue
            case .replace(let attempt, let error): onEvent(.retrying(attempt: attempt, error: error, delay: 0))
            case .leave: return .success(())
            case .retry(let attempt, let delay, let error):
                onEvent(.retrying(attempt: attempt, error: error, delay: delay))
                try? await Task.sleep(nanoseconds: Seconds.nanoseconds(delay))
            case .fail(let error): return .failure(error)
            }
        }
        return .success(())
    }

    /// Books a fetch's end: its range back to the plan, its bytes to the decisions' retry budget
    /// (they are in the file, whatever the end) and its speed to the slow-connection watch.
    private func ended(_ fetch: SegmentFetch, serial: Int, _ result: Result<Void, HaulError>) {
        let now = monotonicSeconds()
        state.withLock {
            $0.planner.release(fetch.segment.id)
            $0.fetches[serial] = nil
            $0.decisions.fetched(fetch.wrote)
            guard let since = fetch.answeredAt else { return }
            $0.detector.ended(serial, bytes: fetch.wrote, seconds: now - since, at: now)
            // Timed on the transport's clock (head to last byte), not to this task's turn, which
            // can come much later on a loaded machine.
            let last = fetch.lastByteAt ?? now
            if case .success = result, !fetch.settled, fetch.wrote >= 64 << 10, last > since {
                $0.recentSpeeds = $0.recentSpeeds.suffix(3) + [Double(fetch.wrote) / (last - since)]
            }
        }
    }

    /// Samples every running fetch a few times a second and replaces the slow ones (their
    /// bytes stay written; the worker asks for the rest of the range on a new connection).
    private func watchForSlowConnections() async {
        // Paced connections (a rate limit) are slow on purpose, and one connection (filling the
        // gaps of a partial) has no others to be slower than: only an absolute floor applies.
        let paced = options.maxBytesPerSecond != nil || options.sharedRate?.rate != nil
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

    func end(of id: Int) -> Int64 { state.withLock { $0.planner.end(of: id) ?? 0 } }

    func wrote(_ id: Int, upTo cursor: Int64, by writer: SegmentFetch) {
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
