import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A download of a ``BackgroundSession``, as `haul serve` runs it.
public struct BackgroundDownload: Sendable, Identifiable, Equatable {
    /// Where it stands in the daemon.
    public enum State: String, Sendable, Equatable, CaseIterable {
        /// Waiting for its turn in the queue.
        case queued
        /// Transferring.
        case running
        /// Stopped by a pause (``BackgroundSession/pause(_:)``, `haul pause`, the page); its
        /// bytes are kept.
        case paused
        /// Stopped until the network allows it again; its bytes are kept.
        case waiting
        /// Its file is complete at ``BackgroundDownload/fileURL``.
        case completed
        /// It stopped for the reason in ``BackgroundDownload/failureReason``; a
        /// ``BackgroundSession/resume(_:)`` tries again from its bytes.
        case failed
        /// Cancelled: its partial file was removed.
        case cancelled

        /// Completed, failed or cancelled.
        public var isEnded: Bool { self == .completed || self == .failed || self == .cancelled }
    }

    /// The daemon's number for it (`haul ls` shows the same).
    public let id: Int64
    /// The URL.
    public var url: URL
    /// Where it stands.
    public var state: State
    /// Its file (the partial file until it completes), once the daemon chose it: under the
    /// daemon's download directory.
    public var fileURL: URL?
    /// Bytes done and the size when known; the speed while it runs.
    public var progress: TransferProgress
    /// Why it failed, in one line.
    public var failureReason: String?
    /// Its place in the queue: a higher priority goes first.
    public var priority: Int
    /// When it was added, and when it ended.
    public var dateAdded: Date
    public var dateFinished: Date?
}

extension BackgroundDownload {
    /// A download as the daemon's API shows it (docs/api.md); unknown fields are skipped.
    struct Wire: Decodable {
        var id: Int64
        var url: String
        var state: String
        var priority: Int64?
        var added: Double?
        var finished: Double?
        var error: String?
        var file: String?
        var done: Int64?
        var total: Int64?
        var speed: Double?
        var told: Bool?
    }

    /// The download `wire` shows, its file under `root`; nil for what this library cannot read
    /// (a state it does not know, a URL that does not parse, a file name leaving the root).
    init?(_ wire: Wire, root: URL?) {
        guard let state = State(rawValue: wire.state), let url = URL(string: wire.url) else { return nil }
        id = wire.id
        self.url = url
        self.state = state
        fileURL = nil
        if let file = wire.file, let root {
            // The daemon gives a path under its root; one that would leave it is not shown
            // (judged on bytes: "/" and a combining mark after it are one Character).
            let parts = Sys.components(file)
            if !file.isEmpty, !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) {
                fileURL = root.appendingPathComponent(file, isDirectory: false)
            }
        }
        progress = Self.progress(done: wire.done ?? 0, total: wire.total, speed: wire.speed)
        failureReason = wire.error
        priority = Int(clamping: wire.priority ?? 0)
        dateAdded = Date(timeIntervalSince1970: wire.added ?? 0)
        dateFinished = wire.finished.map(Date.init(timeIntervalSince1970:))
    }

    /// The daemon's figures as progress, none below zero (a time left is then never negative
    /// or past what a Double holds).
    static func progress(done: Int64, total: Int64?, speed: Double?) -> TransferProgress {
        let speed = speed.map { $0.isFinite ? Swift.max(0, $0) : 0 } ?? 0
        return TransferProgress(
            completedBytes: Swift.max(0, done), totalBytes: total.map { Swift.max(0, $0) }, bytesPerSecond: speed,
            smoothedBytesPerSecond: speed)
    }
}
