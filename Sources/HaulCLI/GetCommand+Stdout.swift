import Foundation
import Haul
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension GetCommand {
    /// Options that `-o -` cannot honour: standard output is written in order, over one
    /// connection, with no partial file (and `--json` would share it with the body).
    static let notForStandardOutput = ["--json", "--min-split-size", "--lowest-speed-limit"]

    /// `-o -`: the body goes to standard output as it arrives (a dropped connection is continued
    /// with `Range` + `If-Range`, never spliced); progress and messages go to stderr.
    func runToStandardOutput(interrupts: Interrupts) async -> ExitCode {
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
            let (response, body) = try await session.bytes(for: request, window: window)
            guard (200..<300).contains(response.statusCode) else {
                body.cancel()
                let status = response.statusCode
                throw HaulError(
                    .httpStatus, "HTTP \(status) \(HTTPStatus.reason(status)) from \(shown)", httpStatus: status)
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
                    try await Task.sleep(nanoseconds: UInt64(wait * 1e9))
                }
                try Self.writeAll(chunk, to: STDOUT_FILENO)
                hasher?.update(chunk)
                written += Int64(chunk.count)
                reporter.update(written, total: total)
            }
            reporter.idle()
            if let expected = expectedSHA256, let actual = hasher?.hexDigest(), actual != expected {
                throw HaulError(
                    .checksumMismatch,
                    "SHA-256 of the body written to standard output is \(actual), expected \(expected)")
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
                "wrote \(Output.bytes(bytes)) from \(shown) to standard output in \(String(format: "%.1f", seconds)) s")
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
    static func writeAll(_ data: Data, to fd: Int32) throws(HaulError) {
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
                failure.isDiskFull ? .diskFull : .fileSystem, "cannot write to standard output: \(failure)",
                errno: failure.rawValue)
        }
    }
}
