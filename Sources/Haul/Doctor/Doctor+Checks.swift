import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension Doctor {
    /// Two small ranges of the sample (its first bytes, and bytes from its middle), each
    /// compared with the whole read's bytes at those offsets.
    func rangeCheck(_ first: First) async -> Diagnosis.Ranges {
        let n = first.sample.count
        guard n >= 2 else {
            let why = first.broke.map { "the answer broke off after \(Self.bytes(n)) (\($0.message))" }
            return Diagnosis.Ranges(support: .untested, detail: why ?? "the answer has under 2 bytes")
        }
        let size = min(512, n / 2)
        for start in [0, n / 2] {
            let span = start..<min(n, start + size)
            var headers = first.headers
            headers.replace("Range", "bytes=\(span.lowerBound)-\(span.upperBound - 1)")
            // One byte more than asked: a range that runs on is caught.
            switch await fetch(request(first.url, headers), keep: span.count + 1) {
            case .failure(let error):
                return Diagnosis.Ranges(support: .refused, detail: "a range failed: \(error.message)")
            case .success(let got):
                if let verdict = Self.judge(got.response, got.body, asked: span, sample: first.sample) {
                    return verdict
                }
            }
        }
        return Diagnosis.Ranges(
            support: .honoured, detail: "two ranges of \(size) bytes match a whole read of the same span")
    }

    /// The verdict on one range's answer; nil when it is the range asked for, with its bytes.
    static func judge(
        _ response: TransportResponse, _ body: [UInt8], asked span: Range<Int>, sample: [UInt8]
    )
        -> Diagnosis.Ranges?
    {
        let asked = "bytes=\(span.lowerBound)-\(span.upperBound - 1)"
        switch response.status {
        case 206: break
        case 200:
            return Diagnosis.Ranges(
                support: .ignored, detail: "asked for \(asked), the server sent 200 and the whole file")
        default:
            return Diagnosis.Ranges(
                support: .refused, detail: "asked for \(asked), the server answered \(response.status)")
        }
        let range = response.headers["Content-Range"].flatMap(HTTPParsing.contentRange)
        guard let range, range.start == Int64(span.lowerBound), range.end == Int64(span.upperBound - 1) else {
            let said = response.headers["Content-Range"].map { "Content-Range \($0)" } ?? "no Content-Range"
            return Diagnosis.Ranges(support: .wrongBytes, detail: "asked for \(asked), the 206 has \(said)")
        }
        guard body.elementsEqual(sample[span]) else {
            return Diagnosis.Ranges(
                support: .wrongBytes, detail: "the 206 for \(asked) has other bytes than a whole read at that offset")
        }
        return nil
    }

    /// A range asked for with `Accept-Encoding: gzip`: whether it came with a content coding
    /// (a range of the compressed bytes, which a client cannot join to a plain file's).
    func gzipOnRanges(_ first: First) async -> Bool? {
        var headers = first.headers
        headers.replace("Range", "bytes=0-\(min(first.sample.count, 1024) - 1)")
        headers.replace("Accept-Encoding", "gzip")
        guard case .success(let got) = await fetch(request(first.url, headers), keep: 0) else { return nil }
        let coding = got.response.headers["Content-Encoding"]?.trimmingASCIIWhitespace().lowercased()
        return coding != nil && coding != "identity" && coding != ""
    }

    /// Connections opened one at a time, each kept open (its reading paused by flow control),
    /// until one is turned away (or given no answer within ``headSeconds``) or
    /// ``DiagnosisOptions/maxConnections`` are open.
    func connectionCount(_ first: First) async -> Diagnosis.Connections {
        var open: [BodyStream] = []
        defer { for body in open { body.cancel() } }
        var refusal: String?
        for index in 1...options.maxConnections {
            let body = BodyStream(window: 16 << 10)
            let cut = Cut(body, after: headSeconds)
            let result = await start(request(first.url, first.headers), on: body, cut: cut)
            cut.stop()
            open.append(body)
            switch result {
            case .failure(let error): refusal = "connection \(index): \(error.message)"
            case .success(let response) where !(200..<300).contains(response.status):
                refusal = "connection \(index): HTTP \(response.status) \(HTTPStatus.reason(response.status))"
            case .success: continue
            }
            break
        }
        let tried = open.count
        let admitted = refusal == nil ? tried : tried - 1
        let ended = open.prefix(admitted).filter(\.hasEnded).count
        return Diagnosis.Connections(tried: tried, admitted: admitted, refusal: refusal, ended: ended)
    }

    /// The speed on one connection, then on ``DiagnosisOptions/speedConnections`` (one range
    /// each; only when ranges are honoured and the length known).
    func speeds(_ first: First, length: Int64?, ranges: Diagnosis.RangeSupport) async -> [Diagnosis.Speed] {
        var out = [await speed(first, ranges: [nil])]
        let n = options.speedConnections
        if n > 1, ranges == .honoured, let length, length >= Int64(n) {
            // Equal parts, the last to the end; divided first, so a length near Int64.max (the
            // server's word) cannot overflow.
            let part = length / Int64(n)
            let ranges = (0..<Int64(n)).map { i -> ClosedRange<Int64>? in
                (part * i)...(i == Int64(n) - 1 ? length - 1 : part * (i + 1) - 1)
            }
            out.append(await speed(first, ranges: ranges))
        }
        return out
    }

    /// Bytes received on one connection per range (nil: the whole file) for
    /// ``DiagnosisOptions/speedSeconds``, or until every answer ended.
    func speed(_ first: First, ranges: [ClosedRange<Int64>?]) async -> Diagnosis.Speed {
        let clock = ContinuousClock()
        let began = clock.now
        let seconds = options.speedSeconds
        let total = await withTaskGroup(of: Int64.self) { group in
            for range in ranges {
                var headers = first.headers
                if let range { headers.replace("Range", "bytes=\(range.lowerBound)-\(range.upperBound)") }
                let t = request(first.url, headers)
                group.addTask { await self.count(t, until: began + Cut.duration(seconds)) }
            }
            return await group.reduce(0, +)
        }
        let elapsed = Seconds.of(clock.now - began)
        let spent = min(max(elapsed, 0.001), max(seconds, 0.001))
        return Diagnosis.Speed(
            connections: ranges.count, bytes: total, seconds: spent, bytesPerSecond: Double(total) / spent)
    }

    /// The body bytes of `t` received before `deadline` (or its end).
    func count(_ t: TransportRequest, until deadline: ContinuousClock.Instant) async -> Int64 {
        let body = BodyStream(window: 1 << 20)
        let stop = Cut(body, after: options.speedSeconds, by: deadline)
        defer {
            stop.stop()
            body.cancel()
        }
        guard case .success(let response) = await body.start(t, on: transport), (200..<300).contains(response.status)
        else { return 0 }
        var bytes: Int64 = 0
        while ContinuousClock.now < deadline {
            do throws(TransportError) {
                guard let chunk = try await body.next() else { break }
                bytes += Int64(chunk.count)
            } catch {
                break
            }
        }
        return bytes
    }
}
