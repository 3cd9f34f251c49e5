import Haul

/// The screen of `haul doctor`: one line per check, then the findings.
extension DoctorCommand {
    static func screen(_ d: Diagnosis) -> String {
        var lines = ["haul doctor \(d.url)"]
        func row(_ name: String, _ value: String) { lines.append(Format.leftAligned(name, 15) + value) }
        if d.hops.count > 1 {
            row("redirects", "\(d.hops.count - 1)")
            for hop in d.hops { lines.append(String(repeating: " ", count: 15) + "\(hop.status) \(hop.url)") }
        } else {
            row("redirects", "none")
        }
        row("answer", answer(d.answer))
        row("connection", connection(d.connection))
        if (200..<300).contains(d.answer.status) {
            row("validators", validators(d.validators))
            row("ranges", "\(d.ranges.support.rawValue): \(d.ranges.detail)")
            row("HEAD vs GET", head(d.head))
            row("gzip on ranges", d.gzipOnRanges.map { $0 ? "yes" : "no" } ?? "not asked")
            if let c = d.connections {
                var text = "\(c.admitted) admitted of \(c.tried) tried" + (c.refusal.map { "; \($0)" } ?? "")
                if c.ended > 0 { text += " (\(c.ended) had their whole answer before the count ended)" }
                row("connections", text)
            }
            row("speed", speeds(d.speeds))
        }
        lines.append("")
        if d.findings.isEmpty {
            lines.append("no problem found: a download of this URL resumes and splits over connections")
        } else {
            lines.append("findings:")
            lines += d.findings.map { "  - " + $0 }
        }
        // Every value is the server's: no escape sequence reaches the terminal.
        return lines.map(Output.printable).joined(separator: "\n")
    }

    private static func answer(_ a: Diagnosis.Answer) -> String {
        var parts = ["\(a.status)"]
        parts.append(a.length.map { "\(Output.bytes($0)) (\($0) bytes)" } ?? "no length")
        if let type = a.contentType { parts.append(type) }
        if let coding = a.contentEncoding { parts.append("Content-Encoding \(coding)") }
        return parts.joined(separator: ", ")
    }

    private static func connection(_ c: Diagnosis.Connection) -> String {
        var parts = [c.httpVersion ?? "HTTP version unknown"]
        if let tls = c.tlsVersion { parts.append(tls) }
        if let expires = c.certificateExpires {
            parts.append("certificate expires \(expires)" + (c.certificateDaysLeft.map { " (\($0) days)" } ?? ""))
        }
        return parts.joined(separator: ", ")
    }

    private static func validators(_ v: Diagnosis.Validators) -> String {
        let named = [v.etag.map { "ETag \($0)" }, v.lastModified.map { "Last-Modified \($0)" }].compactMap { $0 }
        guard !named.isEmpty else { return "none" }
        let second: String =
            switch v.stable {
            case true?: "the same on a second request"
            case false?: "different on a second request"
            case nil: "no second answer"
            }
        return named.joined(separator: ", ") + "; " + second
    }

    private static func head(_ h: Diagnosis.HeadCheck?) -> String {
        guard let h, let status = h.status else { return "HEAD failed" }
        if h.agrees == true { return "agree (\(status), length and type)" }
        return "disagree: HEAD says \(status), " + (h.length.map { "\($0) bytes" } ?? "no length") + ", "
            + (h.contentType ?? "no type")
    }

    private static func speeds(_ speeds: [Diagnosis.Speed]) -> String {
        guard let one = speeds.first else { return "not measured" }
        var text = "1 connection \(rate(one.bytesPerSecond))"
        if speeds.count > 1 {
            let many = speeds[1]
            text += "; \(many.connections) connections \(rate(many.bytesPerSecond))"
            if one.bytesPerSecond > 0 { text += " (\(Format.fixed(many.bytesPerSecond / one.bytesPerSecond, 1))x)" }
        } else {
            text += "; not split (needs honoured ranges and a length)"
        }
        return text
    }

    private static func rate(_ bytesPerSecond: Double) -> String {
        Output.bytes(Int64(bytesPerSecond.isFinite ? max(0, bytesPerSecond) : 0)) + "/s"
    }
}
