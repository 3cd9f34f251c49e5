import Haul

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

/// `haul upload URL (-F FIELD... | -T FILE) [options]`
struct UploadCommand {
    static let options: [Arguments.Option] =
        [
            .init("-F", "--form", value: true),
            .init("-T", "--upload-file", value: true),
            .init("-X", "--request", value: true),
            .init("-o", "--output", value: true),
            .init("-H", "--header", value: true),
            .init("--retries", value: true),
            .init("--retry-delay", value: true),
            .init("--timeout", value: true),
            .init("--connect-timeout", value: true),
            .init("-m", "--max-time", value: true),
            .init("-q", "--quiet"),
            .init("--json"),
        ] + ConnectionFlags.options + AuthFlags.options + CookieFlags.options

    static let help = """
        usage: haul upload URL -F 'name=value' -F 'file=@path[;type=mime][;filename=name]'...
               haul upload URL -T path [-X POST]

        Sends a multipart/form-data POST (-F, curl's syntax; 'name=<path' sends a file's text as
        a field) or a file as the raw body (-T: PUT, or POST with -X POST). Files stream from
        disk. Prints the response body (or saves it with -o); exits 4 on an HTTP error status.
        PUT is retried after a transient failure; a POST only if the connection was refused.
        Standard input (-T -), a FIFO or a device is read to its end once and sent chunked
        (not retried).

          -F, --form SPEC         a form field or file (repeatable)
          -T, --upload-file FILE  send FILE as the body ('-': standard input)
          -X, --request METHOD    PUT (default for -T) or POST
          -o, --output FILE       save the response body to FILE
          -H, --header 'N: v'     extra request header (repeatable)
              --retries N, --retry-delay S, --timeout S, --connect-timeout S
          -m, --max-time S        at most S seconds for the upload, retries included
        \(ConnectionFlags.help)
        \(AuthFlags.help)
        \(CookieFlags.help)
          -q, --quiet             no progress
              --json              JSON event lines on stdout (the body then needs -o)
        """

    let url: URL
    let form: MultipartForm?
    let file: URL?
    let method: UploadMethod
    let outputFile: String?
    let headers: [String: String]
    let configuration: HaulConfiguration
    /// `--cookie-jar`: where the cookies go at the end.
    let cookieFile: String?
    let output: Output

    init(_ args: [String]) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: UploadCommand.options)
        guard positionals.count == 1 else {
            throw UsageError("upload needs one http:// or https:// URL (see haul help upload)")
        }
        url = try parseURL(positionals[0])
        let fields = v["--form"] ?? []
        let raw = v.last("--upload-file")
        guard fields.isEmpty != (raw == nil) else { throw UsageError("use either -F fields or -T FILE") }
        if let raw {
            // `-T -`: standard input, read to its end and sent chunked (as curl does).
            let path = raw == "-" ? "/dev/stdin" : raw
            guard FileManager.default.isReadableFile(atPath: path) else {
                let why = FileManager.default.fileExists(atPath: path) ? "permission denied" : "no such file"
                throw UsageError("cannot read -T \(raw): \(why)")
            }
            file = URL(fileURLWithPath: path)
            form = nil
        } else {
            var form = MultipartForm()
            for spec in fields { try Self.add(spec, to: &form) }
            self.form = form
            file = nil
        }
        switch v.last("--request")?.uppercased() {
        case nil, "PUT": method = raw == nil ? .post : .put
        case "POST": method = .post
        case let other?: throw UsageError("-X \(other) is not supported for uploads (PUT or POST)")
        }
        outputFile = v.last("--output")
        var headers: [String: String] = [:]
        for header in v["--header"] ?? [] {
            let (name, value) = try parseHeader(header)
            headers[name] = value
        }
        self.headers = headers
        var c = HaulConfiguration()
        if let n = try v.integer("--retries") { c.retry.maxRetries = n }
        if let d = try v.number("--retry-delay") { c.retry.initialDelay = d }
        if let t = try v.number("--timeout", min: 1) { c.timeout.idle = t }
        if let t = try v.number("--connect-timeout", min: 1) { c.timeout.connect = t }
        if let t = try v.number("--max-time", min: 0.001) { c.timeout.resource = t }
        try ConnectionFlags.apply(v, to: &c)
        try AuthFlags.apply(v, to: &c)
        cookieFile = try CookieFlags.apply(v, to: &c)
        configuration = c
        if v.flag("--json") && outputFile == nil {
            throw UsageError("--json prints events; save the body with -o FILE")
        }
        output = Output(mode: v.flag("--json") ? .json : v.flag("--quiet") ? .quiet : .human)
    }

    /// curl's -F syntax: `name=value`, `name=@path[;type=…][;filename=…]`, `name=<path`.
    static func add(_ spec: String, to form: inout MultipartForm) throws(UsageError) {
        guard let eq = spec.firstIndex(of: "="), eq != spec.startIndex else {
            throw UsageError("-F '\(spec)' is not 'name=value' or 'name=@file'")
        }
        let name = String(spec[..<eq])
        let value = String(spec[spec.index(after: eq)...])
        if (value.hasPrefix("@") || value.hasPrefix("<")) && value.dropFirst().prefix(while: { $0 != ";" }).isEmpty {
            // Else `a=@` would name the current directory ("… is a directory") and `a=<` read "".
            throw UsageError("-F '\(spec)' names no file")
        }
        if value.hasPrefix("@") {
            let pieces = value.dropFirst().split(separator: ";", omittingEmptySubsequences: false).map(String.init)
            var type: String?
            var filename: String?
            for attribute in pieces.dropFirst() {
                if attribute.hasPrefix("type=") {
                    type = String(attribute.dropFirst(5))
                } else if attribute.hasPrefix("filename=") {
                    filename = String(attribute.dropFirst(9))
                } else {
                    throw UsageError("-F '\(spec)': unknown attribute '\(attribute)' (type= or filename=)")
                }
            }
            do {
                try form.addFile(
                    name: name, fileURL: URL(fileURLWithPath: pieces[0]), filename: filename, contentType: type)
            } catch { throw UsageError(error.message) }
        } else if value.hasPrefix("<") {
            guard let text = FileManager.default.contents(atPath: String(value.dropFirst())) else {
                throw UsageError("-F '\(spec)': cannot read \(value.dropFirst())")
            }
            form.addField(name: name, value: String(decoding: text, as: UTF8.self))
        } else {
            form.addField(name: name, value: value)
        }
    }

    /// Sends the upload, then writes the cookies (`--cookie-jar`).
    func run(interrupts: Interrupts) async -> ExitCode {
        if !configuration.tls.verifiesCertificate { output.warning(ConnectionFlags.insecureWarning) }
        let code = await send(interrupts: interrupts)
        return CookieFlags.save(configuration, to: cookieFile, output: output, after: code)
    }

    private func send(interrupts: Interrupts) async -> ExitCode {
        let session = HaulSession(configuration: configuration)
        let output = self.output
        let (form, file, url, method, headers) = (self.form, self.file, self.url, self.method, self.headers)
        let name = file?.lastPathComponent ?? "form"
        let task = Task { () async throws(HaulError) -> UploadResponse in
            let events: @Sendable (UploadEvent) -> Void = { event in
                switch event {
                case .progress(let p): output.progress(p, name: name)
                case .retrying(let attempt, let error, let delay):
                    output.json("retry", [("attempt", attempt), ("delay", delay), ("message", error.message)])
                    output.note("\(error.message); retry \(attempt) in \(Format.fixed(delay, 1)) s")
                }
            }
            if let form { return try await session.upload(form, to: url, headers: headers, events: events) }
            return try await session.upload(fileAt: file!, to: url, method: method, headers: headers, events: events)
        }
        let token = interrupts.onInterrupt { task.cancel() }
        defer { interrupts.remove(token) }
        do {
            let reply = try await task.value
            output.clearLine()
            if let outputFile {
                guard FileManager.default.createFile(atPath: outputFile, contents: reply.body) else {
                    output.error("cannot write \(outputFile)")
                    return .fileSystem
                }
            } else if let failure = Output.emit(bytes: reply.body, to: 1) {
                output.error("cannot write the reply to standard output: \(String(cString: strerror(failure)))")
                return .fileSystem
            }
            let status = reply.response.statusCode
            output.json("done", [("status", status), ("bytes", reply.body.count)])
            if status >= 400 {
                output.error(HaulError.httpStatus(status, from: HaulRequest.redacted(url)).message)
                return .http
            }
            return .success
        } catch {
            let error = HaulError.from(error)
            output.json("error", [("code", error.code.description), ("message", error.message)])
            output.error(error.message)
            return ExitCode(error)
        }
    }
}
