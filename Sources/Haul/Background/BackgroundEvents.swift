import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What a ``BackgroundSession`` is told.
public enum BackgroundEvent: Sendable, Equatable {
    /// A download of the session ended: completed (its file at
    /// ``BackgroundDownload/fileURL``), failed or cancelled. Each end is told once to the
    /// session, whichever of its processes asks first, and the daemon records it told before
    /// it is handed out: a process that stops while handling it is not told again (the list
    /// still shows the download). An end told to another process comes as ``updated(_:)``.
    case finished(BackgroundDownload)
    /// Every download that ended while the session was not told has been: what comes next is
    /// live (URLSession's `urlSessionDidFinishEvents(forBackgroundURLSession:)`). Once per
    /// iteration of ``BackgroundSession/events``.
    case caughtUp
    /// A download of the session was added or changed state (queued, running, paused,
    /// waiting), or ended and the end was told to another process of the session.
    case updated(BackgroundDownload)
    /// A running download's bytes moved (at most twice a second for each).
    case progress(id: BackgroundDownload.ID, TransferProgress)
    /// A download was taken off the list.
    case removed(id: BackgroundDownload.ID)
}

/// ``BackgroundSession/events``: each iteration reads a stream of its own from the daemon.
/// When the stream ends (the daemon stopped or restarted) it connects again, the daemon's
/// address and token read again and its proof checked before the token is sent, with pauses
/// growing from 0.1 s to 2 s, and starts from a fresh snapshot: the ends it has not been told
/// of (first any whose tell failed, asked about again), the unfinished downloads whose state
/// changed meanwhile or that were removed. Past ``reconnectWindow`` seconds of failing (no
/// stream, no snapshot, tells that fail) it throws the last error
/// (``HaulError/Code/daemonNotRunning`` when none answers). A cancelled task ends it (nil).
public struct BackgroundEvents: AsyncSequence, Sendable {
    public typealias Element = BackgroundEvent
    public typealias Failure = HaulError

    let session: BackgroundSession
    /// How long an iteration tries to reach the daemon again before it throws, in seconds.
    public var reconnectWindow: Double = 60

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(session: session, window: reconnectWindow) }

    /// Reads the daemon's event stream for the session.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Element = BackgroundEvent
        public typealias Failure = HaulError

        let session: BackgroundSession
        let window: Double
        /// This iteration's name to the daemon when it is told of an end: asking again with
        /// it after a lost answer is still this iteration's.
        private let claim = Hex.string((0..<16).map { _ in UInt8.random(in: 0...255) })
        private var ready: [BackgroundEvent] = []
        private var stream: ByteStream?
        private var chunks: ByteStream.AsyncIterator?
        private var reader = EventStreamReader()
        private var caughtUp = false
        /// A snapshot held fewer than the session has: connect again for the rest before
        /// `caughtUp`.
        private var more = false
        /// The ends handed out (id, state, time): one end is handed out once, another end of
        /// the same download (resumed, failed again) is news.
        private var handed: Set<String> = []
        /// The state each unfinished download was last seen in, for what a reconnect missed.
        private var known: [BackgroundDownload.ID: BackgroundDownload.State] = [:]
        /// Downloads to ask the daemon about after a reconnect (not in its snapshot), with the
        /// state they were last seen in.
        private var missing: [(id: BackgroundDownload.ID, state: BackgroundDownload.State)] = []
        /// Ends whose tell failed (the answer may have been lost after the daemon recorded it):
        /// asked about again with this iteration's claim once the next snapshot came, first.
        private var retold: [BackgroundDownload] = []
        /// Since when the iteration has failed to get a snapshot and settle its ends, and the
        /// pause before the next connection.
        private var failingSince: ContinuousClock.Instant?
        private var pause = 0.1
        private var connections = 0
        /// This connection's snapshot was taken, and whether one could not be read or an end
        /// of it could not be told.
        private var snapshotTaken = false
        private var unreadable = false
        private var tellFailed = false

        init(session: BackgroundSession, window: Double) {
            self.session = session
            self.window = window
        }

        public mutating func next() async throws(HaulError) -> BackgroundEvent? {
            while !Task.isCancelled {
                if !ready.isEmpty {
                    if let event = try await handOut(ready.removeFirst()) { return event }
                    continue
                }
                if let (id, state) = missing.popLast() {
                    // Not in the snapshot: removed, or ended and told to another process.
                    do throws(HaulError) {
                        let now = try await session.current(id)
                        ready.append(now.map { .updated($0) } ?? .removed(id: id))
                    } catch {
                        known[id] = state  // asked about again after the next snapshot
                        try failed(error)
                    }
                    continue
                }
                if unreadable {
                    unreadable = false
                    try failed(HaulError(.invalidResponse, "haul serve's event stream did not begin with a snapshot"))
                }
                // What this connection's snapshot held is settled: the next failure starts anew.
                if snapshotTaken && !tellFailed && failingSince != nil { (failingSince, pause) = (nil, 0.1) }
                if more {
                    more = false
                    disconnect()
                }
                if chunks == nil {
                    guard try await connect() else { break }
                }
                let chunk: Data?
                do { chunk = try await chunks?.next() } catch { chunk = nil }
                guard let chunk else {
                    try failed(DaemonClient.notRunning("its event stream ended"))
                    continue
                }
                for event in try reader.take(Array(chunk)) { take(event) }
            }
            disconnect()
            return nil
        }

        /// Drops the stream after `error`; throws it once the iteration has been failing for
        /// longer than ``window``.
        private mutating func failed(_ error: HaulError) throws(HaulError) {
            disconnect()
            let since = failingSince ?? ContinuousClock.now
            failingSince = since
            if Seconds.of(ContinuousClock.now - since) >= window { throw error }
        }

        /// An end is handed out once the daemon recorded this iteration told (another
        /// process's is an update); anything else as it is.
        private mutating func handOut(_ event: BackgroundEvent) async throws(HaulError) -> BackgroundEvent? {
            guard case .finished(let download) = event else { return event }
            let key = "\(download.id) \(download.state.rawValue) \(download.dateFinished?.timeIntervalSince1970 ?? 0)"
            guard !handed.contains(key) else { return nil }
            let told: Bool
            do throws(HaulError) { told = try await session.tell(download.id, claim: claim) } catch {
                // Not an ended download of the session's (removed meanwhile): nothing to tell.
                if error.code == .usage { return nil }
                // The daemon may have recorded it before the answer was lost: asked again with
                // this claim after the next snapshot. The other ends come again in it (untold),
                // and nothing says caught up before them.
                retold.append(download)
                tellFailed = true
                if ready.contains(.caughtUp) { caughtUp = false }
                ready.removeAll { event in
                    if case .finished = event { return true }
                    return event == .caughtUp
                }
                try failed(error)
                return nil
            }
            guard told else { return .updated(download) }
            handed.insert(key)
            return event
        }

        /// Opens the session's stream through a door opened for it, after the pause the
        /// failures so far call for; false when the task was cancelled.
        private mutating func connect() async throws(HaulError) -> Bool {
            if connections > 0 {
                try? await Task.sleep(nanoseconds: UInt64(pause * 1e9))
                pause = Swift.min(pause * 2, 2)
            }
            connections += 1
            if Task.isCancelled { return false }
            do throws(HaulError) {
                let client = try await session.open()
                try await session.readRoot(client)
                let opened = try await client.events(session: session.identifier)
                (stream, chunks, reader) = (opened, opened.makeAsyncIterator(), EventStreamReader())
                (snapshotTaken, tellFailed) = (false, false)
            } catch {
                if Task.isCancelled { return false }
                guard error.code == .daemonNotRunning || error.code == .network || error.code == .httpStatus else {
                    throw error
                }
                try failed(error)
            }
            return true
        }

        private mutating func disconnect() {
            stream?.cancel()
            (stream, chunks) = (nil, nil)
        }

        /// One event of the daemon's, as what the session is told.
        private mutating func take(_ event: EventStreamReader.Event) {
            let data = Data(event.data.utf8)
            let decoder = JSONDecoder()
            switch event.name {
            case "snapshot": takeSnapshot(data)
            case _ where !snapshotTaken:
                unreadable = true  // the daemon begins every stream of a session with one
            case "added", "state":
                guard let wire = try? decoder.decode(BackgroundDownload.Wire.self, from: data),
                    let download = BackgroundDownload(wire, root: session.downloadDirectory)
                else { return }
                if download.state.isEnded {
                    known[download.id] = nil
                    ready.append(wire.told == true ? .updated(download) : .finished(download))
                } else {
                    known[download.id] = download.state
                    ready.append(.updated(download))
                }
            case "progress":
                guard let p = try? decoder.decode(ProgressEvent.self, from: data) else { return }
                ready.append(
                    .progress(id: p.id, BackgroundDownload.progress(done: p.done, total: p.total, speed: p.speed)))
            case "removed":
                guard let removed = try? decoder.decode(RemovedEvent.self, from: data) else { return }
                known[removed.id] = nil
                ready.append(.removed(id: removed.id))
            default: break
            }
        }

        /// The snapshot a connection begins with: the ends to tell (any whose tell failed
        /// first), what changed while the iteration was away, then `caughtUp` or more to fetch.
        private mutating func takeSnapshot(_ data: Data) {
            struct Snapshot: Decodable {
                var downloads: [BackgroundDownload.Wire]
                var count: Int
            }
            guard let snapshot = try? JSONDecoder().decode(Snapshot.self, from: data) else {
                unreadable = true
                return
            }
            snapshotTaken = true
            // Ends whose tell failed first, asked about again with this iteration's claim.
            ready += retold.map { .finished($0) }
            retold = []
            var untold = 0
            var seen: Set<BackgroundDownload.ID> = []
            for wire in snapshot.downloads {
                guard let download = BackgroundDownload(wire, root: session.downloadDirectory) else { continue }
                seen.insert(download.id)
                if download.state.isEnded {
                    known[download.id] = nil
                    if wire.told != true {
                        ready.append(.finished(download))
                        untold += 1
                    }
                } else {
                    if caughtUp && known[download.id] != download.state { ready.append(.updated(download)) }
                    known[download.id] = download.state
                }
            }
            let complete = snapshot.count <= snapshot.downloads.count
            if caughtUp && complete {
                missing = known.filter { !seen.contains($0.key) }.map { (id: $0.key, state: $0.value) }
                for (id, _) in missing { known[id] = nil }
            }
            // More than one snapshot holds: the rest once these are told (each told one
            // leaves the next snapshot).
            if !complete && untold > 0 {
                more = true
            } else if !caughtUp {
                caughtUp = true
                ready.append(.caughtUp)
            }
        }
    }
}
