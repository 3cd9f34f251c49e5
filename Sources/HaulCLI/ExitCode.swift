import Haul

/// `haul`'s exit codes (also in the README).
enum ExitCode: Int32 {
    case success = 0
    case internalError = 1
    case usage = 2
    case network = 3
    case http = 4
    case fileSystem = 5
    case integrity = 6
    case tls = 7
    case interrupted = 130

    init(_ error: HaulError) {
        switch error.code {
        case .usage, .invalidURL: self = .usage
        case .network, .timeout, .tooManyRedirects, .incompleteBody, .invalidResponse, .unreachableHost,
            .networkUnavailable, .notCached, .daemonNotRunning:
            self = .network
        case .httpStatus: self = .http
        case .fileSystem, .diskFull, .destinationExists, .destinationInUse, .listInUse: self = .fileSystem
        case .checksumMismatch, .serverChangedFile: self = .integrity
        case .tlsFailure: self = .tls
        case .cancelled: self = .interrupted
        default: self = .internalError
        }
    }
}

/// A command-line mistake: printed as one line, exit code 2.
struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

extension HaulError {
    /// Task.value loses typed throws; every error from a download task is a HaulError, but for
    /// a cancelled sleep (Ctrl-C while `-o -` paces its reading): that one becomes `.cancelled`,
    /// not a network error that says "CancellationError()".
    static func from(_ error: any Error) -> HaulError {
        if error is CancellationError { return HaulError(.cancelled, "cancelled") }
        return error as? HaulError ?? HaulError(.network, "\(error)")
    }
}
