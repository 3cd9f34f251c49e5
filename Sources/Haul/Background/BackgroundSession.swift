import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Downloads that run in `haul serve` and go on after this process exits: URLSession's
/// background sessions, with the daemon in place of the system's.
///
/// ```swift
/// let session = try await BackgroundSession(configuration: .background(identifier: "com.example.sync"))
/// let download = try await session.download(from: url)
/// // ... this process may exit now; a later one makes the same session and reattaches:
/// for try await event in session.events {
///     switch event {
///     case .finished(let download): print(download.state, download.fileURL?.path ?? "")
///     case .caughtUp: print("told of every download that ended while away")
///     default: break
///     }
/// }
/// ```
///
/// The session's downloads are those added with its identifier, by this process or an earlier
/// one. ``events`` tells first of each download that ended since the session was last told of
/// it (each end once, whichever process of the session asks first), then ``BackgroundEvent/caughtUp``
/// (URLSession's `urlSessionDidFinishEvents(forBackgroundURLSession:)`), then the changes as
/// they come. Files land under the daemon's download directory (``downloadDirectory``).
///
/// The daemon must be running for this user (`haul serve`, its systemd unit, or
/// `haul get --background`, which starts it): else ``HaulError/Code/daemonNotRunning``. Its
/// address and token are read from its state directory (`$XDG_STATE_HOME/haul/serve`) at every
/// call, and the token is sent only once the daemon at that address has just proved it has it
/// (a daemon that died leaves its port to any process). Identifiers are names, not access
/// control: whoever holds the token sees and controls every session's downloads.
public final class BackgroundSession: Sendable {
    /// The session's name, from ``HaulConfiguration/background(identifier:)``.
    public let identifier: String
    /// The configuration it was made with.
    public let configuration: HaulConfiguration
    /// Where the daemon puts files (its `--dir`), as it said when the session attached or
    /// an iteration of ``events`` last connected; nil from a daemon that does not say.
    public var downloadDirectory: URL? { root.get() }
    private let root = Locked<URL?>(nil)
    /// The daemon's state directory (nil: the default).
    let state: String?

    /// Attaches to the background session `configuration.identifier` in the running `haul serve`.
    ///
    /// - Throws: ``HaulError/Code/usage`` for a configuration that is not
    ///   ``HaulConfiguration/background(identifier:)`` or an identifier that is not 1 to 128
    ///   letters, digits, `.`, `_` or `-`; ``HaulError/Code/daemonNotRunning`` when no daemon
    ///   answers (or what answers cannot prove it is it).
    public convenience init(configuration: HaulConfiguration) async throws(HaulError) {
        try await self.init(configuration: configuration, stateDirectory: DaemonClient.stateDirectory())
    }

    /// Attaches through the daemon whose state is in `stateDirectory` (tests, and daemons
    /// started with another state directory).
    package init(configuration: HaulConfiguration, stateDirectory: String?) async throws(HaulError) {
        guard let identifier = configuration.identifier else {
            throw HaulError(.usage, "BackgroundSession needs HaulConfiguration.background(identifier:)")
        }
        guard Self.isValidIdentifier(identifier) else {
            throw HaulError(
                .usage, "a background session's identifier is 1 to 128 ASCII letters, digits, '.', '_' or '-'")
        }
        self.identifier = identifier
        self.configuration = configuration
        state = stateDirectory
        try await readRoot(try await open())
    }

    /// Asks the daemon where it puts files.
    func readRoot(_ client: DaemonClient) async throws(HaulError) {
        struct Version: Decodable { var root: String? }
        let body = try await client.call("GET", "/api/v1/version")
        guard let version = try? JSONDecoder().decode(Version.self, from: Data(body)) else { throw Self.unreadable }
        root.set(version.root.map { URL(fileURLWithPath: $0, isDirectory: true) })
    }

    /// Whether `text` may name a background session: 1 to 128 ASCII letters, digits, `.`, `_`
    /// or `-` (the daemon checks the same).
    package static func isValidIdentifier(_ text: String) -> Bool {
        (1...128).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }

    /// Hands the download of `url` to the daemon and returns it, queued.
    ///
    /// - Parameters:
    ///   - url: An http or https URL without a user name or password (the daemon keeps no
    ///     credentials, so it could not send them).
    ///   - name: The file's name; nil: the server's suggestion, else the URL's last part.
    ///   - subfolder: A folder under the daemon's download directory (made if missing).
    ///   - priority: -1000...1000; a higher one goes first.
    ///   - options: Of these, `connections` (1-16), `maxBytesPerSecond` (at least 1024) and
    ///     `checksums` are taken; any other left at its default. The daemon's own settings
    ///     run the rest.
    /// - Throws: ``HaulError/Code/usage`` for an option the daemon cannot take or what it
    ///   refuses (a name leaving its directory, a URL with credentials), with its reason.
    public func download(
        from url: URL, named name: String? = nil, in subfolder: String? = nil, priority: Int = 0,
        options: DownloadOptions = DownloadOptions()
    ) async throws(HaulError) -> BackgroundDownload {
        if let option = Self.unsupportedOption(options) {
            throw HaulError(.usage, "a background download cannot take DownloadOptions.\(option) (haul serve runs it)")
        }
        struct Add: Encodable {
            var urls: [String]
            var name: String?
            var subfolder: String?
            var priority: Int
            var connections: Int?
            var maxBytesPerSecond: Int64?
            var checksums: [String]?
            var session: String
        }
        let add = Add(
            urls: [url.absoluteString], name: name, subfolder: subfolder, priority: priority,
            connections: options.connections == 1 ? nil : options.connections,
            maxBytesPerSecond: options.maxBytesPerSecond,
            checksums: options.checksums.isEmpty ? nil : options.checksums.map(\.description), session: identifier)
        guard let body = try? JSONEncoder().encode(add) else { throw HaulError(.usage, "cannot encode the add") }
        struct Added: Decodable { var downloads: [BackgroundDownload.Wire] }
        let answer = try await call("POST", "/api/v1/downloads", json: Array(body))
        guard let added = try? JSONDecoder().decode(Added.self, from: Data(answer)).downloads.first,
            let download = BackgroundDownload(added, root: downloadDirectory)
        else { throw Self.unreadable }
        return download
    }

    /// The option of `options` a background download cannot take, by name, or nil.
    static func unsupportedOption(_ options: DownloadOptions) -> String? {
        var taken = DownloadOptions()
        taken.connections = options.connections
        taken.maxBytesPerSecond = options.maxBytesPerSecond
        taken.checksums = options.checksums
        guard taken != options else { return nil }
        let defaults = DownloadOptions()
        let named: [(String, Bool)] = [
            ("headers", options.headers != defaults.headers), ("resume", options.resume != defaults.resume),
            ("overwrite", options.overwrite != defaults.overwrite),
            ("revalidatesExistingFile", options.revalidatesExistingFile != defaults.revalidatesExistingFile),
            (
                "createIntermediateDirectories",
                options.createIntermediateDirectories != defaults.createIntermediateDirectories
            ),
            ("checksServerDigests", options.checksServerDigests != defaults.checksServerDigests),
            ("minSplitSize", options.minSplitSize != defaults.minSplitSize),
            ("lowestSpeedLimit", options.lowestSpeedLimit != defaults.lowestSpeedLimit),
            ("checksReachability", options.checksReachability != defaults.checksReachability),
        ]
        return named.first { $0.1 }?.0 ?? "(an option)"
    }

    /// The session's downloads in queue order, ended ones included (until removed).
    public func downloads() async throws(HaulError) -> [BackgroundDownload] {
        struct Page: Decodable { var downloads: [BackgroundDownload.Wire] }
        var all: [BackgroundDownload] = []
        var offset = 0
        // A page at a time; the daemon keeps at most 100,000 downloads.
        for _ in 0..<200 {
            let body = try await call(
                "GET", "/api/v1/downloads?session=\(identifier)&limit=1000&offset=\(offset)")
            guard let page = try? JSONDecoder().decode(Page.self, from: Data(body)) else { throw Self.unreadable }
            all += page.downloads.compactMap { BackgroundDownload($0, root: downloadDirectory) }
            offset += page.downloads.count
            if page.downloads.count < 1000 { break }
        }
        return all
    }

    /// Stops download `id`'s transfer, keeping its bytes; the download as it is now.
    public func pause(_ id: BackgroundDownload.ID) async throws(HaulError) -> BackgroundDownload {
        try await decoded(act("pause", id))
    }

    /// Queues a paused or failed download again (it continues from its bytes); the download
    /// as it is now.
    public func resume(_ id: BackgroundDownload.ID) async throws(HaulError) -> BackgroundDownload {
        try await decoded(act("resume", id))
    }

    /// Stops download `id` and removes its partial file; the download as it is now.
    public func cancel(_ id: BackgroundDownload.ID) async throws(HaulError) -> BackgroundDownload {
        try await decoded(act("cancel", id))
    }

    /// Takes download `id` off the list (an unfinished one is cancelled first); with
    /// `deletingFile`, a completed one's file goes too, but only the very file the daemon wrote
    /// for it (else ``HaulError/Code/usage`` and nothing is removed).
    public func remove(_ id: BackgroundDownload.ID, deletingFile: Bool = false) async throws(HaulError) {
        _ = try await act("remove", id, json: Array((deletingFile ? #"{"files":true}"# : "{}").utf8))
    }

    /// Asks the daemon to `action` download `id`, one of this session's; the answer's body.
    private func act(
        _ action: String, _ id: BackgroundDownload.ID, json: [UInt8] = Array("{}".utf8)
    ) async throws(HaulError) -> [UInt8] {
        try await checkOwn(id)
        return try await call("POST", "/api/v1/downloads/\(id)/\(action)", json: json)
    }

    func decoded(_ body: [UInt8]) throws(HaulError) -> BackgroundDownload {
        guard let wire = try? JSONDecoder().decode(BackgroundDownload.Wire.self, from: Data(body)),
            let download = BackgroundDownload(wire, root: downloadDirectory)
        else { throw Self.unreadable }
        return download
    }

    /// Refuses a download of another session's (or none's): a session acts on its own.
    private func checkOwn(_ id: BackgroundDownload.ID) async throws(HaulError) {
        struct Owner: Decodable { var session: String? }
        let body = try await call("GET", "/api/v1/downloads/\(id)")
        guard (try? JSONDecoder().decode(Owner.self, from: Data(body)))?.session == identifier else {
            throw HaulError(.usage, "download \(id) is not one of background session \(identifier)'s")
        }
    }

    /// Records that the session was told of `id`'s end, for the caller named `claim`: true
    /// when this caller is the one told (asking again after a lost answer stays true), false
    /// when another was told first.
    func tell(_ id: BackgroundDownload.ID, claim: String) async throws(HaulError) -> Bool {
        struct Tell: Encodable {
            var session: String
            var claim: String
        }
        struct Told: Decodable { var told: Bool }
        guard let json = try? JSONEncoder().encode(Tell(session: identifier, claim: claim)) else {
            throw Self.unreadable
        }
        let body = try await call("POST", "/api/v1/downloads/\(id)/told", json: Array(json))
        guard let answer = try? JSONDecoder().decode(Told.self, from: Data(body)) else { throw Self.unreadable }
        return answer.told
    }

    /// Download `id` as the daemon shows it now, or nil when it is no longer on the list.
    func current(_ id: BackgroundDownload.ID) async throws(HaulError) -> BackgroundDownload? {
        do throws(HaulError) { return try decoded(try await call("GET", "/api/v1/downloads/\(id)")) } catch {
            if error.code == .usage, error.httpStatus == 404 { return nil }
            throw error
        }
    }

    /// The session's events: first each download that ended while the session was not told,
    /// then ``BackgroundEvent/caughtUp``, then the changes as they come. Each iteration is a
    /// stream of its own from the daemon.
    public var events: BackgroundEvents { BackgroundEvents(session: self) }

    /// A door to the daemon, opened for this call: its address and token read again, and
    /// the token sent only after the daemon there proved it has it.
    func open() async throws(HaulError) -> DaemonClient { try await DaemonClient.open(state: state) }

    /// A call to the daemon through a door opened for it (never repeated: a call that may have
    /// been taken is not made twice).
    private func call(_ method: String, _ path: String, json: [UInt8]? = nil) async throws(HaulError) -> [UInt8] {
        try await open().call(method, path, json: json)
    }

    static let unreadable = HaulError(.invalidResponse, "haul serve answered what this haul cannot read")
}
