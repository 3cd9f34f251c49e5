import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A multipart/form-data body (RFC 7578): fields and files, streamed from disk when sent.
///
/// ```swift
/// var form = MultipartForm()
/// form.addField(name: "title", value: "Holiday")
/// try form.addFile(name: "photo", fileURL: URL(fileURLWithPath: "beach.jpg"))
/// let reply = try await session.upload(form, to: url)
/// ```
public struct MultipartForm: Sendable {
    struct Part: Sendable {
        var name: String
        var filename: String?
        var contentType: String?
        /// The part's body: bytes in memory, a file by its size, or a stream.
        var source: SegmentedBody.Segment
    }

    private(set) var parts: [Part] = []
    /// The boundary; chosen at random and checked not to occur in any in-memory part.
    public private(set) var boundary: String

    /// Creates an empty form.
    public init() { boundary = MultipartForm.randomBoundary() }

    /// Adds a text field.
    public mutating func addField(name: String, value: String) {
        append(Part(name: name, filename: nil, contentType: nil, source: .bytes(Array(value.utf8))))
    }

    /// Adds a file from disk; its bytes are read only while sending.
    /// - Parameters:
    ///   - name: The form field's name.
    ///   - fileURL: The file (a FIFO or a device is read to its end at send time; a directory
    ///     is refused).
    ///   - filename: The name the server sees (default: the file's name).
    ///   - contentType: Default: guessed from the extension, else `application/octet-stream`.
    /// - Throws: ``HaulError/Code/fileSystem`` when the file cannot be read.
    public mutating func addFile(
        name: String, fileURL: URL, filename: String? = nil, contentType: String? = nil
    )
        throws(HaulError)
    {
        let source = try SegmentedBody.segment(reading: Sys.lexicallyNormalized(fileURL.path))
        let shown = filename ?? fileURL.lastPathComponent
        parts.append(
            Part(
                name: name, filename: shown, contentType: contentType ?? Self.guessContentType(shown), source: source))
    }

    /// Adds a file from memory.
    public mutating func addFile(name: String, data: Data, filename: String, contentType: String? = nil) {
        append(
            Part(
                name: name, filename: filename, contentType: contentType ?? Self.guessContentType(filename),
                source: .bytes(Array(data))))
    }

    /// Adds a file read from a stream of unknown length; the body is then sent chunked, and
    /// only once (an upload with a stream is not retried). `read` fills the buffer it is given
    /// and returns the bytes it put there: 0 at the end, a negative number for a failed read
    /// (which fails the upload). It is called on the transport's thread, one call at a time.
    /// (`HaulFoundation` adds the same for an `InputStream`.)
    public mutating func addFile(
        name: String, filename: String, contentType: String? = nil,
        reading read: @escaping @Sendable (UnsafeMutableRawBufferPointer) -> Int
    ) {
        append(
            Part(
                name: name, filename: filename, contentType: contentType ?? Self.guessContentType(filename),
                source: .stream(SegmentedBody.StreamReader(read))))
    }

    /// `multipart/form-data; boundary=…`
    public var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    /// The exact body length, nil when a stream part has none (the body is then sent chunked).
    public var contentLength: Int64? { SegmentedBody(segments).length }

    /// Adds `part`, choosing a new boundary if it occurs in the part: then every part is looked
    /// at again for the new one (rare: 24 random hex digits).
    private mutating func append(_ part: Part) {
        parts.append(part)
        guard Self.holds(part, boundary) else { return }
        repeat { boundary = Self.randomBoundary() } while parts.contains { Self.holds($0, boundary) }
    }

    /// Whether an in-memory part holds `--boundary`: a scan from one `-` to the next.
    private static func holds(_ part: Part, _ boundary: String) -> Bool {
        guard case .bytes(let bytes) = part.source else { return false }
        let marker = Array(("--" + boundary).utf8)
        var at = bytes.startIndex
        while let dash = bytes[at...].firstIndex(of: 0x2D) {
            if bytes.count - dash < marker.count { return false }
            if bytes[dash..<dash + marker.count].elementsEqual(marker) { return true }
            at = dash + 1
        }
        return false
    }

    var segments: [SegmentedBody.Segment] {
        var out: [SegmentedBody.Segment] = []
        for part in parts {
            var head = "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.escape(part.name))\""
            if let filename = part.filename { head += "; filename=\"\(Self.escape(filename))\"" }
            head += "\r\n"
            if let type = part.contentType {
                // One header line: what follows a line break (or NUL) is not sent.
                let line = type.unicodeScalars.prefix { $0 != "\r" && $0 != "\n" && $0 != "\0" }
                head += "Content-Type: \(String(String.UnicodeScalarView(line)))\r\n"
            }
            head += "\r\n"
            out.append(.bytes(Array(head.utf8)))
            out.append(part.source)
            out.append(.bytes(Array("\r\n".utf8)))
        }
        out.append(.bytes(Array("--\(boundary)--\r\n".utf8)))
        return out
    }

    /// Quotes, CR and LF percent-encoded as browsers do (WHATWG); other characters, non-ASCII
    /// included, go as UTF-8 (RFC 7578 4.2).
    static func escape(_ s: String) -> String {
        var out = ""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "%22"
            case "\r": out += "%0D"
            case "\n": out += "%0A"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    static func randomBoundary() -> String {
        "haul-" + (0..<24).map { _ in String("0123456789abcdef".randomElement()!) }.joined()
    }

    /// A content type for a file name's extension.
    public static func guessContentType(_ filename: String) -> String {
        let last = filename.split(separator: "/").last ?? ""
        let dot = last.dropFirst().lastIndex(of: ".")
        let ext = dot.map { last[last.index(after: $0)...].lowercased() } ?? ""
        let types = [
            "txt": "text/plain", "html": "text/html", "htm": "text/html", "css": "text/css", "csv": "text/csv",
            "js": "text/javascript", "json": "application/json", "xml": "application/xml",
            "pdf": "application/pdf", "zip": "application/zip", "gz": "application/gzip", "tar": "application/x-tar",
            "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif",
            "svg": "image/svg+xml", "webp": "image/webp", "mp3": "audio/mpeg", "wav": "audio/wav",
            "mp4": "video/mp4", "webm": "video/webm",
        ]
        return types[ext] ?? "application/octet-stream"
    }
}

/// The HTTP method of a raw file upload.
public enum UploadMethod: String, Sendable {
    /// PUT: idempotent, so transient failures and answers (408, 429, 500, 502, 503, 504) are
    /// retried.
    case put = "PUT"
    /// POST: retried only when the connection was refused, or the server answered that it did
    /// not act on the request (408; 429 or 503 with a Retry-After).
    case post = "POST"
}

/// Something that happened during an upload.
public enum UploadEvent: Sendable {
    /// Bytes sent so far (at most one event per ``HaulConfiguration/progressInterval``).
    case progress(TransferProgress)
    /// A transient failure of a PUT (or a refused POST); it is sent again after `delay` seconds.
    case retrying(attempt: Int, error: HaulError, delay: Double)
}

/// Receives an upload's events (the delegate style of ``HaulSession/upload(fileAt:to:method:delegate:)``).
public protocol UploadDelegate: AnyObject, Sendable {
    /// Progress or a retry.
    func upload(didReceive event: UploadEvent)
}

/// The server's answer to an upload.
public struct UploadResponse: Sendable {
    /// Status and headers.
    public var response: HTTPResponse
    /// The response body, at most 1 MiB.
    public var body: Data
    /// True when the body was longer and was cut.
    public var bodyTruncated: Bool
}

extension HaulSession {
    /// POSTs a multipart form, streaming files from disk.
    ///
    /// Any status comes back (check `response.statusCode`). The body is never sent twice
    /// unless the connection was refused before it started, or the server answered that it did
    /// not act on it (408; 429 or 503 with a Retry-After, which is waited out).
    public func upload(
        _ form: MultipartForm, to url: URL, headers: [String: String] = [:],
        events: (@Sendable (UploadEvent) -> Void)? = nil
    ) async throws(HaulError) -> UploadResponse {
        var all = headers
        all["Content-Type"] = form.contentType
        return try await send(SegmentedBody(form.segments), to: url, method: "POST", headers: all, events: events)
    }

    /// Sends a file as the raw request body (PUT by default), streamed from disk.
    public func upload(
        fileAt fileURL: URL, to url: URL, method: UploadMethod = .put, contentType: String? = nil,
        headers: [String: String] = [:], events: (@Sendable (UploadEvent) -> Void)? = nil
    ) async throws(HaulError) -> UploadResponse {
        let segment = try SegmentedBody.segment(reading: Sys.lexicallyNormalized(fileURL.path))
        var all = headers
        all["Content-Type"] = contentType ?? MultipartForm.guessContentType(fileURL.lastPathComponent)
        return try await send(SegmentedBody([segment]), to: url, method: method.rawValue, headers: all, events: events)
    }

    /// POSTs `body` as it is (the CLI's calls to `haul serve`'s JSON API).
    package func post(
        _ body: [UInt8], to url: URL, contentType: String, headers: [String: String] = [:]
    ) async throws(HaulError) -> UploadResponse {
        var all = headers
        all["Content-Type"] = contentType
        return try await send(SegmentedBody([.bytes(body)]), to: url, method: "POST", headers: all, events: nil)
    }

    /// The delegate form of ``upload(_:to:headers:events:)``.
    public func upload(
        _ form: MultipartForm, to url: URL, delegate: any UploadDelegate
    ) async throws(HaulError)
        -> UploadResponse
    {
        try await upload(form, to: url) { [weak delegate] in delegate?.upload(didReceive: $0) }
    }

    /// The delegate form of ``upload(fileAt:to:method:contentType:headers:events:)``.
    public func upload(
        fileAt fileURL: URL, to url: URL, method: UploadMethod = .put, delegate: any UploadDelegate
    )
        async throws(HaulError) -> UploadResponse
    {
        try await upload(fileAt: fileURL, to: url, method: method) { [weak delegate] in delegate?.upload(didReceive: $0)
        }
    }

    /// The completion-handler form of ``upload(_:to:headers:events:)``.
    public func upload(
        _ form: MultipartForm, to url: URL,
        completionHandler: @escaping @Sendable (Result<UploadResponse, HaulError>) -> Void
    ) {
        deliver(to: completionHandler) { () throws(HaulError) in try await self.upload(form, to: url) }
    }

    /// The completion-handler form of ``upload(fileAt:to:method:contentType:headers:events:)``.
    public func upload(
        fileAt fileURL: URL, to url: URL, method: UploadMethod = .put,
        completionHandler: @escaping @Sendable (Result<UploadResponse, HaulError>) -> Void
    ) {
        deliver(to: completionHandler) { () throws(HaulError) in
            try await self.upload(fileAt: fileURL, to: url, method: method)
        }
    }

    private func send(
        _ body: SegmentedBody, to url: URL, method: String, headers: [String: String],
        events: (@Sendable (UploadEvent) -> Void)?
    ) async throws(HaulError) -> UploadResponse {
        try await withinResourceTimeout("upload to \(ResumeRecord.redacted(url))") { [self] () throws(HaulError) in
            try await sendNow(body, to: url, method: method, headers: headers, events: events)
        }
    }

    private func sendNow(
        _ body: SegmentedBody, to url: URL, method: String, headers: [String: String],
        events: (@Sendable (UploadEvent) -> Void)?
    ) async throws(HaulError) -> UploadResponse {
        let transport = try readyTransport()
        var options = UploadOptions()
        options.method = method
        options.headers = try self.headers(adding: headers, for: url)
        netrc?.authorize(&options.headers, for: url)
        options.retry = retryPolicy
        options.connectTimeout = configuration.timeout.connect
        options.idleTimeout = configuration.timeout.idle
        options.connection = configuration.connectionSettings
        options.progressInterval = configuration.progressInterval
        let uploader = Uploader(url: url, body: body, options: options, transport: transport) { event in
            switch event {
            case .progress(let p): events?(.progress(p))
            case .retrying(let a, let e, let d): events?(.retrying(attempt: a, error: e, delay: d))
            }
        }
        let outcome = try await uploader.run()
        return UploadResponse(
            response: HTTPResponse(outcome.response, url: url), body: Data(outcome.body),
            bodyTruncated: outcome.bodyTruncated)
    }
}
