import Dispatch
import HaulCore

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

/// The routes: what each query option makes the server answer.
extension TestServer {
    /// A request's query, with the readings the routes use.
    struct Query {
        let values: [String: String]
        subscript(_ key: String) -> String? { values[key] }
        func int(_ key: String) -> Int? { values[key].flatMap { Int($0) } }
        func flag(_ key: String) -> Bool { values[key] == "1" || values[key] == "true" }
        /// `key=N` unless the request is the `limitKey`-th or later (`drop=N&drops=K`).
        func count(_ key: String, until limitKey: String, hit: Int) -> Int? {
            guard let n = int(key) else { return nil }
            if let limit = int(limitKey), hit >= limit { return nil }
            return n
        }
    }

    /// `busy=N`: at most N requests of a path answered at once (a server's per-client connection
    /// limit); one more gets 503. Each stops counting just before its last bytes.
    final class Admission {
        let server: TestServer
        let path: String
        private var counting = false
        init(_ server: TestServer, path: String) {
            self.server = server
            self.path = path
        }
        /// Whether one more request is let in under `limit`.
        func enter(limit: Int) -> Bool {
            counting = server.state.withLock { s -> Bool in
                guard s.busyPaths[path, default: 0] < limit else { return false }
                s.busyPaths[path, default: 0] += 1
                return true
            }
            return counting
        }
        func leave() {
            guard counting else { return }
            counting = false
            server.state.withLock { $0.busyPaths[path, default: 0] -= 1 }
        }
    }

    /// What a request's target names: its bytes, version and validators.
    struct Representation {
        let seed: Int
        let version: Int
        let size: Int
        /// The bytes when they are not the generated content (`body=`, `gzip=1`).
        let stored: [UInt8]?
        var actualSize: Int { stored?.count ?? size }
        /// The length the answer claims (`lie=N` adds N).
        let claimed: Int
        let etag: String?
        let lastModified: String?

        init(_ q: Query, hit: Int) {
            seed = q.int("seed") ?? 1
            switch q["change"] {
            case "1": version = hit >= 1 ? 1 : 0
            case "always": version = hit
            default: version = 0
            }
            size = q.int("size") ?? 1024
            // `body=TEXT`: the answer is TEXT's bytes (a hostile server's file of its choosing).
            var stored: [UInt8]? = q["body"].map { Array($0.utf8) }
            if q.flag("gzip") {
                stored = TestContent.gzip(TestContent.bytes(seed: seed, version: version, count: size))
            }
            self.stored = stored
            claimed = (stored?.count ?? size) + (q.int("lie") ?? 0)
            etag = q["etag"] == "0" ? nil : (q.flag("weak") ? "W/" : "") + "\"s\(seed)-v\(version)-\(size)\""
            lastModified =
                q["lm"] == "0"
                ? nil : HTTPDate.format(1_767_225_600 + Int64(version) * 3600)
        }
    }

    /// Whether a conditional GET finds the representation unchanged (RFC 9110 13.1.2 and 13.1.3):
    /// `If-None-Match` compares ETags weakly (`*` matches any); without it, `If-Modified-Since`
    /// holds when the Last-Modified is not later than its date.
    static func notModified(_ r: RecordedRequest, _ representation: Representation) -> Bool {
        guard r.method == "GET" || r.method == "HEAD" else { return false }
        func opaque(_ tag: Substring) -> Substring {
            let t = tag.trimmingPrefix(while: { $0 == " " })
            return t.hasPrefix("W/") ? t.dropFirst(2) : t
        }
        if let list = r.header("If-None-Match") {
            guard let etag = representation.etag else { return false }
            return list.split(separator: ",").contains { opaque($0) == "*" || opaque($0) == opaque(Substring(etag)) }
        }
        guard let since = r.header("If-Modified-Since").flatMap({ HTTPDate.parse($0) }),
            let modified = representation.lastModified.flatMap({ HTTPDate.parse($0) })
        else { return false }
        return modified <= since
    }

    /// Serves one request; returns whether the connection stays open.
    func respond(_ fd: Int32, _ r: RecordedRequest, hit: Int, beforeLastWrite: () -> Void) -> Bool {
        let q = Query(values: r.query)
        let admission = Admission(self, path: r.path)
        defer { admission.leave() }
        if let limit = q.int("busy"), !admission.enter(limit: limit) {
            return send(fd, status: 503, headers: [("Content-Length", "0")], body: [])
        }
        if let delay = q["delay"].flatMap(Double.init), hit >= q.int("delayfrom") ?? 0 { sleepFor(delay) }
        if let answered = answerWithoutBody(fd, r, q, hit: hit) { return answered }

        let representation = Representation(q, hit: hit)
        var headers: [(String, String)] = setCookies(q)
        // cc=V: `Cache-Control: V`; vary=NAME: `Vary: NAME`.
        if let cc = q["cc"] { headers.append(("Cache-Control", cc)) }
        if let vary = q["vary"] { headers.append(("Vary", vary)) }
        if let etag = representation.etag { headers.append(("ETag", etag)) }
        if let lastModified = representation.lastModified { headers.append(("Last-Modified", lastModified)) }
        if q.flag("gzip") { headers.append(("Content-Encoding", "gzip")) }
        if let cd = contentDisposition(q["cd"]) { headers.append(("Content-Disposition", cd)) }
        if q["cond"] != "0", Self.notModified(r, representation) {
            return send(fd, status: 304, headers: headers.filter { $0.0 != "Content-Disposition" }, body: [])
        }
        guard let (start, stop, partial) = range(of: r, q, representation, hit: hit, headers: &headers) else {
            let claimed = representation.claimed
            return send(
                fd, status: 416, headers: headers + [("Content-Range", "bytes */\(claimed)"), ("Content-Length", "0")],
                body: [])
        }
        headers += digestFields(q, representation, from: start, to: stop)
        let chunked = q.flag("chunked")
        if partial { headers.append(("Content-Range", "bytes \(start)-\(stop - 1)/\(representation.claimed)")) }
        // etag206=0: a 206 without the ETag its 200 carries (it cannot confirm the version).
        if partial && q["etag206"] == "0" { headers.removeAll { $0.0 == "ETag" } }
        if !chunked {
            // length=V: that literal value instead of the true length (`-5`, `abc`).
            headers.append(("Content-Length", q["length"] ?? String(stop - start)))
            // length2=N: a second Content-Length that disagrees (framing no client can trust).
            if let second = q.int("length2") { headers.append(("Content-Length", String(second))) }
        } else {
            headers.append(("Transfer-Encoding", "chunked"))
        }
        let status = partial ? 206 : 200
        // headlength=V: a HEAD says Content-Length V (a server whose HEAD and GET disagree).
        if r.method == "HEAD", let length = q["headlength"] {
            headers.removeAll { $0.0 == "Content-Length" }
            headers.append(("Content-Length", length))
        }
        guard writeHead(fd, status: status, headers: headers, latin1: q["cd"] == "latin1") else { return false }
        if r.method == "HEAD" { return true }
        let lastWrite = {
            if let n = q.int("hold") { self.holdUntil(inFlight: n) }
            admission.leave()
            beforeLastWrite()
        }
        return sendBody(
            fd, r, q, representation, from: start, to: stop, partial: partial, hit: hit, beforeLastWrite: lastWrite)
    }

    /// `digest=repr|content|sha512|malformed`: RFC 9530 digest fields. `repr`: `Repr-Digest`
    /// with the SHA-256 of the whole file; `sha512`: the same with SHA-512; `content`:
    /// `Content-Digest` with the SHA-256 of the bytes of this answer (its range, on a 206);
    /// `malformed`: a `Repr-Digest` that is no dictionary of byte sequences.
    /// `digestof=V`: the digests are of version V's bytes (a server that lies about its file).
    private func digestFields(
        _ q: Query, _ representation: Representation, from start: Int, to stop: Int
    ) -> [(String, String)] {
        guard let kind = q["digest"] else { return [] }
        if kind == "malformed" { return [("Repr-Digest", "sha-256=notbytes, md5")] }
        let whole = kind != "content"
        let algorithm: Checksum.Algorithm = kind == "sha512" ? .sha512 : .sha256
        let version = q.int("digestof") ?? representation.version
        let key =
            "\(algorithm.rawValue) \(representation.seed) \(version) \(representation.actualSize) \(whole ? 0 : start)-\(whole ? -1 : stop)"
        let digest =
            state.withLock { $0.digests[key] }
            ?? {
                let value = TestContent.digest(
                    algorithm, seed: representation.seed, version: version, offset: whole ? 0 : start,
                    count: whole ? representation.actualSize : stop - start, stored: representation.stored)
                state.withLock { $0.digests[key] = value }
                return value
            }()
        let field = "\(algorithm.rawValue)=:\(Data(digest).base64EncodedString()):"
        return [(whole ? "Repr-Digest" : "Content-Digest", field)]
    }

    /// `setcookie=A|B`: a `Set-Cookie` field for each of A and B (with a file, and with a `to=`
    /// redirect).
    private func setCookies(_ q: Query) -> [(String, String)] { Self.setCookies(q.values) }

    /// The `Set-Cookie` fields `setcookie=` asks for, from a request's query.
    static func setCookies(_ query: [String: String]) -> [(String, String)] {
        query["setcookie"].map { $0.split(separator: "|").map { ("Set-Cookie", String($0)) } } ?? []
    }

    /// Answers that carry no file: status sequences, an expired signed link, redirects; nil
    /// when the request is for the file.
    private func answerWithoutBody(_ fd: Int32, _ r: RecordedRequest, _ q: Query, hit: Int) -> Bool? {
        // Status sequences: status=503,503,200 (the last repeats).
        if let seq = q["status"]?.split(separator: ",").compactMap({ Int($0) }), !seq.isEmpty {
            let status = seq[min(hit, seq.count - 1)]
            if status != 200 {
                var h = [("Content-Length", "0")]
                if let ra = q["retryAfter"] { h.append(("Retry-After", ra)) }
                if status == 416 { h.append(("Content-Range", "bytes */\(q.int("size") ?? 1024)")) }
                return send(fd, status: status, headers: h, body: [])
            }
        }
        // auth=USER:PASS: 401 unless the request has that Basic credential.
        if let auth = q["auth"], r.header("Authorization") != "Basic " + Data(auth.utf8).base64EncodedString() {
            let challenge = [("WWW-Authenticate", "Basic realm=\"test\""), ("Content-Length", "0")]
            return send(fd, status: 401, headers: challenge, body: [])
        }
        if let answered = signedLink(fd, r, q) { return answered }
        if let to = q["to"] {
            return send(
                fd, status: 302, headers: [("Location", to), ("Content-Length", "0")] + setCookies(q), body: [])
        }
        if q.flag("loop") {
            return send(fd, status: 302, headers: [("Location", r.target), ("Content-Length", "0")], body: [])
        }
        if let count = q.int("redirect"), count > 0 {
            let next = r.target.replacing("redirect=\(count)", with: "redirect=\(count - 1)")
            let status = [301, 302, 303, 307, 308][count % 5]
            return send(fd, status: status, headers: [("Location", next), ("Content-Length", "0")], body: [])
        }
        return nil
    }

    /// signed=S: like a storage service's pre-signed link. The target without `sig=` redirects
    /// to itself with a new `sig=`; that URL is refused (403) from S seconds after its first
    /// request on (counted from its first use, not its signing, so that a slow test machine does
    /// not see a link expire before it is used). Nil when the link is good (or not signed).
    private func signedLink(_ fd: Int32, _ r: RecordedRequest, _ q: Query) -> Bool? {
        guard let lifetime = q["signed"].flatMap(Double.init) else { return nil }
        guard let sig = q["sig"] else {
            let sig = UUID().uuidString
            let location = r.target + (r.target.contains("?") ? "&" : "?") + "sig=\(sig)"
            return send(fd, status: 302, headers: [("Location", location), ("Content-Length", "0")], body: [])
        }
        let now = Date()
        let first = state.withLock { s in
            if s.signedFirstUse[sig] == nil { s.signedFirstUse[sig] = now }
            return s.signedFirstUse[sig]!
        }
        guard now.timeIntervalSince(first) > lifetime else { return nil }
        let body = Array("Request has expired".utf8)
        return send(fd, status: 403, headers: [("Content-Length", "\(body.count)")], body: body)
    }

    /// The bytes to send, `start..<stop`, and whether that is a range (206): Range honoured
    /// unless ranges=0 (or from the norange=K-th request on), If-Range compared strongly unless
    /// ifrange=0. Nil for a range that starts past the end (416).
    private func range(
        of r: RecordedRequest, _ q: Query, _ representation: Representation, hit: Int,
        headers: inout [(String, String)]
    ) -> (start: Int, stop: Int, partial: Bool)? {
        let claimed = representation.claimed
        let rangesOn = q["ranges"] != "0" && !(q.int("norange").map { hit >= $0 } ?? false)
        if rangesOn { headers.append(("Accept-Ranges", "bytes")) }
        guard rangesOn, let range = r.range, let (first, end) = parseRange(range, size: claimed) else {
            return (0, claimed, false)
        }
        if let ifRange = r.ifRange, q["ifrange"] != "0" {
            let honour =
                ifRange.hasPrefix("W/")
                ? false : (ifRange == representation.etag || ifRange == representation.lastModified)
            if !honour { return (0, claimed, false) }
        }
        if first >= claimed { return nil }
        return (first, min(end ?? claimed, claimed), true)
    }

    /// Sends bytes `start..<stop` with the faults the query asks for: drop=N closes after N
    /// body bytes, stall=N stops sending after N, rate=B paces (after burst=B at once), and
    /// slowat=OFFSET&slowrate=B drips a range that starts exactly at OFFSET.
    private func sendBody(
        _ fd: Int32, _ r: RecordedRequest, _ q: Query, _ representation: Representation, from start: Int,
        to stop: Int, partial: Bool, hit: Int, beforeLastWrite: () -> Void
    ) -> Bool {
        let dropAfter = q.count("drop", until: "drops", hit: hit)
        let stallAfter = q.count("stall", until: "stalls", hit: hit)
        let rate = (partial && q.int("slowat") == start ? q.int("slowrate") : nil) ?? q.int("rate")
        let chunked = q.flag("chunked")
        let actualSize = representation.actualSize
        var offset = start
        var sent = 0
        let chunkSize = rate.map { max(1, min(65_536, $0 / 20)) } ?? 65_536
        var chunk = [UInt8](repeating: 0, count: chunkSize)
        let began = Date()
        let last = min(actualSize, stop)
        while offset < last {
            var n = min(chunkSize, last - offset)
            if let d = dropAfter { n = min(n, d - sent) }
            if let s = stallAfter { n = min(n, s - sent) }
            if n <= 0 { break }
            fill(&chunk, count: n, at: offset, of: representation)
            if offset + n >= last && !chunked && stop <= actualSize { beforeLastWrite() }
            let ok = chunked ? writeChunk(fd, chunk, n) : writeAll(fd, chunk, n)
            if !ok {
                state.withLock { $0.cut[r.path, default: 0] += 1 }
                return false
            }
            offset += n
            sent += n
            state.withLock { $0.sent[r.path, default: 0] += n }
            if let rate {
                // burst=B: the first B bytes of each answer at once (nginx's limit_rate gives a
                // request its first 2 MiB so), then `rate`.
                let due = Double(max(0, sent - (q.int("burst") ?? 0))) / Double(rate)
                let elapsed = Date().timeIntervalSince(began)
                if due > elapsed { sleepFor(due - elapsed) }
            }
        }
        if let d = dropAfter, sent >= d, offset < last { return false }  // drop: close mid-body
        if let s = stallAfter, sent >= s, offset < last {
            stall(fd)
            return false
        }
        if stop > actualSize { return false }  // lied about the length: close early
        if chunked { return writeAll(fd, Array("0\r\n\r\n".utf8), 5) }
        return true
    }

    /// Puts the representation's `count` bytes at `offset` into the start of `chunk`.
    private func fill(_ chunk: inout [UInt8], count n: Int, at offset: Int, of representation: Representation) {
        if let stored = representation.stored {
            chunk.withUnsafeMutableBytes { dst in
                stored.withUnsafeBytes { dst.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
            }
        } else {
            chunk.withUnsafeMutableBytes {
                TestContent.fill(
                    UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), seed: representation.seed,
                    version: representation.version, offset: offset)
            }
        }
    }

    func contentDisposition(_ kind: String?) -> String? {
        switch kind {
        case "benign": return "attachment; filename=\"report.pdf\""
        case "quoted": return "attachment; filename=\"my \\\"quoted\\\" file.txt\""
        case "rfc5987": return "attachment; filename=\"fallback.txt\"; filename*=UTF-8''na%C3%AFve%20caf%C3%A9.txt"
        case "traversal": return "attachment; filename=\"../../evil.txt\""
        case "absolute": return "attachment; filename=\"/etc/evil.txt\""
        case "slashes": return "attachment; filename=\"a/b\\\\c/inner.txt\""
        case "nul": return "attachment; filename*=UTF-8''nul%00name%0A.txt"
        case "long": return "attachment; filename=\"\(String(repeating: "x", count: 300)).txt\""
        case "dots": return "attachment; filename=\"..\""
        // Sent in ISO-8859-1 (`é` as the byte E9), as RFC 6266's filename= is and older servers do.
        case "latin1": return "attachment; filename=\"caf\u{E9} cr\u{E8}me.txt\""
        case nil: return nil
        default: return "attachment; filename=\"\(kind!)\""
        }
    }

    /// `bytes=a-b`, `bytes=a-` or `bytes=-n`: the first byte and, when given, one past the last.
    func parseRange(_ value: String, size: Int) -> (first: Int, end: Int?)? {
        guard value.hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2 else { return nil }
        if spec[0].isEmpty, let suffix = Int(spec[1]) { return (max(0, size - suffix), nil) }
        guard let first = Int(spec[0]) else { return nil }
        if spec[1].isEmpty { return (first, nil) }
        guard let last = Int(spec[1]), last >= first else { return nil }
        return (first, last + 1)
    }

    func stall(_ fd: Int32) {
        // Headers and part of the body are out; now send nothing, for at most 60 s, until the
        // client gives up or the server stops.
        let deadline = Date().addingTimeInterval(60)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        var scratch = [UInt8](repeating: 0, count: 1024)
        while Date() < deadline, !state.withLock({ $0.stopped }) {
            if poll(&pfd, 1, 100) > 0 {
                if recv(fd, &scratch, scratch.count, 0) <= 0 { return }
            }
        }
    }

    func send(_ fd: Int32, status: Int, headers: [(String, String)], body: [UInt8]) -> Bool {
        writeHead(fd, status: status, headers: headers) && (body.isEmpty || writeAll(fd, body, body.count))
    }

    /// `latin1`: the head in ISO-8859-1 (one byte per character up to U+00FF), not UTF-8.
    func writeHead(_ fd: Int32, status: Int, headers: [(String, String)], latin1: Bool = false) -> Bool {
        var head = "HTTP/1.1 \(status) \(reason(status))\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        head += "\r\n"
        let bytes = latin1 ? head.unicodeScalars.map { UInt8(truncatingIfNeeded: $0.value) } : Array(head.utf8)
        return writeAll(fd, bytes, bytes.count)
    }

    func writeChunk(_ fd: Int32, _ data: [UInt8], _ count: Int) -> Bool {
        let size = Array((String(count, radix: 16) + "\r\n").utf8)
        return writeAll(fd, size, size.count) && writeAll(fd, data, count) && writeAll(fd, [13, 10], 2)
    }

    func writeAll(_ fd: Int32, _ data: [UInt8], _ count: Int) -> Bool {
        var done = 0
        while done < count {
            let n = data.withUnsafeBytes { sendBytes(fd, $0.baseAddress! + done, count - done) }
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                return false
            }
            done += n
        }
        return true
    }

    func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 404: "Not Found"
        case 416: "Range Not Satisfiable"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}
