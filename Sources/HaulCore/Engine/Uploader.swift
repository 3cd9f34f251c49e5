#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A request body made of segments read in order: bytes in memory, or whole files read from
/// disk in the transport's buffer-sized pieces (a 4 GiB upload needs no 4 GiB of memory).
/// Unchecked Sendable: read by one thread at a time (the transport's, or the rewind between
/// tries); `failure` is read after the transfer has ended.
package final class SegmentedBody: RequestBodySource, @unchecked Sendable {
    package enum Segment: Sendable {
        case bytes([UInt8])
        case file(path: String, size: Int64)
        /// Bytes of unknown length from a reader (0 at the end); read once, so not retried.
        case stream(StreamReader)

        var size: Int64? {
            switch self {
            case .bytes(let b): Int64(b.count)
            case .file(_, let size): size
            case .stream: nil
            }
        }
    }

    /// Wraps a one-shot source of bytes (an `InputStream`, say).
    /// Unchecked Sendable: read, and `started` set, by its body's one reading thread.
    package final class StreamReader: @unchecked Sendable {
        private let read: (UnsafeMutableRawBufferPointer) -> Int
        /// Names the source in errors.
        fileprivate let name: String
        fileprivate var started = false
        package init(name: String = "the upload stream", _ read: @escaping (UnsafeMutableRawBufferPointer) -> Int) {
            self.name = name
            self.read = read
        }
        fileprivate func next(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
            started = true
            return read(buffer)
        }
    }

    /// The segment for a file on disk: a regular file by its size (read again if the request is
    /// retried); a device, FIFO or standard input (`/dev/stdin`) as a stream read once to its
    /// end, so sent chunked and not retried. A directory or a missing file is an error.
    package static func segment(reading path: String) throws(HaulError) -> Segment {
        let kind: Sys.FileKind?
        do { kind = try Sys.fileKind(path) } catch { throw .fileSystem(error, "read", path: path) }
        switch kind {
        case nil, .danglingLink:
            throw HaulError(.fileSystem, "cannot read \(path): no such file", errno: ENOENT, path: path)
        case .directory: throw HaulError(.fileSystem, "\(path) is a directory", errno: EISDIR, path: path)
        case .regular(let size): return .file(path: path, size: size)
        case .other:
            let file = SpecialFileReader(path: path)
            return .stream(StreamReader(name: path) { file.read(into: $0) })
        }
    }

    /// A device, FIFO or standard input, opened at the first read (a FIFO's writer may come
    /// later), read to its end once, and closed at the end or when dropped. Read by one thread
    /// at a time (the transport's), as the body is; hence unchecked Sendable.
    private final class SpecialFileReader: @unchecked Sendable {
        let path: String
        private var fd: Int32 = -1
        private var ended = false

        init(path: String) { self.path = path }
        deinit { if fd >= 0 { Sys.close(fd) } }

        /// Bytes read, 0 at the end, -1 on failure.
        func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
            if ended { return 0 }
            if fd < 0 {
                guard let opened = try? Sys.open(path, O_RDONLY) else { return -1 }
                fd = opened
            }
            guard let n = try? Sys.readSome(fd, into: buffer) else { return -1 }
            if n == 0 {
                ended = true
                Sys.close(fd)
                fd = -1
            }
            return n
        }
    }

    package let segments: [Segment]
    package let length: Int64?
    /// Called on the transport's thread with the bytes handed over so far.
    package var onProgress: (@Sendable (Int64) -> Void)?
    // Touched only by the transport's thread during a transfer, or by the engine between them.
    private var index = 0
    private var offset: Int64 = 0
    private var fd: Int32 = -1
    private var sent: Int64 = 0

    package init(_ segments: [Segment]) {
        self.segments = segments
        length = segments.reduce(Int64(0)) { total, segment in total.flatMap { t in segment.size.map { t + $0 } } }
    }

    deinit { closeFile() }

    /// Why the last read failed, if it did.
    package private(set) var failure: HaulError?

    package func read(into buffer: UnsafeMutableRawBufferPointer) throws(HaulError) -> Int {
        do { return try readNext(into: buffer) } catch {
            failure = error
            throw error
        }
    }

    private func readNext(into buffer: UnsafeMutableRawBufferPointer) throws(HaulError) -> Int {
        while index < segments.count {
            let segment = segments[index]
            if case .stream(let reader) = segment {
                let n = reader.next(buffer)
                if n < 0 { throw HaulError(.fileSystem, "reading \(reader.name) failed") }
                if n == 0 {
                    index += 1
                    offset = 0
                    continue
                }
                sent += Int64(n)
                onProgress?(sent)
                return n
            }
            let remaining = segment.size! - offset
            if remaining <= 0 {
                closeFile()
                index += 1
                offset = 0
                continue
            }
            let want = Int(min(Int64(buffer.count), remaining))
            let n: Int
            switch segment {
            case .bytes(let bytes):
                bytes.withUnsafeBytes { src in
                    buffer.baseAddress!.copyMemory(from: src.baseAddress! + Int(offset), byteCount: want)
                }
                n = want
            case .stream: return 0  // handled above
            case .file(let path, _):
                if fd < 0 {
                    do { fd = try Sys.open(path, O_RDONLY) } catch { throw .fileSystem(error, "open", path: path) }
                }
                do {
                    n = try Sys.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
                } catch { throw .fileSystem(error, "read", path: path) }
                if n == 0 {
                    throw HaulError(.fileSystem, "\(path) shrank while it was being uploaded", path: path)
                }
            }
            offset += Int64(n)
            sent += Int64(n)
            onProgress?(sent)
            return n
        }
        return 0
    }

    /// False once a stream segment was read: the body cannot be sent again.
    package var isRewindable: Bool {
        !segments.contains { if case .stream(let reader) = $0 { reader.started } else { false } }
    }

    package func rewind() throws(HaulError) {
        for case .stream(let reader) in segments where reader.started {
            throw HaulError(.usage, "the upload stream was already read; it cannot be sent again")
        }
        failure = nil
        closeFile()
        index = 0
        offset = 0
        sent = 0
    }

    private func closeFile() {
        if fd >= 0 { Sys.close(fd) }
        fd = -1
    }
}

/// How an upload behaves.
package struct UploadOptions: Sendable {
    package var method = "POST"
    package var headers = HTTPHeaders()
    package var retry = RetryPolicy()
    package var connectTimeout: Double = 30
    package var idleTimeout: Double = 30
    package var connection = ConnectionSettings()
    package var progressInterval: Double = 0.1
    /// The most response body bytes kept; the rest is read and dropped.
    package var maxResponseBytes = 1 << 20
    package init() {}
}

/// What the upload engine reports.
package enum UploadEngineEvent: Sendable {
    case progress(TransferProgress)
    case retrying(attempt: Int, error: HaulError, delay: Double)
}

/// The result of an upload: the response and its (bounded) body.
package struct UploadOutcome: Sendable {
    package var response: TransportResponse
    package var body: [UInt8]
    package var bodyTruncated: Bool
}

/// Sends one request with a body, streaming it from its source, with progress and retries
/// only where they are safe: PUT is idempotent, so it is retried like a download; POST is retried
/// only when the connection was refused (the server never saw the body), never blindly.
package final class Uploader: Sendable {
    private let url: URL
    private let body: SegmentedBody
    private let options: UploadOptions
    private let transport: any HTTPTransport
    private let onEvent: @Sendable (UploadEngineEvent) -> Void

    package init(
        url: URL, body: SegmentedBody, options: UploadOptions, transport: any HTTPTransport,
        onEvent: @escaping @Sendable (UploadEngineEvent) -> Void = { _ in }
    ) {
        self.url = url
        self.body = body
        self.options = options
        self.transport = transport
        self.onEvent = onEvent
    }

    package func run() async throws(HaulError) -> UploadOutcome {
        try FileDownloader.validate(url)
        let total = body.length
        let onEvent = self.onEvent
        let reporter = ProgressReporter(interval: options.progressInterval) { onEvent(.progress($0)) }
        ProgressClock.shared.add(reporter)
        defer { ProgressClock.shared.remove(reporter) }
        body.onProgress = { sent in reporter.update(sent, total: total) }
        var budget = RetryBudget(options.retry)
        while true {
            try body.rewind()
            reporter.begin(at: 0, total: total)
            let collector = ResponseCollector(limit: options.maxResponseBytes)
            let task = transport.start(request(sending: body), handler: collector)
            let result = await task.finishedOrCancelled()
            reporter.idle()
            if Task.isCancelled { throw HaulError(.cancelled, "cancelled") }
            switch result {
            case .success:
                guard let response = collector.response else {
                    throw HaulError(.invalidResponse, "no response from \(ResumeRecord.redacted(url))")
                }
                if let delay = retryDelay(after: response, budget: &budget, rewindable: body.isRewindable) {
                    do { try await Task.sleep(nanoseconds: Seconds.nanoseconds(delay)) } catch {
                        throw HaulError(.cancelled, "cancelled")
                    }
                    continue
                }
                reporter.finish(total ?? 0, total: total)
                return UploadOutcome(response: response, body: collector.body, bodyTruncated: collector.truncated)
            case .failure(let transportError):
                if let bodyError = body.failure { throw bodyError }  // reading the source failed
                let error = transportError.haulError(
                    url: url, origin: url, connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout)
                let safe = options.method == "PUT" ? error.isTransient : transportError.kind == .connect
                guard safe else {
                    if options.method != "PUT" && error.isTransient {
                        throw HaulError(
                            error.code,
                            "\(error.message); not retried: the server may have received part of the \(options.method)")
                    }
                    throw error
                }
                guard body.isRewindable else {
                    // Standard input, a FIFO or a caller's stream: the bytes read are gone.
                    throw HaulError(error.code, "\(error.message); not retried: a stream cannot be sent again")
                }
                // Each try sends the body again from its first byte: no progress carries over.
                let (failures, delay) = try budget.failed(error)
                onEvent(.retrying(attempt: failures, error: error, delay: delay))
                do { try await Task.sleep(nanoseconds: Seconds.nanoseconds(delay)) } catch {
                    throw HaulError(.cancelled, "cancelled")
                }
            }
        }
    }
}

extension Uploader {
    /// The request that sends `body`, from its first byte.
    fileprivate func request(sending body: any RequestBodySource) -> TransportRequest {
        var request = TransportRequest(
            url: url, headers: options.headers, connectTimeout: options.connectTimeout,
            idleTimeout: options.idleTimeout, connection: options.connection)
        request.method = options.method
        request.body = body
        return request
    }

    /// The wait before sending again after `response`, or nil to return it. A PUT may be
    /// repeated: it is sent again after 408, 429, 500, 502, 503 and 504. A POST only when the
    /// server says it did not act on it: 408 Request Timeout (it never had the whole request),
    /// or 429 and 503 that name a `Retry-After` (a proxy's bare 503 can come after the
    /// application took the body). The wait is the Retry-After, else the budget's backoff. Never
    /// for a body that cannot be read again, and not past the budget (then the answer is
    /// returned).
    fileprivate func retryDelay(
        after response: TransportResponse, budget: inout RetryBudget, rewindable: Bool
    ) -> Double? {
        let status = response.status
        let asksToWait = response.headers["Retry-After"].flatMap { HTTPParsing.retryAfter($0) } != nil
        let refused = status == 408 || ([429, 503].contains(status) && asksToWait)
        guard rewindable, refused || (options.method == "PUT" && HTTPStatus.isTransient(status)) else { return nil }
        var error = HaulError.httpStatus(status, from: ResumeRecord.redacted(url), headers: response.headers)
        error.isTransient = true
        guard let (failures, delay) = try? budget.failed(error) else { return nil }
        onEvent(.retrying(attempt: failures, error: error, delay: delay))
        return delay
    }
}

/// Keeps a response and the first `limit` bytes of its body.
/// Unchecked Sendable: written on the transport's thread while the transfer runs, read after it ended.
private final class ResponseCollector: TransportHandler, @unchecked Sendable {
    let limit: Int
    var response: TransportResponse?
    var body: [UInt8] = []
    var truncated = false

    init(limit: Int) { self.limit = limit }

    func transportDidReceive(response: TransportResponse) -> Bool {
        self.response = response
        return true
    }

    func transportDidReceive(body chunk: UnsafeRawBufferPointer) -> BodyDisposition {
        let room = limit - body.count
        if room > 0 { body.append(contentsOf: chunk.prefix(room)) }
        if chunk.count > room { truncated = true }
        return .proceed
    }
}
