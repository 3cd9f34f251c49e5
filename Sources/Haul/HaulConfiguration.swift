import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Settings shared by every download of a ``HaulSession``.
///
/// ```swift
/// var configuration = HaulConfiguration()
/// configuration.retry.maxRetries = 10
/// configuration.timeout.idle = 60
/// let session = HaulSession(configuration: configuration)
/// ```
public struct HaulConfiguration: Sendable {
    /// Retries of transient failures (dropped connections, stalls, 408/429/5xx).
    public struct Retry: Sendable, Equatable {
        /// Retries after the first attempt. The budget refills whenever an attempt makes progress.
        public var maxRetries: Int = 5
        /// The first backoff delay in seconds; it doubles per failure, with jitter.
        public var initialDelay: Double = 1
        /// The longest backoff delay in seconds.
        public var maxDelay: Double = 30
        /// The longest `Retry-After` honoured, in seconds; a server asking for longer fails the download.
        public var maxRetryAfter: Double = 300
        /// Creates the default policy.
        public init() {}
    }

    /// Timeouts, in seconds.
    public struct Timeout: Sendable, Equatable {
        /// To establish a connection (TCP and TLS).
        public var connect: Double = 30
        /// With no byte received: the connection counts as stalled and is retried. 0 or less:
        /// none (a server may then hold a connection forever).
        public var idle: Double = 30
        /// For the whole of one download, upload or `data(from:)`, retries and redirects
        /// included (URLSession's `timeoutIntervalForResource`, curl's `--max-time`); nil (the
        /// default), 0 or less: no limit. Past it the transfer stops with
        /// ``HaulError/Code/timeout`` and a download keeps its partial file, resumable. A
        /// ``DownloadTask`` counts from each `resume()`; a byte stream is not limited (its
        /// consumer sets its pace).
        public var resource: Double?
        /// Creates the defaults.
        public init() {}
    }

    /// Which HTTP implementation runs the transfers: ``curl`` (the default), or `urlSession`
    /// from the `HaulFoundation` module, which links FoundationNetworking (docs/transports.md).
    public struct Transport: Sendable, Hashable, CustomStringConvertible {
        /// The transport's name (`curl`, `urlSession`): what makes two transports the same.
        public let name: String
        public var description: String { name }
        /// What this transport cannot do that `configuration` asks, if anything (a transfer then
        /// fails with ``HaulError/Code/usage`` rather than run without it).
        package let refuses: @Sendable (HaulConfiguration) -> String?
        /// Why a download with a rate limit cannot run on it, or nil when it paces reads.
        package let cannotPace: String?
        /// Makes the transport; called once per session, when its first transfer needs it.
        package let make: @Sendable () -> Result<any HTTPTransport, HaulError>

        package init(
            name: String, cannotPace: String? = nil,
            refuses: @escaping @Sendable (HaulConfiguration) -> String? = { _ in nil },
            make: @escaping @Sendable () -> Result<any HTTPTransport, HaulError>
        ) {
            self.name = name
            self.cannotPace = cannotPace
            self.refuses = refuses
            self.make = make
        }

        /// libcurl's multi interface on one thread (loaded at run time); the default on Linux.
        public static let curl = Transport(name: "curl") {
            CurlTransport.shared.map { $0 as any HTTPTransport }.mapError {
                HaulError(.network, "libcurl is not available: \($0.message)")
            }
        }

        /// Two transports are the same when they have the same name.
        public static func == (a: Transport, b: Transport) -> Bool { a.name == b.name }

        public func hash(into hasher: inout Hasher) { hasher.combine(name) }
    }

    /// How the server's certificate is checked, beyond ``trustedCertificatesFile``: URLSession's
    /// server trust, Alamofire's trust evaluators (default, pinned public keys, disabled).
    public struct TLS: Sendable, Equatable {
        /// Check the certificate chain against the trusted authorities and its name against the
        /// host (the default). False is curl's `--insecure`: anyone on the path can then read and
        /// change what is downloaded. A pin is still checked.
        public var verifiesCertificate = true
        /// Public keys the server must present one of, each as `sha256//` and the base64 of the
        /// SHA-256 of its SubjectPublicKeyInfo in DER (curl's `--pinnedpubkey` form). Empty (the
        /// default): no pinning. A malformed entry fails every transfer with ``HaulError/Code/usage``.
        public var pinnedPublicKeys: [String] = []
        /// Creates the defaults: verified, no pins.
        public init() {}
    }

    /// The HTTP version asked for.
    public enum HTTPVersion: Sendable, Equatable {
        /// HTTP/2 over TLS where the server offers it, HTTP/1.1 otherwise (the default).
        case automatic
        /// HTTP/1.1 only.
        case http1_1
        /// HTTP/2: over TLS where the server offers it, and over plain HTTP by an upgrade the
        /// server may ignore (HTTP/1.1 then).
        case http2
    }

    /// A user name and password for HTTP Basic authentication, as `URLCredential(user:password:)`
    /// holds them; its description hides the password.
    public struct Credential: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        /// The user name (no `:`).
        public var user: String
        /// The password.
        public var password: String
        /// Creates a credential.
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }
        public var description: String { "Credential(user: \(user), password: <hidden>)" }
        public var debugDescription: String { description }
        /// `dump` and debuggers show the user, not the password.
        public var customMirror: Mirror { Mirror(self, children: ["user": user, "password": "<hidden>"]) }
    }

    /// The proxy requests go through (URLSession's `connectionProxyDictionary`, curl's `-x`).
    public struct Proxy: Sendable, Equatable, CustomStringConvertible {
        enum Choice: Sendable, Equatable {
            case environment, none
            case url(URL)
        }
        let choice: Choice

        /// The environment's, read as curl reads it: `http_proxy` for http URLs, `https_proxy`
        /// or `HTTPS_PROXY` for https, `all_proxy`/`ALL_PROXY` for both, `no_proxy`/`NO_PROXY`
        /// for the hosts reached without it. `HTTP_PROXY` is not read (a CGI program's
        /// `Proxy:` request header arrives as that variable). The default.
        public static let environment = Proxy(choice: .environment)
        /// No proxy, whatever the environment says.
        public static let none = Proxy(choice: .none)
        /// This proxy for every request: `http://`, `https://` (TLS to the proxy, trusted as
        /// servers are), `socks4://`, `socks4a://`, `socks5://` or `socks5h://` (the proxy
        /// resolves the host's name), with `user:password@` or not. https URLs go through an
        /// HTTP proxy by `CONNECT`. A URL of another scheme, or without a host, fails every
        /// transfer with ``HaulError/Code/usage``.
        public static func url(_ url: URL) -> Proxy { Proxy(choice: .url(url)) }

        /// The choice, the URL without its user and password.
        public var description: String {
            switch choice {
            case .environment: "environment"
            case .none: "none"
            case .url(let url): ResumeRecord.redacted(url)
            }
        }
    }

    /// Retry policy.
    public var retry = Retry()
    /// Timeouts.
    public var timeout = Timeout()
    /// Redirects followed before failing with ``HaulError/Code/tooManyRedirects``.
    public var maxRedirects = 20
    /// Headers sent with every request (e.g. `Authorization`; never sent to another host after
    /// a redirect, and never stored).
    public var additionalHeaders: [String: String] = [:]
    /// The HTTP cache of ``HaulSession/data(for:maxBytes:)`` (RFC 9111); nil: none. Default:
    /// ``HTTPCache/shared``, under `$XDG_CACHE_HOME/haul/http`. File downloads do not use it
    /// (``DownloadOptions/revalidatesExistingFile`` asks about a file already there).
    public var cache: HTTPCache? = HTTPCache.shared
    /// How ``HaulSession/data(for:maxBytes:)`` uses the cache, unless the request says.
    public var requestCachePolicy: HaulRequest.CachePolicy = .useProtocolCachePolicy
    /// Sent as HTTP Basic authentication to the host of each URL asked for (curl's `-u`): never
    /// to another origin after a redirect, never stored, never in a message. A URL with a user
    /// name of its own, or an `Authorization` header, is sent as it is instead.
    public var credential: Credential?
    /// A netrc file (netrc(5): `machine HOST login USER password PASS`) whose credentials go to
    /// their hosts by name, after a redirect too (curl's `--netrc-file`); read when the session
    /// is made. An unreadable or malformed file fails every transfer with ``HaulError/Code/usage``.
    /// ``credential``, a user in the URL and an `Authorization` header come first.
    public var netrcFile: String?
    /// Whether the session keeps cookies (URLSession's name): what a server sets with
    /// `Set-Cookie` is sent back to it within the session (default true). False: none is kept,
    /// and only a `Cookie` header given is sent.
    public var httpShouldSetCookies = true
    /// Where the session keeps cookies; nil (the default): a jar of its own, in memory, which
    /// ``HaulSession/cookieJar`` shows. Give one to share it between sessions or to load and
    /// save a cookie file.
    public var cookieJar: HaulCookieJar?
    /// The proxy (default ``Proxy/environment``). Anything but the default needs the curl
    /// transport.
    public var proxy: Proxy = .environment
    /// Hosts reached without the proxy, as curl's `--noproxy` takes them: a name matches itself
    /// and its subdomains (`example.com`, `.example.com`), an address itself, `*` every host;
    /// nil (the default): the environment's `no_proxy`/`NO_PROXY`; empty: none.
    public var noProxy: [String]?
    /// The proxy's user and password, when not in its URL; never stored, never in a message.
    public var proxyCredential: Credential?
    /// A PEM bundle of extra certificate authorities to trust (as well as the system's, with a
    /// libcurl that keeps its CA directory, as Debian's does), for servers and an https proxy.
    /// Needs the curl transport: with `urlSession` every transfer fails with
    /// ``HaulError/Code/usage`` (URLSession cannot be given extra certificates).
    public var trustedCertificatesFile: String?
    /// Certificate checks and public-key pins. Anything but the default needs the curl transport.
    public var tls = TLS()
    /// The HTTP version asked for. Anything but ``HTTPVersion/automatic`` needs the curl transport.
    public var httpVersion: HTTPVersion = .automatic
    /// Connections at once to one host (scheme, host, port) for all the session's transfers
    /// together: every range of every download, and uploads. Others wait for a free one, in
    /// order. Nil (the default) sets no cap; `haul get` uses 16.
    public var maxConnectionsPerHost: Int?
    /// The shortest interval between two progress events, in seconds (default 0.1: 10 per second).
    public var progressInterval: Double = 0.1
    /// The HTTP implementation.
    public var transport: Transport = .curl
    /// The most bytes per second for all downloads of the session together (nil, 0 or less: no
    /// limit), taken in turns by the transfers waiting for it. Needs the curl transport: with
    /// `urlSession` every transfer fails with ``HaulError/Code/usage``.
    public var maxOverallBytesPerSecond: Int64?
    /// Where the session keeps what outlives a run: the validators of files downloaded with
    /// ``DownloadOptions/revalidatesExistingFile``, in `validators/`. Default: `$XDG_STATE_HOME/haul`,
    /// else `~/.local/state/haul`; without a home directory, none (a file is then asked about by
    /// its time).
    public var stateDirectory: URL?
    /// Where ``DownloadDestination/custom(_:)`` downloads live until the closure places them
    /// (default: `.partials` under ``HaulSession/defaultDownloadDirectory``).
    public var temporaryDirectory: URL?

    /// Whether nothing of the session's outlives it but the files asked for (``ephemeral``).
    public private(set) var isEphemeral = false
    /// The background session's name (``background(identifier:)``); nil for every other
    /// configuration (URLSessionConfiguration's `identifier`).
    public private(set) var identifier: String?

    /// Creates the default configuration.
    public init() {}

    /// URLSession's `.default`, the same as ``init()``: the HTTP cache (``cache``) and the
    /// validators of ``DownloadOptions/revalidatesExistingFile`` persist under the XDG
    /// directories, and a cancelled download keeps its partial and record to resume from.
    public static var `default`: HaulConfiguration { HaulConfiguration() }

    /// URLSession's `.ephemeral`: nothing persists but the files asked for. No HTTP cache, no
    /// validators kept (a revalidated file is asked about by its time), cookies in memory only
    /// (the default jar; a ``cookieJar`` given is the caller's), and a cancelled download's
    /// partial and record are removed, as a finished one's are. A failed one keeps them.
    public static var ephemeral: HaulConfiguration {
        var configuration = HaulConfiguration()
        configuration.cache = nil
        configuration.isEphemeral = true
        return configuration
    }

    /// URLSession's `background(withIdentifier:)`: downloads that run in `haul serve` and go on
    /// after this process exits, for a ``BackgroundSession``. A later process that makes a
    /// `BackgroundSession` with the same identifier reattaches: it lists the downloads and is
    /// told of the ones that ended while it was away, each once. The identifier is 1 to 128
    /// ASCII letters, digits, `.`, `_` and `-` (a reverse-DNS name such as `com.example.sync`).
    /// The daemon's own settings run the transfers; a ``HaulSession`` refuses this
    /// configuration (its transfers fail with ``HaulError/Code/usage``).
    public static func background(identifier: String) -> HaulConfiguration {
        var configuration = HaulConfiguration()
        configuration.identifier = identifier
        return configuration
    }
}

extension HaulConfiguration {
    /// Why the netrc file at `path` cannot be used (it cannot be read, or does not parse), or nil.
    package static func netrcProblem(_ path: String) -> String? {
        do throws(HaulError) {
            _ = try Netrc.read(path, optional: false)
            return nil
        } catch { return error.message }
    }

    /// Why `url` cannot be a proxy (its scheme, no host, a byte curl would cut it at), or nil.
    package static func proxyProblem(_ url: URL) -> String? {
        let schemes = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]
        guard let scheme = url.scheme?.lowercased(), schemes.contains(scheme) else {
            return "proxy \(ResumeRecord.redacted(url)): the scheme must be one of \(schemes.joined(separator: ", "))"
        }
        guard let host = url.host, !host.isEmpty else { return "proxy \(ResumeRecord.redacted(url)) has no host" }
        // Checked as libcurl will read them, decoded: a CR, LF or NUL in a user name or password
        // made it skip the proxy (and go direct) rather than fail.
        // A space in a password is fine (encoded); in the host or the URL's text it is not.
        let decoded = [url.user(percentEncoded: false), url.password(percentEncoded: false)].compactMap { $0 }
        guard !decoded.contains(where: { $0.utf8.contains { $0 < 0x20 || $0 == 0x7F } }),
            ![url.host ?? "", url.absoluteString].contains(where: { $0.utf8.contains { $0 <= 0x20 || $0 == 0x7F } })
        else {
            return "proxy \(ResumeRecord.redacted(url)): a control character in it (or a space outside its password)"
        }
        if let port = url.port, !(1...65535).contains(port) {
            return "proxy \(ResumeRecord.redacted(url)): port \(port) is not 1-65535"
        }
        return nil
    }

    /// What the transport is told of trust and HTTP version.
    package var connectionSettings: ConnectionSettings {
        var settings = ConnectionSettings(caFile: trustedCertificatesFile)
        settings.verifiesCertificate = tls.verifiesCertificate
        settings.pinnedPublicKeys = tls.pinnedPublicKeys
        switch proxy.choice {
        case .environment: settings.proxy = .environment
        case .none: settings.proxy = .none
        case .url(let url): settings.proxy = .url(url.absoluteString)
        }
        settings.noProxy = noProxy?.joined(separator: ",")
        settings.proxyCredential = proxyCredential.map { BasicCredential(user: $0.user, password: $0.password) }
        switch httpVersion {
        case .automatic: settings.httpVersion = .automatic
        case .http1_1: settings.httpVersion = .http1_1
        case .http2: settings.httpVersion = .http2
        }
        return settings
    }

    /// Why no transfer can run with these settings (a malformed pin, a credential that cannot
    /// be sent), or nil.
    package var settingsProblem: String? {
        if identifier != nil {
            return "a background configuration's downloads run in haul serve: use BackgroundSession(configuration:)"
        }
        if let credential, let problem = BasicCredential(user: credential.user, password: credential.password).problem {
            return problem
        }
        if case .url(let url) = proxy.choice, let problem = Self.proxyProblem(url) { return problem }
        if let bad = noProxy?.first(where: { $0.isEmpty || $0.utf8.contains { $0 <= 0x20 || $0 == 0x2C || $0 == 0x7F } }
        ) {
            return "noProxy entry '\(bad)' is not a host name (empty, or a space, comma or control character in it)"
        }
        if let credential = proxyCredential, credential.user.utf8.contains(0x3A) {
            return "a proxy's user name cannot contain ':'"
        }
        if let bad = tls.pinnedPublicKeys.first(where: { ConnectionSettings.validPin($0) == nil }) {
            let shown = bad.count > 60 ? String(bad.prefix(60)) + "..." : bad
            return "public key pin '\(shown)' is not sha256// and the base64 of a SHA-256 hash"
        }
        return nil
    }
}
