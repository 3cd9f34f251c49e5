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
        var options = options
        // Held connections past the session's cap would wait for a slot none of them gives back.
        if let cap = configuration.maxConnectionsPerHost { options.maxConnections = min(options.maxConnections, cap) }
        options.maxConnections = min(max(options.maxConnections, 0), 64)
        options.speedConnections = min(max(options.speedConnections, 1), 16)
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

    /// The file's first answer, as it came at the end of the redirects.
    struct First {
        var hops: [Diagnosis.Hop]
        var response: TransportResponse
        var sample: [UInt8]
        var url: URL
        /// The headers for that URL (credentials kept only on the same origin).
        var headers: HTTPHeaders
    }

    func run() async throws(HaulError) -> Diagnosis {
        let first = try await firstAnswer()
        let h = first.response.headers
        let answer = Diagnosis.Answer(
            status: first.response.status, length: first.response.status == 200 ? h.contentLength : nil,
            contentType: h["Content-Type"], acceptRanges: h["Accept-Ranges"], contentEncoding: h["Content-Encoding"])
        var diagnosis = Diagnosis(
            url: ResumeRecord.redacted(url), hops: first.hops, connection: connection(first.response.connection),
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

    /// Sends `t` and keeps at most `keep` bytes of its body, then stops it; a body that has not
    /// given them within ``bodySeconds`` of its head (a server that trickles) is cut there, and
    /// what came is kept, as it is from a body the server cut short.
    func fetch(_ t: TransportRequest, keep: Int) async -> Result<(TransportResponse, [UInt8]), TransportError> {
        let body = BodyStream(window: max(keep, 16 << 10))
        defer { body.cancel() }
        let response: TransportResponse
        switch await body.start(t, on: transport) {
        case .failure(let error): return .failure(error)
        case .success(let r): response = r
        }
        let deadline = ContinuousClock.now + .seconds(Self.bodySeconds)
        let cut = Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            body.cancel()
        }
        defer { cut.cancel() }
        var kept: [UInt8] = []
        while kept.count < keep {
            do throws(TransportError) {
                guard let chunk = try await body.next() else { break }
                kept += chunk.prefix(keep - kept.count)
            } catch {
                // Cut at the deadline, or dropped by the server: what came is what it sent.
                break
            }
        }
        return .success((response, kept))
    }

    /// The longest a check reads a body for.
    static let bodySeconds = 10

    /// GET `url`, following redirects as a download does; the file's answer with its first bytes.
    func firstAnswer() async throws(HaulError) -> First {
        var chain = RedirectChain(
            url: url, headers: headers, maxRedirects: session.configuration.maxRedirects, netrc: session.netrc)
        var hops: [Diagnosis.Hop] = []
        while true {
            var t = request(chain.current, chain.headers)
            t.reportsConnection = true
            switch await fetch(t, keep: Self.sample) {
            case .failure(let error):
                throw session.haulError(error, chain.current, origin: url)
            case .success(let (response, body)):
                hops.append(Diagnosis.Hop(status: response.status, url: ResumeRecord.shown(chain.current, origin: url)))
                if let next = RedirectChain.target(of: response, askedFor: chain.current) {
                    try chain.follow(to: next)
                    continue
                }
                return First(hops: hops, response: response, sample: body, url: chain.current, headers: chain.headers)
            }
        }
    }

    /// The connection report as the diagnosis shows it (expiry as ISO 8601 when it can be read).
    func connection(_ report: ConnectionReport?) -> Diagnosis.Connection {
        var c = Diagnosis.Connection(httpVersion: report?.httpVersion, tlsVersion: report?.tlsVersion)
        if let text = report?.certificateExpiry {
            if let expiry = HTTPDate.parseCookieDate(text) {
                c.certificateExpires = HTTPDate.iso8601(expiry)
                let now = Int64(Date().timeIntervalSince1970)
                c.certificateDaysLeft = Int((expiry - now) / 86400)
            } else {
                c.certificateExpires = text
            }
        }
        return c
    }

    /// A second GET of the file's URL: its validators beside the first's.
    func secondAnswer(_ first: First, into v: inout Diagnosis.Validators) async {
        guard case .success(let (response, _)) = await fetch(request(first.url, first.headers), keep: 0) else { return }
        v.secondETag = response.headers["ETag"]
        v.secondLastModified = response.headers["Last-Modified"]
        if v.etag != nil || v.lastModified != nil {
            v.stable = v.etag == v.secondETag && v.lastModified == v.secondLastModified
        }
    }

    /// HEAD of the file's URL against the GET's length and type.
    func headCheck(_ first: First, answer: Diagnosis.Answer) async -> Diagnosis.HeadCheck {
        guard case .success(let (response, _)) = await fetch(request(first.url, first.headers, method: "HEAD"), keep: 0)
        else { return Diagnosis.HeadCheck() }
        let length = response.headers.contentLength
        let type = response.headers["Content-Type"]
        return Diagnosis.HeadCheck(
            status: response.status, length: length, contentType: type,
            agrees: response.status == answer.status && length == answer.length && type == answer.contentType)
    }
}
