import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Where a download is saved.
public enum DownloadDestination: Sendable {
    /// Exactly this file. Partial data goes to `<file>.part`, the resume record to `<file>.haul`.
    case file(URL)
    /// This directory (created if missing), under the server-suggested name: Content-Disposition,
    /// else the URL's last path segment, made safe (no directories, `..`, control characters).
    case directory(URL)
    /// A closure that picks the final place once the file is complete, from the temporary file
    /// and the response, as in Alamofire. The temporary file lives under
    /// ``HaulSession/defaultDownloadDirectory`` and is named after the URL, so an interrupted
    /// download resumes.
    case custom(@Sendable (_ temporaryURL: URL, _ response: DownloadStart) -> (URL, DestinationOptions))
}

/// What a ``DownloadDestination/custom(_:)`` closure may ask for.
public struct DestinationOptions: OptionSet, Sendable {
    /// The option bits.
    public let rawValue: Int
    /// Creates options from bits.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Create missing parent directories of the final URL.
    public static let createIntermediateDirectories = DestinationOptions(rawValue: 1 << 0)
    /// Replace a file already at the final URL (otherwise that is a ``HaulError/Code/destinationExists``).
    public static let removePreviousFile = DestinationOptions(rawValue: 1 << 1)
}

/// Per-download choices.
public struct DownloadOptions: Sendable, Equatable {
    /// Continue from `<file>.part` when its resume record matches (default); false starts over.
    public var resume = true
    /// Replace a destination that exists and is not a Haul partial. Without it such a file is
    /// never touched: if the server reports the same size the download is already complete,
    /// otherwise it fails with ``HaulError/Code/destinationExists``. Only regular files are
    /// replaced: a directory, device, FIFO or socket at the destination fails with
    /// ``HaulError/Code/fileSystem``, with or without this.
    public var overwrite = false
    /// Ask the server about a file already at the destination before downloading it (wget's
    /// `-N`, URLSession's `reloadRevalidatingCacheData` for a file): `If-None-Match` with the
    /// ETag it was saved with, `If-Modified-Since` with its Last-Modified, or with the file's
    /// time when haul did not save it. A 304 (or an answer of the same version) keeps the file
    /// (``DownloadResult/notModified``); a new version replaces it once complete, and the
    /// file's time is set to the server's Last-Modified. A partial of the URL is continued
    /// first. The validators are kept under ``HaulConfiguration/stateDirectory``, bound to the
    /// file (docs/conditional-get.md). Needs a `.file` or `.directory` destination. Default false.
    public var revalidatesExistingFile = false
    /// Create the missing directories above a ``DownloadDestination/file(_:)`` destination
    /// (a ``DownloadDestination/directory(_:)`` is always created). Default false: a file whose
    /// directory is missing fails before any request, naming the directory.
    public var createIntermediateDirectories = false
    /// Keeps the file claimed for the rest of the process once saved (see `DestinationClaims`):
    /// `haul get` sets it, so a later URL of its run whose file has the same name is refused
    /// instead of being taken as complete or replacing it.
    package var keepsClaimWhenSaved = false
    /// The answer to the download's first request, made ahead by an express download that
    /// declined (``HaulSession/startExpress(_:into:options:completion:)``).
    package var prefetched: PrefetchedProbe?
    /// Digests the file must have (SHA-256, SHA-512, SHA-1, MD5; several at once). Two different
    /// digests of one algorithm fail the download with ``HaulError/Code/usage`` before any
    /// request. A file that does not match is deleted, never put in place, and the
    /// download fails with ``HaulError/Code/checksumMismatch``; a file already at the
    /// destination counts as done only if it matches. On one connection the file is hashed as
    /// it is written, and a resume goes on from the hashes its record kept; a segmented
    /// download reads the file once at the end. See docs/integrity.md.
    public var checksums: [Checksum] = []
    /// Without ``checksums``, check the digests the server sends (RFC 9530: `Repr-Digest`, and
    /// `Content-Digest` on a whole answer without a content coding; SHA-256 and SHA-512) the same
    /// way (default true). With ``checksums`` they are not checked: the caller's digests are
    /// the word on the file. False for a server whose digests are known to be wrong.
    public var checksServerDigests = true
    /// Extra headers for this download only.
    public var headers: [String: String] = [:]
    /// Connections for this file: above 1, a server that supports ranges gets one byte range per
    /// connection (see docs/segmented.md); others fall back to one connection. Default 1.
    public var connections = 1
    /// No range is split below this many bytes (default 1 MiB).
    public var minSplitSize: Int64 = 1 << 20
    /// With several connections, one slower than this many bytes/s over 3 s is replaced by a new
    /// connection for the rest of its range (nil: no floor). A connection much slower than the
    /// others (under a quarter of their median) is replaced anyway, unless a rate limit paces
    /// them; a range that stays slow over the retry budget's worth of replacements fails.
    public var lowestSpeedLimit: Int64?
    /// The most bytes per second for this download, shared by its connections (nil, 0 or less:
    /// no limit, as `--limit-rate 0` in curl and aria2).
    /// A token bucket per transfer pauses it (no socket reads) while over budget; nothing
    /// busy-waits. Needs the curl transport: with the URLSession one the download fails with
    /// ``HaulError/Code/usage``.
    public var maxBytesPerSecond: Int64?
    /// Before connecting, resolve the host and check that the system has a route to it; a host
    /// without one fails at once with ``HaulError/Code/unreachableHost`` (no connect timeout, no
    /// retries). Skipped when a proxy environment variable applies. Default false.
    public var checksReachability = false
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
    /// Where the bytes are written until the download completes
    /// (``HaulSession/partialFileURL(for:)``).
    public var partialFileURL: URL { HaulSession.partialFileURL(for: destination) }
}

/// A finished download.
public struct DownloadResult: Sendable, Equatable {
    /// The complete file.
    public var fileURL: URL
    /// Its size.
    public var bytes: Int64
    /// True when nothing was transferred because the file was already complete.
    public var alreadyComplete: Bool
    /// True when the file in place was asked about (``DownloadOptions/revalidatesExistingFile``)
    /// and the server said it is its current version: kept as it is (``alreadyComplete`` too).
    public var notModified = false
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
    private let transport: Result<any HTTPTransport, HaulError>
    private let deferred: DeferredTransport
    /// The budget every download of this session shares: ``HaulConfiguration/maxOverallBytesPerSecond``,
    /// or no limit until ``setMaxOverallBytesPerSecond(_:)`` sets one.
    let overallRate: RateBudget
    /// The session's cookies (``HaulConfiguration/cookieJar``, or its own jar); nil when
    /// ``HaulConfiguration/httpShouldSetCookies`` is false.
    public let cookieJar: HaulCookieJar?
    /// Credentials per host from ``HaulConfiguration/netrcFile``.
    let netrc: Netrc?
    /// Transfers of this session on the wire now (also counted in ``NetworkActivity/shared``).
    public let activity = NetworkActivity(parent: .shared)

    /// Creates a session.
    public init(configuration: HaulConfiguration = HaulConfiguration()) {
        self.configuration = configuration
        overallRate = RateBudget(bytesPerSecond: configuration.maxOverallBytesPerSecond)
        let chosen = configuration.transport
        // Made when a transfer first needs it: a new session does not wait for libcurl to load.
        let deferred = DeferredTransport(chosen.make)
        self.deferred = deferred
        var netrc: Netrc?
        var base: Result<any HTTPTransport, HaulError> =
            (configuration.settingsProblem ?? chosen.refuses(configuration)).map { .failure(HaulError(.usage, $0)) }
            ?? .success(deferred)
        if case .success = base, let file = configuration.netrcFile {
            do throws(HaulError) { netrc = try Netrc.read(file, optional: false) } catch { base = .failure(error) }
        }
        self.netrc = netrc
        let activity = self.activity
        let limit = configuration.maxConnectionsPerHost
        let jar = configuration.httpShouldSetCookies ? configuration.cookieJar ?? HaulCookieJar() : nil
        cookieJar = jar
        transport = base.map { wire in
            // Cookies as sent, counted only once on the wire; queued behind the per-host cap
            // before that.
            let sent = jar.map { CookieTransport(wire, jar: $0.jar) } ?? wire
            let counted = CountingTransport(sent) { activity.change(by: $0) }
            return limit.map { HostLimitedTransport(counted, limit: $0) } ?? counted
        }
    }

    /// The session's transport, made (libcurl loaded) if it was not yet: called before a
    /// transfer touches the disk, so that one that cannot run fails before anything is created
    /// or removed.
    func readyTransport() throws(HaulError) -> any HTTPTransport {
        let transport = try transport.get()
        _ = try deferred.resolve().get()
        return transport
    }

    /// The limit all of this session's downloads share now, in bytes per second; nil when there
    /// is none. Starts as ``HaulConfiguration/maxOverallBytesPerSecond``.
    public var maxOverallBytesPerSecond: Int64? { overallRate.rate.map { $0 >= 9.2e18 ? Int64.max : Int64($0) } }

    /// Changes the limit all of this session's downloads share (nil or 0: no limit), running ones
    /// included: they follow the new rate within a quarter of a second.
    /// - Throws: ``HaulError/Code/usage`` when the session's transport cannot pace transfers.
    public func setMaxOverallBytesPerSecond(_ bytesPerSecond: Int64?) throws(HaulError) {
        if let reason = configuration.transport.cannotPace, (bytesPerSecond ?? 0) > 0 {
            throw HaulError(.usage, "maxOverallBytesPerSecond needs the curl transport (\(reason))")
        }
        overallRate.setRate(bytesPerSecond)
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
    /// - Throws: ``HaulError``; on failure or cancellation the partial data stays resumable (a
    ///   small file that came whole with the first request had no partial: nothing is left).
    @discardableResult
    public func download(
        from url: URL, to destination: DownloadDestination, options: DownloadOptions = DownloadOptions(),
        events: (@Sendable (DownloadEvent) -> Void)? = nil
    ) async throws(HaulError) -> DownloadResult {
        try await run(url, to: destination, options: options) { events?($0) }
    }

    /// Where a download to `destination` keeps its bytes until it completes and the file is
    /// renamed into place (its resume record lies beside it); a small file that comes whole with
    /// the first request is written with no name instead. Nothing but haul should write there.
    public static func partialFileURL(for destination: URL) -> URL {
        URL(fileURLWithPath: DownloadStore.partialPath(of: destination.path), isDirectory: false)
    }

    /// Runs the engine for one download, within the resource timeout.
    func run(
        _ url: URL, to destination: DownloadDestination, options: DownloadOptions,
        events: @escaping @Sendable (DownloadEvent) -> Void
    ) async throws(HaulError) -> DownloadResult {
        let lastRetried = Locked<String?>(nil)
        let noted: @Sendable (DownloadEvent) -> Void = { event in
            if case .retrying(_, let error, _) = event { lastRetried.set(error.message) }
            events(event)
        }
        do {
            return try await withinResourceTimeout(
                "download of \(ResumeRecord.redacted(url))", lastFailure: { lastRetried.get() }
            ) { [self] () throws(HaulError) in
                try await runEngine(url, to: destination, options: options, events: noted)
            }
        } catch  where error.code == .cancelled && configuration.isEphemeral {
            let named: String? = if case .file(let file) = destination { file.path } else { nil }
            if let path = error.path ?? named { DownloadStore.discardOwnPartial(of: url, at: path) }
            throw error
        }
    }

    /// Runs the engine for one download; events are translated to the public ones.
    private func runEngine(
        _ url: URL, to destination: DownloadDestination, options: DownloadOptions,
        events: @escaping @Sendable (DownloadEvent) -> Void
    ) async throws(HaulError) -> DownloadResult {
        let transport = try readyTransport()
        if options.checksReachability {
            // Through a proxy it is the proxy that connects (and, for socks5h, resolves): the
            // check would judge the wrong path and leak the name to the local resolver.
            switch configuration.proxy.choice {
            case .url: break
            case .none: if let unreachable = Reachability.check(url, environment: [:]) { throw unreachable }
            case .environment:
                // `noProxy` replaces the environment's list, as it does for libcurl.
                var environment = Environment.process
                if let list = configuration.noProxy {
                    environment = environment.overriding(["no_proxy": list.joined(separator: ","), "NO_PROXY": .none])
                }
                if let unreachable = Reachability.check(url, environment: environment) { throw unreachable }
            }
        }
        let engineOptions = try self.engineOptions(options, for: url)
        let (target, placement) = try engineTarget(url, destination)
        if options.revalidatesExistingFile, placement != nil {
            throw HaulError(.usage, "revalidatesExistingFile needs a .file or .directory destination, not .custom")
        }
        let started = Locked<(start: DownloadStart, path: String)?>(nil)
        // With one connection the segmented engine hands over to the plain one at once, unless a
        // partial left by several connections has gaps to fill.
        let outcome = try await SegmentedDownloader(
            url: url, target: target, options: engineOptions,
            segments: SegmentOptions(
                connections: options.connections, minSplit: options.minSplitSize,
                lowestSpeed: options.lowestSpeedLimit),
            transport: transport, onEvent: Self.publicEvents(events, started: started)
        ).run()
        // The start's URL when it names the same file (it nearly always does): making a URL from
        // a path parses it.
        let startedAt = started.get().flatMap { $0.path == outcome.path ? $0.start.destination : nil }
        var result = DownloadResult(
            fileURL: startedAt ?? URL(filePath: outcome.path, directoryHint: .notDirectory), bytes: outcome.bytes,
            alreadyComplete: outcome.alreadyComplete, notModified: outcome.notModified)
        if let placement {
            let temporary = result.fileURL
            let start =
                started.get()?.start
                ?? DownloadStart(status: 200, url: url, destination: temporary, offset: 0, totalBytes: outcome.bytes)
            let (final, options) = placement(temporary, start)
            try Self.move(temporary, to: final, options: options)
            result.fileURL = final
        }
        return result
    }

    /// `$XDG_STATE_HOME/haul/validators`, else `~/.local/state/haul/validators`; nil without a home.
    private static let defaultValidators = ValidatorStore.defaultDirectory()

    /// The engine's options for one download: the session's settings with the download's.
    func engineOptions(_ options: DownloadOptions, for url: URL) throws(HaulError) -> EngineOptions {
        var engineOptions = EngineOptions()
        engineOptions.headers = try headers(adding: options.headers, for: url)
        engineOptions.retry = retryPolicy
        engineOptions.connectTimeout = configuration.timeout.connect
        engineOptions.idleTimeout = configuration.timeout.idle
        engineOptions.maxRedirects = configuration.maxRedirects
        engineOptions.netrc = netrc
        engineOptions.connection = configuration.connectionSettings
        engineOptions.progressInterval = configuration.progressInterval
        engineOptions.resume = options.resume
        engineOptions.overwrite = options.overwrite
        engineOptions.createDirectories = options.createIntermediateDirectories
        engineOptions.revalidates = options.revalidatesExistingFile
        engineOptions.validators = ValidatorStore(
            directory: configuration.isEphemeral
                ? nil : configuration.stateDirectory.map { $0.path + "/validators" } ?? Self.defaultValidators)
        engineOptions.keepsClaimWhenSaved = options.keepsClaimWhenSaved
        engineOptions.checksums = try [Checksum].merging(options.checksums)
        engineOptions.checksServerDigests = options.checksServerDigests
        engineOptions.maxBytesPerSecond = options.maxBytesPerSecond.flatMap { $0 > 0 ? $0 : nil }
        if let reason = configuration.transport.cannotPace, engineOptions.maxBytesPerSecond != nil {
            throw HaulError(.usage, "maxBytesPerSecond needs the curl transport (\(reason))")
        }
        engineOptions.sharedRate = overallRate
        engineOptions.prefetched = options.prefetched
        return engineOptions
    }

    /// Where the engine writes: the file or directory asked for, or for a ``DownloadDestination/custom(_:)``
    /// one a file named by the URL's hash among the session's partials, with the closure that
    /// places it once done.
    private func engineTarget(
        _ url: URL, _ destination: DownloadDestination
    ) throws(HaulError) -> (
        DownloadTarget, (@Sendable (URL, DownloadStart) -> (URL, DestinationOptions))?
    ) {
        switch destination {
        case .file(let file): return (.file(Sys.lexicallyNormalized(file.path)), nil)
        case .directory(let dir): return (.directory(Sys.lexicallyNormalized(dir.path)), nil)
        case .custom(let closure):
            let partials =
                configuration.temporaryDirectory ?? Self.defaultDownloadDirectory.appendingPathComponent(".partials")
            try DownloadStore.createDirectory(partials.path)
            var hasher = SHA256()
            hasher.update(Array(ResumeRecord.redacted(url).utf8))
            return (.file(partials.appendingPathComponent(String(hasher.hexDigest().prefix(32))).path), closure)
        }
    }

    /// The engine's events as the public ones; the start is also kept in `started`.
    private static func publicEvents(
        _ events: @escaping @Sendable (DownloadEvent) -> Void, started: Locked<(start: DownloadStart, path: String)?>
    ) -> @Sendable (DownloadEngineEvent) -> Void {
        { event in
            switch event {
            case .started(let status, let url, let destination, let offset, let total):
                let start = DownloadStart(
                    status: status, url: url, destination: URL(filePath: destination, directoryHint: .notDirectory),
                    offset: offset, totalBytes: total)
                started.set((start, destination))
                events(.started(start))
            case .progress(let p): events(.progress(p))
            case .retrying(let attempt, let error, let delay):
                events(.retrying(attempt: attempt, error: error, delay: delay))
            case .restarted(let reason): events(.restarted(reason: reason))
            }
        }
    }

    /// Where downloads go when no directory is given, and where ``DownloadDestination/custom(_:)``
    /// keeps its temporary files: `$XDG_CACHE_HOME/haul/downloads` (default `~/.cache/haul/downloads`)
    /// on Linux, `~/Library/Caches/haul/downloads` on macOS.
    public static var defaultDownloadDirectory: URL {
        #if os(macOS)
            let base = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first!
        #else
            let base = URL(
                fileURLWithPath: XDGDirectory.cache.path() ?? FileManager.default.temporaryDirectory.path + "/.cache")
        #endif
        return base.appendingPathComponent("haul/downloads")
    }

    static func move(_ from: URL, to: URL, options: DestinationOptions) throws(HaulError) {
        let target = Sys.lexicallyNormalized(to.path)
        // Kept where it is: with .removePreviousFile the download itself would be removed as the
        // previous file, and then could not be moved.
        if target == Sys.lexicallyNormalized(from.path) { return }
        let parent = Sys.parentDirectory(of: target)
        if options.contains(.createIntermediateDirectories) {
            try DownloadStore.createDirectory(parent)
        }
        if (try? Sys.fileSize(target)) ?? nil != nil {
            guard options.contains(.removePreviousFile) else {
                throw HaulError(
                    .destinationExists, "\(target) exists; the download is kept at \(from.path)", path: target)
            }
            do { try Sys.unlink(target) } catch { throw .fileSystem(error, "remove", path: target) }
        }
        do { try Sys.rename(from.path, target) } catch {
            // Across file systems rename fails with EXDEV: copy next to the target, rename the copy
            // into place, then remove the temporary file. A copy cut short (a full disk) leaves
            // no partial file under the final name. The temporary's name is random (a fixed one
            // could be a file a server named), and only a copy made here is removed.
            let copy = target + ".haul-move-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
            do {
                try FileManager.default.copyItem(atPath: from.path, toPath: copy)
                try Sys.rename(copy, target)
                try FileManager.default.removeItem(atPath: from.path)
            } catch {
                // copyItem refuses a name that exists: any other failure left the copy it made.
                if (error as? CocoaError)?.code != .fileWriteFileExists { try? Sys.unlink(copy) }
                throw HaulError(.fileSystem, "cannot move \(from.path) to \(target): \(error)", path: target)
            }
        }
    }

    /// The completion-handler form of ``download(from:to:options:events:)``; the handler runs on a
    /// background thread.
    public func download(
        from url: URL, to destination: DownloadDestination, options: DownloadOptions = DownloadOptions(),
        completionHandler: @escaping @Sendable (Result<DownloadResult, HaulError>) -> Void
    ) {
        deliver(to: completionHandler) { () throws(HaulError) in
            try await self.download(from: url, to: destination, options: options)
        }
    }

    /// The completion-handler forms: runs `work` in a new task and hands its result to
    /// `handler`, on a background thread.
    func deliver<T: Sendable>(
        to handler: @escaping @Sendable (Result<T, HaulError>) -> Void,
        _ work: @escaping @Sendable () async throws(HaulError) -> T
    ) {
        Task {
            do throws(HaulError) { handler(.success(try await work())) } catch { handler(.failure(error)) }
        }
    }
}
