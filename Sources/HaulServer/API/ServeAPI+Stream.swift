import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The event stream (`GET /api/v1/events` with `Accept: text/event-stream`): Server-Sent
/// Events. A snapshot of the list first when the caller has no place to resume from (no
/// `Last-Event-ID`, or one older than the events kept), then the stored events in order, each
/// with its number as `id:`; progress of running downloads at most twice a second, without an
/// id (it is not a change to catch up on); a comment line when nothing was sent for 15 s.
/// Everything runs on the HTTP loop's thread, which owns the store.
struct EventStreams {
    struct Stream {
        let exchange: HTTPExchange
        /// The background session whose downloads alone it carries, or nil for all.
        let session: String?
        /// The last event number sent.
        var last: Int64
        /// What was last sent of each running download's progress.
        var progress: [Int64: RunProgress] = [:]
        var lastProgress: ContinuousClock.Instant
        var lastSent: ContinuousClock.Instant
        /// Text not yet handed to the connection: written as the reader takes it, so that
        /// what waits in memory stays bounded whatever the list holds.
        var pending: [UInt8] = []
    }
    var open: [ObjectIdentifier: Stream] = [:]
    /// The most streams at once (a page per tab; more is a 503).
    static let maxOpen = 32
    /// The most downloads a snapshot carries (the list API pages through the rest), and the
    /// most bytes: a snapshot of long URLs stops short of the count (its `count` says so).
    static let snapshotLimit = 1000
    static let snapshotBytes = 4 << 20
    /// What the connection may hold unwritten before the stream waits for its reader; and the
    /// pending text under which more events are read from the store.
    static let unsentHigh = 512 << 10
    static let pendingLow = 256 << 10
    static let piece = 64 << 10
}

extension ServeAPI {
    /// Whether `request` asks for the stream rather than the polling form.
    static func wantsStream(_ request: HTTPRequest) -> Bool {
        request.method == "GET" && request.path == "/api/v1/events"
            && (request.header("Accept")?.lowercased().contains("text/event-stream") ?? false)
    }

    func openStream(_ request: HTTPRequest, _ exchange: HTTPExchange) throws(ServeError) {
        guard streams.open.count < EventStreams.maxOpen else {
            throw ServeError(.serviceUnavailable, "too many event streams open")
        }
        let query = Self.query(request.query)
        let session = try query["session"].map(Self.checkSession)
        let asked =
            request.header("Last-Event-ID").flatMap { HTTPHeaders.decimal($0) }
            ?? query["since"].flatMap { HTTPHeaders.decimal($0) }
        let latest = try store.latestEvent()
        let oldest = try store.oldestEvent()
        var text = "retry: 2000\n\n"
        let from: Int64
        if let asked, asked <= latest, asked >= oldest - 1 {
            from = asked
        } else {
            text += "id: \(latest)\nevent: snapshot\ndata: \(try snapshot(session: session))\n\n"
            from = latest
        }
        exchange.start(
            HTTPReply(
                status: 200, headers: [("Content-Type", "text/event-stream; charset=utf-8")] + Self.common))
        let key = ObjectIdentifier(exchange)
        let now = ContinuousClock.now
        streams.open[key] = EventStreams.Stream(
            exchange: exchange, session: session, last: from, lastProgress: now, lastSent: now,
            pending: Array(text.utf8))
        exchange.onClose { [weak self] in self?.streams.open[key] = nil }
        tick()
    }

    /// Four times a second: new events to every stream, progress twice a second, a comment
    /// line after 15 s of nothing.
    package func tick() {
        guard !streams.open.isEmpty else { return }
        let now = ContinuousClock.now
        // Read once a tick, and only when a stream is due for progress.
        var running: [StoredDownload]?
        // A session's stream skips the events of others: its place moves on to the latest.
        let latest = try? store.latestEvent()
        for (key, var stream) in streams.open {
            guard stream.exchange.isOpen else {
                streams.open[key] = nil
                continue
            }
            var text = ""
            if stream.pending.count < EventStreams.pendingLow {
                let events = (try? store.events(since: stream.last, session: stream.session, limit: 200)) ?? []
                for event in events {
                    text += "id: \(event.seq)\nevent: \(event.kind)\ndata: \(event.body)\n\n"
                    stream.last = event.seq
                }
                if stream.session != nil, events.count < 200, let latest { stream.last = max(stream.last, latest) }
                // Progress only to a reader that keeps up: it is replaced by the next anyway.
                if stream.pending.isEmpty && now - stream.lastProgress >= .milliseconds(500) {
                    stream.lastProgress = now
                    if running == nil {
                        running = (try? store.list(states: [.running], limit: Self.maxDownloads)) ?? []
                    }
                    let ofStream = (running ?? []).filter { stream.session == nil || $0.session == stream.session }
                    text += progressEvents(ofStream, &stream)
                }
            }
            if text.isEmpty && stream.pending.isEmpty && now - stream.lastSent >= .seconds(15) {
                text = ": still here\n\n"
            }
            stream.pending += Array(text.utf8)
            Self.write(&stream, now: now)
            streams.open[key] = stream
        }
    }

    /// Hands pending text to the connection in pieces while it holds less than
    /// ``EventStreams/unsentHigh`` unwritten.
    private static func write(_ stream: inout EventStreams.Stream, now: ContinuousClock.Instant) {
        while !stream.pending.isEmpty, let unsent = stream.exchange.unsentOnLoop(), unsent < EventStreams.unsentHigh {
            let n = min(EventStreams.piece, stream.pending.count)
            stream.exchange.sendOnLoop(stream.pending[..<n])
            stream.pending.removeFirst(n)
            stream.lastSent = now
        }
    }

    /// The snapshot: the first downloads in queue order, up to ``EventStreams/snapshotLimit``
    /// and about ``EventStreams/snapshotBytes``, and how many the list holds. For a background
    /// session: its downloads that are unfinished or whose end it was not told of, untold ends
    /// first (``ServeStore/unsettled(session:limit:)``).
    private func snapshot(session: String?) throws(ServeError) -> String {
        struct Snapshot: Encodable {
            var downloads: [DownloadJSON]
            var count: Int
        }
        var items: [DownloadJSON] = []
        var bytes = 0
        let list: [StoredDownload]
        if let session {
            list = try store.unsettled(session: session, limit: snapshotLimit)
        } else {
            list = try store.list(limit: snapshotLimit)
        }
        for item in list {
            let shown = shown(item)
            bytes += item.url.utf8.count + (item.name?.utf8.count ?? 0) + (item.error?.utf8.count ?? 0) + 400
            if bytes > EventStreams.snapshotBytes { break }
            items.append(shown)
        }
        var count = try store.count()
        if let session { count = try store.unsettledCount(session: session) }
        return try Self.text(Snapshot(downloads: items, count: count))
    }

    /// `progress` events of the running downloads whose bytes moved since this stream's last.
    private func progressEvents(_ running: [StoredDownload], _ stream: inout EventStreams.Stream) -> String {
        var text = ""
        var seen: [Int64: RunProgress] = [:]
        for item in running {
            guard let progress = runner?.progress(item.id) else { continue }
            seen[item.id] = progress
            guard stream.progress[item.id] != progress else { continue }
            let total = progress.total ?? item.total
            let event = ProgressEvent(
                id: item.id, done: progress.done, total: total, speed: progress.speed,
                eta: DownloadJSON.eta(done: progress.done, total: total, speed: progress.speed))
            guard let body = try? Self.text(event) else { continue }
            text += "event: progress\ndata: \(body)\n\n"
        }
        stream.progress = seen
        return text
    }
}
