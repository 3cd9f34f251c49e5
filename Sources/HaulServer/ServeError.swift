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
        /// A request larger than the limits.
        case payloadTooLarge = 413
        /// A Host header the daemon does not answer to (DNS rebinding).
        case misdirected = 421
        /// Too many failed attempts: wait.
        case tooManyRequests = 429
        /// The daemon could not do its own part (its token file, its store).
        case internalError = 500
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
}
