import HaulCore

extension Doctor {
    /// What in `d` makes a download slow, unable to resume or unsafe to split, one line each.
    static func findings(_ d: Diagnosis) -> [String] {
        let status = d.answer.status
        guard (200..<300).contains(status) else {
            return ["the server answers HTTP \(status) \(HTTPStatus.reason(status)): there is nothing to download"]
        }
        var out: [String] = []
        func scheme(_ hop: Diagnosis.Hop) -> String { hop.url.prefix { $0 != ":" }.lowercased() }
        if let leaving = zip(d.hops, d.hops.dropFirst()).first(where: {
            scheme($0.0) == "https" && scheme($0.1) == "http"
        }) {
            out.append(
                "a redirect leaves https for plain http (\(leaving.1.url)): anyone on the path can change the file")
        }
        if let days = d.connection.certificateDaysLeft, days < 14 {
            out.append(
                days < 0
                    ? "the server's certificate expired \(Self.days(-days)) ago"
                    : days == 0
                        ? "the server's certificate expires within a day"
                        : "the server's certificate expires in \(Self.days(days))")
        }
        if let coding = d.answer.contentEncoding, coding.lowercased() != "identity" {
            out.append("the server sends Content-Encoding \(coding) though a download asks for identity")
        }
        if let broke = d.answer.bodyError {
            out.append("the answer broke off (\(broke)): a download retries, and resumes only where ranges work")
        }
        out += rangeFindings(d)
        out += validatorFindings(d.validators)
        if let head = d.head {
            if head.agrees == false {
                out.append(headFinding(head, d.answer))
            } else if head.agrees == nil {
                out.append("HEAD failed: a tool that asks HEAD first cannot start")
            }
        }
        if d.gzipOnRanges == true {
            out.append(
                "ranges come gzip-compressed to a client that offers gzip (haul does not, for files): "
                    + "such a client splices compressed pieces")
        }
        // 4: haul get's connections per file.
        if let c = d.connections, let refusal = c.refusal, c.admitted < 4 {
            out.append(
                "the server admits \(c.admitted) connection\(c.admitted == 1 ? "" : "s") at once (\(refusal)): "
                    + (c.admitted > 0 ? "use -x \(c.admitted)" : "none is left for a download"))
        }
        if d.speeds.count == 2, d.speeds[0].bytesPerSecond > 0 {
            let gain = d.speeds[1].bytesPerSecond / d.speeds[0].bytesPerSecond
            if gain >= 1.5 {
                out.append(
                    "\(d.speeds[1].connections) connections are \(Format.fixed(gain, 1))x as fast as one: use -x \(d.speeds[1].connections)"
                )
            }
        }
        return out
    }

    /// How HEAD and GET disagree, each part that ``Doctor/agree(_:_:)`` compares.
    private static func headFinding(_ head: Diagnosis.HeadCheck, _ answer: Diagnosis.Answer) -> String {
        var said: [String] = []
        if head.status != answer.status {
            said.append("status \(head.status.map(String.init) ?? "-") against \(answer.status)")
        }
        if let h = head.length, let g = answer.length, h != g { said.append("length \(h) against \(g)") }
        if media(head.contentType) != media(answer.contentType) {
            said.append("type \(head.contentType ?? "none") against \(answer.contentType ?? "none")")
        }
        return "HEAD and GET disagree (\(said.joined(separator: ", "))): a tool that trusts HEAD is misled"
    }

    private static func rangeFindings(_ d: Diagnosis) -> [String] {
        switch d.ranges.support {
        case .honoured, .untested: return []
        case .ignored:
            return ["the server ignores Range (\(d.ranges.detail)): a download cannot resume (it starts over) or split"]
        case .wrongBytes:
            return ["the server's ranges are wrong (\(d.ranges.detail)): haul will not split or resume from them"]
        case .refused:
            return ["Range is refused (\(d.ranges.detail)): a download cannot resume or split"]
        }
    }

    private static func validatorFindings(_ v: Diagnosis.Validators) -> [String] {
        var out: [String] = []
        if v.etag == nil && v.lastModified == nil {
            out.append(
                "no ETag or Last-Modified: a resume is checked only by the size and the bytes before the resume point")
        } else if v.stable == false {
            out.append(
                "the validators changed between two requests (ETag \(v.etag ?? "none") then \(v.secondETag ?? "none")"
                    + ", Last-Modified \(v.lastModified ?? "none") then \(v.secondLastModified ?? "none")): "
                    + "every resume starts over")
        }
        if v.weakETag && v.lastModified == nil {
            out.append(
                "only a weak ETag and no Last-Modified: If-Range needs a strong validator, so a resume starts over")
        }
        return out
    }

    private static func days(_ n: Int) -> String { n == 1 ? "1 day" : "\(n) days" }
}
