import Foundation
import Haul
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where `haul get` writes a body as it arrives instead of into a file of its own: standard
/// output (`-o -`), or an existing device or FIFO named by `-o` (`-o /dev/null`, `-o fifo`),
/// which a partial file and a rename into place would replace with a regular file.
enum StreamTarget: Equatable {
    case standardOutput
    case special(path: String)

    /// `-o`'s argument when it names a stream: `-`, or a path that exists and is neither a
    /// regular file nor a directory.
    init?(_ argument: String) {
        if argument == "-" {
            self = .standardOutput
        } else if case .other? = try? Sys.fileKind(argument) {
            self = .special(path: argument)
        } else {
            return nil
        }
    }

    /// As the user gave it to `-o`.
    var argument: String {
        switch self {
        case .standardOutput: "-"
        case .special(let path): path
        }
    }

    /// For messages: "standard output", or "a device or FIFO".
    var kind: String {
        switch self {
        case .standardOutput: "standard output"
        case .special: "a device or FIFO"
        }
    }

    /// Opens it for writing (a FIFO waits for its reader, as with curl and shells).
    func open() throws(HaulError) -> Int32 {
        switch self {
        case .standardOutput: return STDOUT_FILENO
        case .special(let path):
            do { return try Sys.open(path, O_WRONLY) } catch { throw .fileSystem(error, "open", path: path) }
        }
    }

    /// Names it in messages: "standard output", or the path.
    var shown: String {
        switch self {
        case .standardOutput: "standard output"
        case .special(let path): path
        }
    }
}

extension GetCommand {
    /// Options that `-o -` cannot honour: standard output is written in order, over one
    /// connection, with no partial file (and `--json` would share it with the body).
    static let notForStandardOutput = ["--json", "--min-split-size", "--lowest-speed-limit"]

    /// `-o -` (or `-o DEVICE`): the body goes to standard output (or the device or FIFO) as it
    /// arrives (a dropped connection is continued with `Range` + `If-Range`, never spliced);
    /// progress and messages go to stderr.
    func runStreaming(to target: StreamTarget, interrupts: Interrupts) async -> ExitCode {
        guard let url = urls.first else { return .usage }
        let output = self.output
        let shown = ResumeRecord.redacted(url)
        let name = url.lastPathComponent
        let session = HaulSession(configuration: configuration)
        var request = HaulRequest(url: url, headers: options.headers)
        request.decodesContent = false  // the bytes as stored, as a download to a file gets them
        let expectedSHA256 = options.sha256
        // A rate limit paces the reading: the window is kept small, so the transfer itself
        // pauses (no socket reads) a quarter of a second's worth behind.
        let rate = [options.maxBytesPerSecond, configuration.maxOverallBytesPerSecond].compactMap { $0 }.min()
        let budget = rate.map { RateBudget(bytesPerSecond: $0) }
        let window = rate.map { Int(min(1 << 20, max(16 << 10, $0 / 4))) } ?? 1 << 20
        let started = Date()
        let work = Task { () async throws -> Int64 in
            let fd = try target.open()
            defer { if fd != STDOUT_FILENO { Sys.close(fd) } }
            let (response, body) = try await session.bytes(for: request, window: window)
            guard (200..<300).contains(response.statusCode) else {
                body.cancel()
                throw HaulError.httpStatus(response.statusCode, from: shown)
            }
            let total = response.expectedContentLength
            var hasher = expectedSHA256.map { _ in SHA256() }
            // The downloads' reporter: ten reports a second at most, and one a second from the
            // process's clock while nothing arrives.
            let reporter = ProgressReporter(interval: 0.1) { output.progress($0, name: name) }
            ProgressClock.shared.add(reporter)
            defer { ProgressClock.shared.remove(reporter) }
            reporter.begin(at: 0, total: total)
            var written: Int64 = 0
            for try await chunk in body {
                while let wait = budget?.take(chunk.count) {
                    try await Task.sleep(nanoseconds: Seconds.nanoseconds(wait))
                }
                try Self.writeAll(chunk, to: fd, shown: target.shown)
                hasher?.update(chunk)
                written += Int64(chunk.count)
                reporter.update(written, total: total)
            }
            reporter.idle()
            if let expected = expectedSHA256, let actual = hasher?.hexDigest(), actual != expected {
                throw HaulError(
                    .checksumMismatch,
                    "SHA-256 of the body written to \(target.shown) is \(actual), expected \(expected)")
            }
            return written
        }
        let token = interrupts.onInterrupt { work.cancel() }
        defer { interrupts.remove(token) }
        let outcome = await work.result
        output.clearLine()
        switch outcome {
        case .success(let bytes):
            let seconds = Date().timeIntervalSince(started)
            output.note(
                "wrote \(Output.bytes(bytes)) from \(shown) to \(target.shown) in \(String(format: "%.1f", seconds)) s")
            return .success
        case .failure(let failure):
            let error = HaulError.from(failure)
            if error.code == .cancelled {
                output.note("interrupted")
            } else {
                output.error(error.message)
            }
            return ExitCode(error)
        }
    }

    /// Writes all of `data` to `fd`. A reader that went away ends the process with SIGPIPE, as
    /// it does `cat`.
    static func writeAll(_ data: Data, to fd: Int32, shown: String) throws(HaulError) {
        let failure = data.withUnsafeBytes { buffer -> Errno? in
            do throws(Errno) {
                try Sys.writeAll(fd, buffer)
                return nil
            } catch {
                return error
            }
        }
        if let failure {
            throw HaulError(
                failure.isDiskFull ? .diskFull : .fileSystem, "cannot write to \(shown): \(failure)",
                errno: failure.rawValue)
        }
    }
}
