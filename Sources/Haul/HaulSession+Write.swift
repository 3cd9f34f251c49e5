import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension HaulSession {
    /// Downloads `request`'s body into an open file descriptor as it arrives, in order: standard
    /// output, a pipe, a device or a FIFO, where a partial file renamed into place has no
    /// meaning. A dropped connection is continued as ``bytes(for:window:)`` continues it (with
    /// `Range` and `If-Range`, never spliced). Of `options`, `maxBytesPerSecond` (with the
    /// configuration's overall limit) paces the reading, so the transfer itself waits, and
    /// `checksums` are checked once the body is complete (without them,
    /// a `Repr-Digest` the server sent with a whole answer that has no content coding); the rest concern files and are not used.
    /// `events` receives `.progress` at most ten times a second, and once a second while nothing
    /// arrives.
    /// - Parameters:
    ///   - request: What to fetch (its URL, headers, and whether to decode the content).
    ///   - fileDescriptor: Where the body goes (written, never closed here; `FileHandle` users
    ///     pass its `fileDescriptor`, or call `HaulFoundation`'s `download(_:to:named:)`).
    ///   - name: How messages name the descriptor ("standard output", a path).
    ///   - options: Of these, the speed limit and the checksums (above).
    ///   - events: Progress and retries, as a file download's.
    /// - Returns: The bytes written.
    /// - Throws: ``HaulError``: `.httpStatus` for an answer outside 2xx (nothing is written),
    ///   `.checksumMismatch` after the whole body was written, `.fileSystem` or `.diskFull` for a
    ///   failed write. A reader that went away ends the process with SIGPIPE unless the program
    ///   ignores that signal (then the write fails).
    public func download(
        _ request: HaulRequest, toFileDescriptor fileDescriptor: Int32, named name: String,
        options: DownloadOptions = DownloadOptions(),
        events: (@Sendable (DownloadEvent) -> Void)? = nil
    ) async throws(HaulError) -> Int64 {
        try await withinResourceTimeout("download of \(ResumeRecord.redacted(request.url))") {
            [self] () throws(HaulError) in
            try await write(request, to: fileDescriptor, named: name, options: options, events: events)
        }
    }

    private func write(
        _ request: HaulRequest, to fileDescriptor: Int32, named name: String, options: DownloadOptions,
        events: (@Sendable (DownloadEvent) -> Void)?
    ) async throws(HaulError) -> Int64 {
        let rate = options.maxBytesPerSecond.flatMap { $0 > 0 ? RateBudget(bytesPerSecond: $0) : nil }
        let limit = [options.maxBytesPerSecond, configuration.maxOverallBytesPerSecond].compactMap { $0 }
            .filter { $0 > 0 }.min()
        // A small window under a limit: the transfer pauses (no socket reads) a quarter of a
        // second's worth behind the writes.
        let window = limit.map { Int(min(1 << 20, max(16 << 10, $0 / 4))) } ?? 1 << 20
        let shown = ResumeRecord.redacted(request.url)
        let (response, body) = try await bytes(for: request, window: window)
        guard (200..<300).contains(response.statusCode) else {
            body.cancel()
            throw HaulError.httpStatus(response.statusCode, from: shown)
        }
        let total = response.expectedContentLength
        var fields = HTTPHeaders()
        for field in response.headers { fields.add(field.name, field.value) }
        // A server's digest is of the whole file as sent: not of a range the caller asked for,
        // nor of a body decoded from its content coding.
        let coding = fields["Content-Encoding"]?.trimmingASCIIWhitespace().lowercased() ?? ""
        let vouched =
            response.statusCode == 200 && (coding.isEmpty || coding == "identity")
            ? Checksum.vouched(by: fields, status: 200) : []
        let given = try [Checksum].merging(options.checksums)
        let expected = given.isEmpty && options.checksServerDigests ? vouched : given
        var hasher = MultiHasher(expected.map(\.algorithm))
        let reporter = ProgressReporter(interval: configuration.progressInterval) { events?(.progress($0)) }
        ProgressClock.shared.add(reporter)
        defer { ProgressClock.shared.remove(reporter) }
        reporter.begin(at: 0, total: total)
        var written: Int64 = 0
        do {
            for try await chunk in body {
                while let wait = RateBudget.take(chunk.count, from: rate, overallRate) {
                    do { try await Task.sleep(nanoseconds: Seconds.nanoseconds(wait)) } catch {
                        throw HaulError(.cancelled, "cancelled")
                    }
                }
                try Self.write(chunk, to: fileDescriptor, named: name)
                chunk.withUnsafeBytes { hasher.update($0, at: written) }
                written += Int64(chunk.count)
                reporter.update(written, total: total)
            }
        } catch let error as HaulError {
            reporter.idle()
            throw error
        } catch {
            reporter.idle()
            throw HaulError(.network, "\(error)")  // the stream throws HaulError only
        }
        reporter.idle()
        if let (checksum, actual) = expected.mismatch(in: hasher.digests()) {
            throw HaulError(
                .checksumMismatch,
                [Checksum].mismatchMessage(checksum, actual: actual, of: "the body written to \(name)"))
        }
        return written
    }

    private static func write(_ data: Data, to fd: Int32, named name: String) throws(HaulError) {
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
                failure.isDiskFull ? .diskFull : .fileSystem, "cannot write to \(name): \(failure)",
                errno: failure.rawValue)
        }
    }
}
