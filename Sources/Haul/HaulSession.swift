import Foundation
import HaulCore

/// Where a download is saved.
public enum DownloadDestination: Sendable, Equatable {
    /// Exactly this file. Partial data goes to `<file>.part`, the resume record to `<file>.haul`.
    case file(URL)
    /// This directory (created if missing), under the server-suggested name: Content-Disposition,
    /// else the URL's last path segment, made safe (no directories, `..`, control characters).
    case directory(URL)
}

/// Per-download choices.
public struct DownloadOptions: Sendable, Equatable {
    /// Continue from `<file>.part` when its resume record matches (default); false starts over.
    public var resume = true
    /// Replace a destination that exists and is not a Haul partial. Without it such a file is
    /// never touched: if the server reports the same size the download is already complete,
    /// otherwise it fails with ``HaulError/Code/destinationExists``.
    public var overwrite = false
    /// Expected SHA-256 of the file (hex); a mismatch fails with ``HaulError/Code/checksumMismatch``.
    public var sha256: String?
    /// Extra headers for this download only.
    public var headers: [String: String] = [:]
    /// Creates the defaults.
    public init() {}
}

/// Something that happened during a download, in order.
public enum DownloadEvent: Sendable {
    /// The server answered and bytes are about to arrive.
    case started(DownloadStart)
    /// Bytes arrived (at most one event per ``HaulConfiguration/progressInterval``).
    case progress(TransferProgress)
    /// A transient failure; the download continues after `delay` seconds from the bytes on disk.
    case retrying(attempt: Int, error: HaulError, delay: Double)
    /// The bytes on disk were discarded (the file changed on the server, or it ignored Range).
    case restarted(reason: String)
    /// A ``DownloadTask`` was suspended: the transfer stopped, its bytes are kept.
    case suspended
    /// A suspended ``DownloadTask`` continues from `offset` bytes on disk.
    case resumed(offset: Int64)
    /// The download finished; the file is at this URL.
    case completed(URL)
    /// The download failed (or was cancelled).
    case failed(HaulError)
}

/// What ``DownloadEvent/started(_:)`` reports.
public struct DownloadStart: Sendable, Equatable {
    /// HTTP status: 200 for a fresh start, 206 for a resume.
    public var status: Int
    /// The URL after redirects.
    public var url: URL
    /// The file being written.
    public var destination: URL
    /// The byte the transfer starts at (non-zero when resuming).
    public var offset: Int64
    /// The full size, when the server said.
    public var totalBytes: Int64?
}

/// A finished download.
public struct DownloadResult: Sendable, Equatable {
    /// The complete file.
    public var fileURL: URL
    /// Its size.
    public var bytes: Int64
    /// True when nothing was transferred because the file was already complete.
    public var alreadyComplete: Bool
}

/// Downloads files: resumable, retried, written atomically into place.
///
/// ```swift
/// let session = HaulSession()
/// let result = try await session.download(
///     from: URL(string: "https://example.com/big.iso")!,
///     to: .directory(URL(fileURLWithPath: "Downloads"))
/// ) { event in
///     if case .progress(let p) = event { print(p.fraction ?? 0) }
/// }
/// print(result.fileURL.path)
/// ```
///
/// Cancelling the calling task stops the transfer and keeps the partial file and its record:
/// the next `download` of the same URL to the same place continues where it stopped.
public final class HaulSession: Sendable {
    /// The session's settings.
    public let configuration: HaulConfiguration
    let transport: Result<any HTTPTransport, HaulError>

    /// Creates a session.
    public init(configuration: HaulConfiguration = HaulConfiguration()) {
        self.configuration = configuration
        switch configuration.transport {
        case .curl:
            transport = CurlTransport.shared.map { $0 as any HTTPTransport }.mapError {
                HaulError(.network, "libcurl is not available: \($0.message)")
            }
        case .urlSession:
            transport = .success(URLSessionTransport())
        }
    }

    /// Downloads `url` into `destination`, resuming a partial download of the same URL.
    ///
    /// - Parameters:
    ///   - url: An `http` or `https` URL. User name and password in it are used for the first
    ///     host only and never stored.
    ///   - destination: A file, or a directory for the server-suggested name.
    ///   - options: Resume, overwrite and checksum choices.
    ///   - events: Called with progress and other events, from a background thread.
    /// - Returns: The finished file.
    /// - Throws: ``HaulError``; on failure or cancellation the partial data stays resumable.
    @discardableResult
    public func download(
        from url: URL, to destination: DownloadDestination, options: DownloadOptions = DownloadOptions(),
        events: (@Sendable (DownloadEvent) -> Void)? = nil
    ) async throws(HaulError) -> DownloadResult {
        try await run(url, to: destination, options: options) { events?($0) }
    }

    /// Runs the engine for one download; events are translated to the public ones.
    func run(
        _ url: URL, to destination: DownloadDestination, options: DownloadOptions,
        events: @escaping @Sendable (DownloadEvent) -> Void
    ) async throws(HaulError) -> DownloadResult {
        let transport = try transport.get()
        var engineOptions = EngineOptions()
        for (name, value) in configuration.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            engineOptions.headers.add(name, value)
        }
        for (name, value) in options.headers.sorted(by: { $0.key < $1.key }) {
            engineOptions.headers.replace(name, value)
        }
        engineOptions.retry = RetryPolicy(
            maxRetries: configuration.retry.maxRetries, baseDelay: configuration.retry.initialDelay,
            maxDelay: configuration.retry.maxDelay, maxRetryAfter: configuration.retry.maxRetryAfter)
        engineOptions.connectTimeout = configuration.timeout.connect
        engineOptions.idleTimeout = configuration.timeout.idle
        engineOptions.maxRedirects = configuration.maxRedirects
        engineOptions.caFile = configuration.trustedCertificatesFile
        engineOptions.progressInterval = configuration.progressInterval
        engineOptions.resume = options.resume
        engineOptions.overwrite = options.overwrite
        engineOptions.sha256 = options.sha256
        let target: DownloadTarget
        switch destination {
        case .file(let file): target = .file(file.standardizedFileURL.path)
        case .directory(let dir): target = .directory(dir.standardizedFileURL.path)
        }
        let downloader = FileDownloader(url: url, target: target, options: engineOptions, transport: transport) {
            event in
            switch event {
            case .started(let status, let url, let destination, let offset, let total):
                events(
                    .started(
                        DownloadStart(
                            status: status, url: url, destination: URL(fileURLWithPath: destination), offset: offset,
                            totalBytes: total)))
            case .progress(let p): events(.progress(p))
            case .retrying(let attempt, let error, let delay):
                events(.retrying(attempt: attempt, error: error, delay: delay))
            case .restarted(let reason): events(.restarted(reason: reason))
            }
        }
        let outcome = try await downloader.run()
        return DownloadResult(
            fileURL: URL(fileURLWithPath: outcome.path), bytes: outcome.bytes, alreadyComplete: outcome.alreadyComplete)
    }
}
