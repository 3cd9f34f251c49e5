import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension HaulSession {
    /// Asks the server how it serves `url`, the way `haul doctor` does: follows the redirects
    /// (reading the first 64 KiB of the file), asks again for the validators, sends HEAD, two
    /// small ranges (compared with those bytes), a range with `Accept-Encoding: gzip`, holds up
    /// to ``DiagnosisOptions/maxConnections`` connections open one by one, and measures the
    /// speed on one connection and on ``DiagnosisOptions/speedConnections``. Nothing is written
    /// to disk; every request carries the session's headers and credentials, as a download would.
    ///
    /// - Throws: ``HaulError`` when the first request fails (the host does not resolve, a TLS
    ///   failure, too many redirects); an error status is a diagnosis (``Diagnosis/answer``).
    public func diagnose(
        _ url: URL, options: DiagnosisOptions = DiagnosisOptions()
    ) async throws(HaulError)
        -> Diagnosis
    {
        let options = options.clamped(maxConnectionsPerHost: configuration.maxConnectionsPerHost)
        let doctor = Doctor(
            session: self, transport: try readyTransport(), url: url, options: options,
            headers: try headers(adding: options.headers, for: url))
        return try await doctor.run()
    }
}

/// The requests of one diagnosis, in order; each check after the first is on the last hop's URL.
struct Doctor: Sendable {
    let session: HaulSession
    let transport: any HTTPTransport
    let url: URL
    let options: DiagnosisOptions
    let headers: HTTPHeaders
    /// The bytes of the file's first answer kept to compare ranges with.
    static let sample = 64 << 10

    /// An answer and the first bytes of its body.
    struct Fetched {
        var response: TransportResponse
        var body: [UInt8]
        /// Why the body ended before those bytes were all read, when it broke off (not when it
        /// was cut at the deadline: a trickle).
        var broke: HaulError?
    }

    /// The file's first answer, as it came at the end of the redirects.
    struct First {
        var hops: [Diagnosis.Hop]
        var response: TransportResponse
        var sample: [UInt8]
        var broke: HaulError?
        var url: URL
        /// The headers for that URL (credentials kept only on the same origin).
        var headers: HTTPHeaders
    }

    func run() async throws(HaulError) -> Diagnosis {
        let first = try await firstAnswer()
        let h = first.response.headers
        var answer = Diagnosis.Answer(
            status: first.response.status, length: first.response.status == 200 ? h.contentLength : nil,
            contentType: h["Content-Type"], acceptRanges: h["Accept-Ranges"], contentEncoding: h["Content-Encoding"])
        answer.bodyError = first.broke.map { "after \(Self.bytes(first.sample.count)): \($0.message)" }
        var diagnosis = Diagnosis(
            url: ResumeRecord.redacted(url), hops: first.hops,
            connection: Self.connection(first.response.connection, now: Int64(Date().timeIntervalSince1970)),
            answer: answer,
            validators: Diagnosis.Validators(
                etag: h["ETag"], lastModified: h["Last-Modified"], weakETag: h["ETag"]?.hasPrefix("W/") ?? false),
            ranges: Diagnosis.Ranges(support: .untested, detail: "not asked"), head: nil, gzipOnRanges: nil,
            connections: nil, speeds: [], findings: [])
        if (200..<300).contains(first.response.status) {
            await secondAnswer(first, into: &diagnosis.validators)
            diagnosis.head = await headCheck(first, answer: answer)
            diagnosis.ranges = await rangeCheck(first)
            if diagnosis.ranges.support == .honoured { diagnosis.gzipOnRanges = await gzipOnRanges(first) }
            if options.maxConnections > 0 { diagnosis.connections = await connectionCount(first) }
            if options.speedSeconds > 0 {
                diagnosis.speeds = await speeds(first, length: answer.length, ranges: diagnosis.ranges.support)
            }
        }
        diagnosis.findings = Self.findings(diagnosis)
        return diagnosis
    }

    /// A request for `target` with the session's timeouts and connection settings.
    func request(_ target: URL, _ headers: HTTPHeaders, method: String = "GET") -> TransportRequest {
        let c = session.configuration
        var t = TransportRequest(
            url: target, headers: headers, connectTimeout: c.timeout.connect, idleTimeout: c.timeout.idle,
            connection: c.connectionSettings)
        t.method = method
        return t
    }

    /// Sends `t` and keeps at most `keep` bytes of its body (none of a redirect's), then stops
    /// it. The head must come within ``headSeconds``, the body within
    /// ``DiagnosisOptions/requestSeconds`` of it, and both by `limit` when given, whatever the
    /// session's timeouts (none, or hours): a server that holds its head fails the check; a body
    /// cut at its deadline (a trickle) or broken off gives what came.
    func fetch(
        _ t: TransportRequest, keep: Int, by limit: ContinuousClock.Instant? = nil
    ) async -> Result<Fetched, HaulError> {
        let body = BodyStream(window: max(keep, 16 << 10))
        defer { body.cancel() }
        let head = Cut(body, after: headSeconds, by: limit)
        let started = await start(t, on: body, cut: head)
        head.stop()
        guard case .success(let response) = started else { return started.map { Fetched(response: $0, body: []) } }
        let keep = (300..<400).contains(response.status) ? 0 : keep
        let cut = Cut(body, after: options.requestSeconds, by: limit)
        defer { cut.stop() }
        var fetched = Fetched(response: response, body: [])
        while fetched.body.count < keep {
            do throws(TransportError) {
                guard let chunk = try await body.next() else { break }
                fetched.body += chunk.prefix(keep - fetched.body.count)
            } catch {
                // Not the deadlines' cut, nor the caller's cancel: the answer broke off.
                if !head.hasFired && !cut.hasFired && error.kind != .cancelled {
                    fetched.broke = session.haulError(error, t.url, origin: url)
                }
                break
            }
        }
        return .success(fetched)
    }

    /// The longest a check waits for an answer's head: the session's connect timeout (0 is
    /// curl's default, 300 s; at most 300 s) and ``DiagnosisOptions/requestSeconds``.
    var headSeconds: Double {
        let connect = session.configuration.timeout.connect
        return (connect > 0 ? min(connect, 300) : 300) + options.requestSeconds
    }

    /// Starts `t` on `body` and waits for its head; a failure after `cut` fired is a timeout.
    func start(_ t: TransportRequest, on body: BodyStream, cut: Cut) async -> Result<TransportResponse, HaulError> {
        switch await body.start(t, on: transport) {
        case .success(let response): return .success(response)
        case .failure where cut.hasFired:
            let host = t.url.host ?? "?"
            return .failure(HaulError(.timeout, "no answer from \(host) within \(Seconds.text(cut.seconds)) s"))
        case .failure(let error): return .failure(session.haulError(error, t.url, origin: url))
        }
    }

    /// GET `url`, following redirects as a download does; the file's answer with its first bytes.
    func firstAnswer() async throws(HaulError) -> First {
        var chain = RedirectChain(
            url: url, headers: headers, maxRedirects: session.configuration.maxRedirects, netrc: session.netrc)
        var hops: [Diagnosis.Hop] = []
        // All the hops together: a chain of slow redirects cannot hold the diagnosis longer.
        let limit = ContinuousClock.now + Cut.duration(headSeconds + options.requestSeconds)
        while true {
            var t = request(chain.current, chain.headers)
            t.reportsConnection = true
            switch await fetch(t, keep: Self.sample, by: limit) {
            case .failure(let error): throw error
            case .success(let got):
                hops.append(
                    Diagnosis.Hop(status: got.response.status, url: ResumeRecord.shown(chain.current, origin: url)))
                if let next = RedirectChain.target(of: got.response, askedFor: chain.current) {
                    try chain.follow(to: next)
                    continue
                }
                return First(
                    hops: hops, response: got.response, sample: got.body, broke: got.broke, url: chain.current,
                    headers: chain.headers)
            }
        }
    }

    /// The connection report as the diagnosis shows it at `now` (seconds since 1970): expiry as
    /// ISO 8601 when it can be read, and the days left rounded down (an hour past it is -1).
    static func connection(_ report: ConnectionReport?, now: Int64) -> Diagnosis.Connection {
        var c = Diagnosis.Connection(httpVersion: report?.httpVersion, tlsVersion: report?.tlsVersion)
        if let text = report?.certificateExpiry {
            if let expiry = HTTPDate.parseCertificateDate(text) {
                c.certificateExpires = HTTPDate.iso8601(expiry)
                let left = expiry - now
                c.certificateDaysLeft = Int(left >= 0 ? left / 86400 : -((-left + 86399) / 86400))
            } else {
                c.certificateExpires = text
            }
        }
        return c
    }

    /// "1 byte", "2 bytes".
    static func bytes(_ n: Int) -> String { n == 1 ? "1 byte" : "\(n) bytes" }

    /// A second GET of the file's URL: its validators beside the first's.
    func secondAnswer(_ first: First, into v: inout Diagnosis.Validators) async {
        guard case .success(let got) = await fetch(request(first.url, first.headers), keep: 0) else { return }
        let response = got.response
        v.secondETag = response.headers["ETag"]
        v.secondLastModified = response.headers["Last-Modified"]
        if v.etag != nil || v.lastModified != nil {
            v.stable = v.etag == v.secondETag && v.lastModified == v.secondLastModified
        }
    }

    /// HEAD of the file's URL against the GET's length and type.
    func headCheck(_ first: First, answer: Diagnosis.Answer) async -> Diagnosis.HeadCheck {
        guard case .success(let got) = await fetch(request(first.url, first.headers, method: "HEAD"), keep: 0)
        else { return Diagnosis.HeadCheck() }
        var head = Diagnosis.HeadCheck(
            status: got.response.status, length: got.response.headers.contentLength,
            contentType: got.response.headers["Content-Type"])
        head.agrees = Self.agree(head, answer)
        return head
    }

    /// Whether HEAD named GET's status, its length when both name one (a HEAD may leave it
    /// out), and its media type (case and parameters aside).
    static func agree(_ head: Diagnosis.HeadCheck, _ answer: Diagnosis.Answer) -> Bool {
        let lengths = head.length == nil || answer.length == nil || head.length == answer.length
        return head.status == answer.status && lengths && media(head.contentType) == media(answer.contentType)
    }

    /// A Content-Type's media type, lowercased, without its parameters.
    static func media(_ type: String?) -> String? {
        type.map { $0.prefix { $0 != ";" }.trimmingASCIIWhitespace().lowercased() }
    }
}
