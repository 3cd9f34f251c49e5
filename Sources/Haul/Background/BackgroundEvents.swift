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
    /// session, whichever of its processes asks first, and only after the daemon recorded it
    /// told: a process that stops while handling it is not told again (the list still shows it).
    case finished(BackgroundDownload)
    /// Every download that ended while the session was not told has been: what comes next is
    /// live (URLSession's `urlSessionDidFinishEvents(forBackgroundURLSession:)`). Once per
    /// iteration of ``BackgroundSession/events``.
    case caughtUp
    /// A download of the session was added or changed state (queued, running, paused, waiting).
    case updated(BackgroundDownload)
    /// A running download's bytes moved (at most twice a second for each).
    case progress(id: BackgroundDownload.ID, TransferProgress)
    /// A download was taken off the list.
    case removed(id: BackgroundDownload.ID)
}

/// ``BackgroundSession/events``: each iteration reads a stream of its own from the daemon,
/// and connects again (with the daemon's address and token read again) when it ends, as after
/// a restart of the daemon; past ``reconnectWindow`` seconds without one it throws
/// ``HaulError/Code/daemonNotRunning``. A cancelled task ends it.
public struct BackgroundEvents: AsyncSequence, Sendable {
    public typealias Element = BackgroundEvent
    public typealias Failure = HaulError

    let session: BackgroundSession
    /// How long an iteration tries to reach the daemon again before it throws.
    public var reconnectWindow: Double = 60

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(session: session, window: reconnectWindow) }

    /// Reads the daemon's event stream for the session.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Element = BackgroundEvent
        public typealias Failure = HaulError

        let session: BackgroundSession
        let window: Double
        private var ready: [BackgroundEvent] = []
        private var stream: ByteStream?
        private var chunks: ByteStream.AsyncIterator?
        private var reader = EventStreamReader()
        private var caughtUp = false
        /// A snapshot held more than it carried: connect again for the rest before `caughtUp`.
        private var more = false
        /// Ends this iteration handed out, until the download goes again.
        private var told: Set<BackgroundDownload.ID> = []
        /// The state each download was last seen in, for the changes a reconnect missed.
        private var known: [BackgroundDownload.ID: BackgroundDownload.State] = [:]

        init(session: BackgroundSession, window: Double) {
            self.session = session
            self.window = window
        }

        public mutating func next() async throws(HaulError) -> BackgroundEvent? {
            while !Task.isCancelled {
                if !ready.isEmpty {
                    let event = ready.removeFirst()
                    guard case .finished(let download) = event else { return event }
                    // Told first, then handed out: two processes of the session cannot both be.
                    let tellable: Bool
                    do throws(HaulError) { tellable = try await session.tell(download.id) } catch {
                        // The daemon is gone or the download with it: the next snapshot shows
                        // whatever is still untold.
                        if error.code == .usage || error.code == .httpStatus { continue }
                        disconnect()
                        continue
                    }
                    guard tellable else { continue }
                    told.insert(download.id)
                    return event
                }
                if more {
                    more = false
                    disconnect()
                }
                if chunks == nil { try await connect() }
                let chunk: Data?
                do { chunk = try await chunks?.next() } catch { chunk = nil }
                guard let chunk else {
                    disconnect()
                    continue
                }
                for event in try reader.take(Array(chunk)) { take(event) }
            }
            disconnect()
            return nil
        }

        /// Opens the session's stream, trying again (the door read anew each time) with a
        /// growing pause until ``window`` has passed.
        private mutating func connect() async throws(HaulError) {
            let start = ContinuousClock.now
            var pause = 0.1
            var client = session.client
            while true {
                do throws(HaulError) {
                    let opened = try await client.events(session: session.identifier)
                    (stream, chunks, reader) = (opened, opened.makeAsyncIterator(), EventStreamReader())
                    return
                } catch {
                    guard error.code == .daemonNotRunning || error.code == .network || error.code == .httpStatus,
                        Seconds.of(ContinuousClock.now - start) < window, !Task.isCancelled
                    else { throw error }
                }
                try? await Task.sleep(nanoseconds: UInt64(pause * 1e9))
                pause = Swift.min(pause * 2, 2)
                if let again = try? await session.reopen() { client = again }
            }
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
            case "snapshot":
                struct Snapshot: Decodable {
                    var downloads: [BackgroundDownload.Wire]
                    var count: Int
                }
                guard let snapshot = try? decoder.decode(Snapshot.self, from: data) else { return }
                var untold = 0
                for wire in snapshot.downloads {
                    guard let download = BackgroundDownload(wire, root: session.downloadDirectory) else { continue }
                    if download.state.isEnded {
                        if wire.told != true && !told.contains(download.id) {
                            ready.append(.finished(download))
                            untold += 1
                        }
                    } else if caughtUp && known[download.id] != download.state {
                        told.remove(download.id)
                        ready.append(.updated(download))
                    }
                    known[download.id] = download.state
                }
                // More than one snapshot holds: the rest once these are told (each told one
                // leaves the next snapshot).
                if snapshot.count > snapshot.downloads.count && untold > 0 {
                    more = true
                } else if !caughtUp {
                    caughtUp = true
                    ready.append(.caughtUp)
                }
            case "added", "state":
                guard let wire = try? decoder.decode(BackgroundDownload.Wire.self, from: data),
                    let download = BackgroundDownload(wire, root: session.downloadDirectory)
                else { return }
                known[download.id] = download.state
                if download.state.isEnded {
                    if wire.told != true && !told.contains(download.id) { ready.append(.finished(download)) }
                } else {
                    told.remove(download.id)
                    ready.append(.updated(download))
                }
            case "progress":
                struct Progress: Decodable {
                    var id: Int64
                    var done: Int64
                    var total: Int64?
                    var speed: Double?
                }
                guard let p = try? decoder.decode(Progress.self, from: data) else { return }
                ready.append(
                    .progress(
                        id: p.id,
                        TransferProgress(
                            completedBytes: p.done, totalBytes: p.total, bytesPerSecond: p.speed ?? 0,
                            smoothedBytesPerSecond: p.speed ?? 0)))
            case "removed":
                struct Removed: Decodable { var id: Int64 }
                guard let removed = try? decoder.decode(Removed.self, from: data) else { return }
                known[removed.id] = nil
                told.remove(removed.id)
                ready.append(.removed(id: removed.id))
            default: break
            }
        }
    }
}
