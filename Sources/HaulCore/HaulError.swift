/// The one error type of Haul's download and upload APIs.
///
/// Match on ``code`` (a struct, so new codes do not break `switch` statements that have a
/// `default`); read ``message`` for a one-line, human explanation that names the cause.
///
/// ```swift
/// do {
///     try await session.download(from: url, to: .directory(downloads))
/// } catch where error.code == .httpStatus {
///     print("server said \(error.httpStatus ?? 0)")
/// }
/// ```
public struct HaulError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Base: String, Sendable {
            case invalidURL, httpStatus, network, timeout, tooManyRedirects, fileSystem, diskFull
            case checksumMismatch, cancelled, serverChangedFile, destinationExists, tlsFailure
            case incompleteBody, invalidResponse, responseTooLarge, usage, unreachableHost, networkUnavailable
            case destinationInUse, listInUse, notCached, daemonNotRunning
        }
        let base: Base

        /// The URL is malformed or uses a scheme Haul does not speak.
        public static let invalidURL = Code(base: .invalidURL)
        /// The server answered with a status that is an error (see ``HaulError/httpStatus``).
        public static let httpStatus = Code(base: .httpStatus)
        /// The connection could not be made or broke (reset, refused, DNS failure).
        public static let network = Code(base: .network)
        /// No connection in time, or no bytes for the idle timeout.
        public static let timeout = Code(base: .timeout)
        /// Too many redirects, or a redirect loop.
        public static let tooManyRedirects = Code(base: .tooManyRedirects)
        /// A file operation failed (see ``HaulError/errno`` and ``HaulError/path``).
        public static let fileSystem = Code(base: .fileSystem)
        /// The disk (or quota) is full; the partial file and its record stay resumable.
        public static let diskFull = Code(base: .diskFull)
        /// The finished file does not have the expected checksum.
        public static let checksumMismatch = Code(base: .checksumMismatch)
        /// The caller cancelled; bytes on disk are kept for a later resume.
        public static let cancelled = Code(base: .cancelled)
        /// The file changed on the server more often than Haul would restart it.
        public static let serverChangedFile = Code(base: .serverChangedFile)
        /// The destination exists and is not a partial download Haul knows.
        public static let destinationExists = Code(base: .destinationExists)
        /// Another download is writing the same file (the same URL twice, two URLs whose names
        /// coincide, another haul process); nothing was touched.
        public static let destinationInUse = Code(base: .destinationInUse)
        /// Another ``DownloadManager`` (in this process or another) holds the download list of the
        /// same identifier; nothing was read or written.
        public static let listInUse = Code(base: .listInUse)
        /// No `haul serve` answers for a `BackgroundSession` (none runs for this user, or what
        /// holds its port cannot prove it is it).
        public static let daemonNotRunning = Code(base: .daemonNotRunning)
        /// ``HaulRequest/CachePolicy/returnCacheDataDontLoad`` found no stored answer to give.
        public static let notCached = Code(base: .notCached)
        /// The TLS handshake failed (untrusted certificate, wrong host name, protocol error).
        public static let tlsFailure = Code(base: .tlsFailure)
        /// The connection ended before the announced length arrived, more often than retries allow.
        public static let incompleteBody = Code(base: .incompleteBody)
        /// The server's answer broke HTTP (for example a 206 for a range that was not asked for).
        public static let invalidResponse = Code(base: .invalidResponse)
        /// A body exceeded the caller's size cap.
        public static let responseTooLarge = Code(base: .responseTooLarge)
        /// The request itself was invalid (conflicting options, bad header syntax).
        public static let usage = Code(base: .usage)
        /// The host name does not resolve, or the system has no route to any of its addresses
        /// (checked before connecting when ``DownloadOptions`` asks for it).
        public static let unreachableHost = Code(base: .unreachableHost)
        /// No usable network path (no default route, or only a path the policy does not allow),
        /// and the caller asked not to wait for one.
        public static let networkUnavailable = Code(base: .networkUnavailable)

        /// The code's name, e.g. `httpStatus`.
        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// One line that names the cause, e.g. `HTTP 404 Not Found from http://host/file`.
    public let message: String
    /// The HTTP status, for ``Code/httpStatus``.
    public let httpStatus: Int?
    /// The system error number, for ``Code/fileSystem`` and ``Code/diskFull``.
    public let errno: Int32?
    /// The file involved, for file system errors.
    public let path: String?
    /// Seconds the server asked to wait (Retry-After), when it did.
    public let retryAfter: Double?
    /// Whether the engine may retry the same request (set where the error is classified).
    package var isTransient = false

    /// Creates an error. Haul creates these; tests and adapters may too.
    public init(
        _ code: Code, _ message: String, httpStatus: Int? = nil, errno: Int32? = nil, path: String? = nil,
        retryAfter: Double? = nil
    ) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.errno = errno
        self.path = path
        self.retryAfter = retryAfter
    }

    /// The message, for logs and terminals.
    public var description: String { message }

    /// An answer's status that brings no file: "HTTP 404 Not Found from URL" (`shown`: the URL as
    /// ``ResumeRecord/shown(_:origin:)`` writes it), with the `Retry-After` of `headers`.
    package static func httpStatus(_ status: Int, from shown: String, headers: HTTPHeaders = HTTPHeaders()) -> HaulError
    {
        let reason = HTTPStatus.reason(status)
        return HaulError(
            .httpStatus, "HTTP \(status)\(reason.isEmpty ? "" : " " + reason) from \(shown)", httpStatus: status,
            retryAfter: headers["Retry-After"].flatMap { HTTPParsing.retryAfter($0) })
    }

    /// A destination that exists and is not a partial download: refused, naming --overwrite.
    package static func destinationExists(_ path: String, size: Int64, serverSize: Int64?) -> HaulError {
        HaulError(
            .destinationExists,
            "\(path) exists (\(size) bytes\(serverSize.map { ", server has \($0)" } ?? "")); use --overwrite to replace it",
            path: path)
    }

    package static func fileSystem(_ errno: Errno, _ operation: String, path: String) -> HaulError {
        if errno.isDiskFull {
            return HaulError(
                .diskFull, "disk full: cannot \(operation) \(path) (\(errno))", errno: errno.rawValue, path: path)
        }
        return HaulError(.fileSystem, "cannot \(operation) \(path): \(errno)", errno: errno.rawValue, path: path)
    }
}
