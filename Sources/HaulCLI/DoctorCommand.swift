import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul doctor URL`: why a download of URL is slow or does not resume, on one screen.
struct DoctorCommand {
    static let help = """
        usage: haul doctor URL [options]

        Asks the server how it serves URL, and says what makes a download of it slow or unable
        to resume: the redirect chain; HTTP and TLS version and the certificate's expiry; the
        validators (ETag, Last-Modified) and whether a second request names the same; whether
        Range is honoured (two small ranges compared with a whole read of the same bytes);
        whether HEAD and GET agree on length and type; gzip on ranges; how many connections
        the server admits at once; the speed on one connection and on four. Nothing is saved.
        Exit 0 when the URL answers 2xx (problems or not), 4 for an error status.

              --json              one JSON object instead of the screen
              --max-connections N hold at most N connections open to count them (default 8,
                                  0 to skip; 1-64)
              --seconds S         run each speed measurement for S seconds (default 3, 0 to skip)
          -H, --header 'N: v'     extra request header (repeatable)
              --connect-timeout S connection timeout in seconds (default 30)
              --timeout S         stall timeout in seconds (default 30)
        \(ConnectionFlags.help)
        \(AuthFlags.help)
        """

    static let options: [Arguments.Option] =
        [
            .init("--json"),
            .init("--max-connections", value: true),
            .init("--seconds", value: true),
            .init("-H", "--header", value: true),
            .init("--connect-timeout", value: true),
            .init("--timeout", value: true),
        ] + ConnectionFlags.options + AuthFlags.options

    let url: URL
    let json: Bool
    let options: DiagnosisOptions
    let configuration: HaulConfiguration

    init(_ args: [String]) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: Self.options)
        guard positionals.count == 1 else {
            throw UsageError(
                positionals.isEmpty ? "doctor needs a URL (see haul help doctor)" : "doctor takes one URL")
        }
        url = try parseURL(positionals[0])
        json = v.flag("--json")
        var o = DiagnosisOptions()
        if let n = try v.integer("--max-connections") {
            guard n <= 64 else { throw UsageError("--max-connections must be 0-64") }
            o.maxConnections = n
        }
        if let s = try v.number("--seconds") {
            guard s <= 60 else { throw UsageError("--seconds must be 0-60") }
            o.speedSeconds = s
        }
        for header in v["--header"] ?? [] {
            let (name, value) = try parseHeader(header)
            o.headers[name] = value
        }
        options = o
        var c = HaulConfiguration.ephemeral
        if let t = try v.number("--timeout", min: 1) { c.timeout.idle = t }
        if let t = try v.number("--connect-timeout", min: 1) { c.timeout.connect = t }
        try ConnectionFlags.apply(v, to: &c)
        try AuthFlags.apply(v, to: &c)
        configuration = c
    }

    func run() async -> ExitCode {
        if !configuration.tls.verifiesCertificate {
            Output.emit("haul: warning: \(ConnectionFlags.insecureWarning)\n", to: 2)
        }
        let session = HaulSession(configuration: configuration)
        let diagnosis: Diagnosis
        do throws(HaulError) {
            diagnosis = try await session.diagnose(url, options: options)
        } catch {
            Output.emit("haul: error: \(Output.printable(error.message))\n", to: 2)
            return ExitCode(error)
        }
        Output.emit((json ? Self.json(diagnosis) : Self.screen(diagnosis)) + "\n", to: 1)
        return (200..<300).contains(diagnosis.answer.status) ? .success : .http
    }

    /// The diagnosis as one JSON object (keys sorted, so the output is stable).
    static func json(_ d: Diagnosis) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(d) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
