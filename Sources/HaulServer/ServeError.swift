/// Why the daemon refused a request, with the HTTP status it answers with: the one error type
/// of `haul serve`'s doors (the token, the Host and Origin checks, paths, limits).
package struct ServeError: Error, Equatable, Sendable, CustomStringConvertible {
    package enum Code: Int, Sendable {
        /// Malformed: a name that is not a name, a body that is not the JSON asked for.
        case badRequest = 400
        /// No token, or a wrong one.
        case unauthorized = 401
        /// Known caller, forbidden act: a cross-origin state change, a path outside the root.
        case forbidden = 403
        /// No such route or download.
        case notFound = 404
        /// A method the route does not take (a change by GET).
        case methodNotAllowed = 405
        /// A request larger than the limits.
        case payloadTooLarge = 413
        /// A body that is not JSON where JSON is asked for.
        case unsupportedMediaType = 415
        /// A Host header the daemon does not answer to (DNS rebinding).
        case misdirected = 421
        /// Too many failed attempts: wait.
        case tooManyRequests = 429
        /// The daemon could not do its own part (its token file, its store).
        case internalError = 500
        /// Busy: too many of something at once (event streams).
        case serviceUnavailable = 503
    }

    package var code: Code
    package var message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The HTTP status to answer with.
    package var status: Int { code.rawValue }
    package var description: String { message }

    /// `text` as an error message may show it: printable ASCII, at most 100 bytes (a header
    /// value is the caller's, of any length).
    package static func shown(_ text: String) -> String {
        let bytes = text.utf8.prefix(100).map { $0 >= 0x20 && $0 < 0x7F ? $0 : UInt8(ascii: "?") }
        return String(decoding: bytes, as: UTF8.self) + (text.utf8.count > 100 ? "…" : "")
    }
}
