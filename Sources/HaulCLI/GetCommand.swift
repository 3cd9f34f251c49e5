import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul get URL... [-o FILE | -d DIR] [options]`
struct GetCommand {
    static let options: [Arguments.Option] =
        [
            .init("-o", "--output", value: true),
            .init("-d", "--dir", value: true),
            .init("-c", "--continue"),
            .init("--no-continue"),
            .init("--overwrite"),
            .init("-N", "--timestamping"),
            .init("--retries", value: true),
            .init("--retry-delay", value: true),
            .init("--timeout", value: true),
            .init("--connect-timeout", value: true),
            .init("-m", "--max-time", value: true),
            .init("--max-redirects", value: true),
            .init("-H", "--header", value: true),
            .init("--checksum", value: true),
            .init("--no-server-digest"),
            .init("--transport", value: true),
            .init("-x", "--connections", value: true),
            .init("-k", "--min-split-size", value: true),
            .init("--limit-rate", value: true),
            .init("--lowest-speed-limit", value: true),
            .init("--max-overall-rate", value: true),
            .init("-j", "--max-concurrent", value: true),
            .init("--max-connections-per-host", value: true),
            .init("-i", "--input-file", value: true),
            .init("--no-wait"),
            .init("--no-cellular"),
            .init("--check-host"),
            .init("-q", "--quiet"),
            .init("--json"),
            .init("--background"),
        ] + ConnectionFlags.options + AuthFlags.options + CookieFlags.options

    static let help = """
        usage: haul get URL... [-o FILE | -d DIR] [options]
               haul get -i LIST [-j N] [options]

        Downloads each URL, resuming a partial download of the same URL (a rerun continues).
        Without -o the file is named by the server (Content-Disposition) or the URL, in DIR
        (default: the current directory).

          -o, --output FILE       save to FILE (one URL only); '-o -' writes to standard output
                                  (one connection, no partial file; a dropped connection is
                                  continued with Range + If-Range, a changed file exits 6;
                                  --limit-rate paces the reading); a device or FIFO
                                  (-o /dev/null) is written the same way
          -d, --dir DIR           save into DIR (created if missing)
          -c, --continue          resume partial downloads (the default)
              --no-continue       discard a partial download and start over
              --overwrite         replace an existing file that is not a partial download,
                                  and FILE.part / FILE.haul that haul did not write for it
          -N, --timestamping      ask the server about a file already there (If-None-Match
                                  with its ETag, If-Modified-Since with its date): "up to
                                  date" keeps it (exit 0), a new version replaces it; the
                                  file's time is set to the server's Last-Modified
              --retries N         retries of transient failures (default 5)
              --retry-delay S     first backoff delay in seconds (default 1; doubles, with jitter)
              --timeout S         idle timeout: no byte for S seconds is a stall (default 30)
              --connect-timeout S connection timeout in seconds (default 30)
          -m, --max-time S        at most S seconds for each download, retries included (exit 3,
                                  partial kept but for a file that comes whole in the first
                                  answer); default: no limit
              --max-redirects N   redirects to follow (default 20)
          -H, --header 'N: v'     extra request header (repeatable; Authorization and Cookie
                                  are not sent to other hosts after a redirect, other
                                  headers are, as with curl)
              --checksum ALGO=HEX verify the finished file (a mismatch deletes it); ALGO is
                                  sha-256, sha-512, sha-1 or md5; repeatable, or comma-
                                  separated; a file already there counts as done only if it
                                  matches. Without it a server's Repr-Digest is checked
              --no-server-digest  do not check a server's Repr-Digest/Content-Digest
              --transport curl    the transport: curl, the only one in the command (the library
                                  also has URLSession's, in HaulFoundation)
        \(ConnectionFlags.help)
        \(AuthFlags.help)
        \(CookieFlags.help)
          -x, --connections N     connections per file, 1-16 (default 4): byte ranges in parallel
                                  when the server supports them and the file is over 2x -k;
                                  -x 1 for one plain request
          -k, --min-split-size SIZE  smallest range to split off (default 1M)
              --limit-rate RATE   at most RATE bytes/s per download (K, M, G; 0: no limit)
              --lowest-speed-limit RATE   with -x, replace a connection slower than RATE
                                  over 3 s (a much slower one is replaced anyway)
              --max-overall-rate RATE   at most RATE bytes/s for all downloads together
          -j, --max-concurrent N  run N downloads at once (default 1: one after another)
              --max-connections-per-host N   connections at once to one host, for all
                                  downloads and ranges together (default 16)
          -i, --input-file LIST   URLs from LIST ('-': standard input), one per line; lines
                                  starting with a space may set ' out=NAME', ' dir=DIR' or
                                  ' checksum=ALGO=HEX' for the URL above (like aria2)
              --no-wait           fail (exit 3, partial kept) instead of waiting when there is
                                  no network path (no default route); by default a download
                                  pauses with "waiting for network" and continues when it returns
              --no-cellular       treat a cellular path as no network
              --check-host        resolve the host and check for a route before connecting:
                                  an unreachable host fails at once (exit 3)
          -q, --quiet             print nothing but errors
              --json              print one JSON event per line on stdout
              --background        hand the URLs to haul serve and print their ids at once
                                  (haul ls shows them), starting haul serve in the
                                  background if it is not running; -o and -d name a file and a
                                  folder under its download root; only -x, --limit-rate and
                                  --checksum go with it

        Short options take their value attached or apart (-x16, -x 16) and run together
        (-qx16); long ones take it after a space or '=' (--connections=16).

        Exit codes: 0 ok, 2 usage, 3 network, 4 HTTP status, 5 file system, 6 integrity,
        7 TLS, 130 interrupted (partial kept; rerun to resume).
        """

    let urls: [URL]
    /// `out=`/`dir=`/`checksum=` from an input file, one per URL in `urls` (the same URL may be
    /// listed twice with other options, as aria2 allows).
    let listOptions: [ListOptions]
    /// URLs listed more than once with the same options: each is downloaded once.
    let repeatedURLs: [URL]
    /// Each URL's place among all the URLs given (1-based; a repeat's place is skipped): its
    /// `--json` id.
    let places: [Int]
    /// Downloads at once (`-j`).
    let jobs: Int
    /// `-o -`, or `-o` naming a device or FIFO: the body is written there as it arrives.
    let stream: StreamTarget?
    let destination: DownloadDestination
    let configuration: HaulConfiguration
    /// `--cookie-jar`: where the run's cookies go at its end.
    let cookieFile: String?
    let options: DownloadOptions
    let output: Output
    /// `--no-wait`, `--no-cellular`, and the source of network paths (nil: never wait).
    let waitsForNetwork: Bool
    let allowsCellular: Bool
    var network: (any NetworkPathSource)? = NetworkMonitor()

    /// `list`: the list `-i` names, already read.
    init(_ args: [String], list read: (path: String, bytes: [UInt8])? = nil) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: GetCommand.options)
        var entries = positionals.map { ListEntry(raw: $0) }
        if let list = v.last("--input-file") {
            entries += try Self.readList(list, read: read?.path == list ? read?.bytes : nil)
        }
        guard !entries.isEmpty else { throw UsageError("get needs a URL (see haul help get)") }
        (urls, listOptions, repeatedURLs, places) = try Self.distinct(entries)
        jobs = try v.integer("--max-concurrent", min: 1) ?? 1
        try Self.checkOutputArguments(v)
        (stream, destination) = try Self.destination(v, urls: urls)
        var configuration = try Self.configuration(v)
        cookieFile = try CookieFlags.apply(v, to: &configuration)
        self.configuration = configuration
        options = try Self.downloadOptions(v, urls: urls)
        for own in listOptions where !own.checksums.isEmpty {
            do throws(UsageError) { _ = try Self.merged(options.checksums + own.checksums) } catch {
                throw UsageError("--checksum and a list's checksum=: \(error.message)")
            }
        }
        waitsForNetwork = !v.flag("--no-wait")
        allowsCellular = !v.flag("--no-cellular")
        output = Output(mode: v.flag("--json") ? .json : v.flag("--quiet") ? .quiet : .human)
    }

    /// The URLs of `entries` once each (with their list options, the URLs given more than once,
    /// and each one's place among all given).
    private static func distinct(
        _ entries: [ListEntry]
    ) throws(UsageError) -> (urls: [URL], options: [ListOptions], repeated: [URL], places: [Int]) {
        var urls: [URL] = []
        var perURL: [ListOptions] = []
        var seen: Set<ListKey> = []
        var repeated: [URL] = []
        var kept: [Int] = []
        for (place, entry) in zip(1..., entries) {
            let url = try parseURL(entry.raw)
            // The same URL for the same place again (a list merged with the command line, a glob
            // that matched twice) is one download; with other options it is another (aria2's rule).
            guard seen.insert(ListKey(url: url.absoluteString, options: entry.options)).inserted else {
                if !repeated.contains(url) { repeated.append(url) }
                continue
            }
            urls.append(url)
            perURL.append(entry.options)
            kept.append(place)
        }
        return (urls, perURL, repeated, kept)
    }

    /// `-o`, `-d`, `-c` and `-q` given together as they cannot be, or with an empty or
    /// directory-like value.
    private static func checkOutputArguments(_ v: [String: [String]]) throws(UsageError) {
        if v.flag("--output") && v.flag("--dir") { throw UsageError("use either -o or -d, not both") }
        if v.flag("--continue") && v.flag("--no-continue") { throw UsageError("use either -c or --no-continue") }
        if v.flag("--json") && v.flag("--quiet") { throw UsageError("use either -q or --json") }
        if let file = v.last("--output") {
            guard !file.isEmpty else { throw UsageError("-o needs a file name ('-' for standard output)") }
            if file.hasSuffix("/") {
                // A directory's name: saving a file under it (a file "new" for "out/new/") is
                // not what was asked.
                var dir = file
                while dir.count > 1 && dir.hasSuffix("/") { dir.removeLast() }
                throw UsageError("-o \(file) ends with '/': -o names a file (-d \(dir) for a directory)")
            }
        }
        if v.last("--dir")?.isEmpty == true { throw UsageError("-d needs a directory") }
    }

    /// Where the URLs go: a stream (`-o -`, a device or FIFO) written in order, a file, or a
    /// directory.
    private static func destination(
        _ v: [String: [String]], urls: [URL]
    ) throws(UsageError) -> (StreamTarget?, DownloadDestination) {
        let stream = v.last("--output").flatMap(StreamTarget.init)
        if let stream {
            guard urls.count == 1 else { throw UsageError("-o \(stream.argument) writes one URL") }
            for name in Self.notForStandardOutput where v.flag(name) {
                throw UsageError("\(name) does not apply to -o \(stream.argument) (\(stream.kind))")
            }
            if let n = try v.integer("--connections", min: 1), n > 1 {
                throw UsageError(
                    "-x does not apply to -o \(stream.argument) (\(stream.kind) is written in order, over one connection)"
                )
            }
            return (stream, .directory(URL(fileURLWithPath: FileManager.default.currentDirectoryPath)))
        } else if let file = v.last("--output") {
            guard urls.count == 1 else { throw UsageError("-o names one file; use -d DIR for several URLs") }
            return (nil, .file(URL(fileURLWithPath: file)))
        } else {
            // Absolute and normalised once: every download reads the directory's path, and a URL
            // relative to the working directory resolves it again each time (about 3 µs a read).
            let asked = v.last("--dir") ?? "."
            guard let dir = Sys.absolutePath(asked) else {
                throw UsageError("cannot tell the working directory (was it removed?) to save \(asked) there")
            }
            return (nil, .directory(URL(filePath: dir, directoryHint: .isDirectory)))
        }
    }

    /// The session's settings: retries, timeouts, redirects, TLS, transport and the overall rate.
    private static func configuration(_ v: [String: [String]]) throws(UsageError) -> HaulConfiguration {
        var c = HaulConfiguration()
        if let n = try v.integer("--retries") { c.retry.maxRetries = n }
        if let d = try v.number("--retry-delay") { c.retry.initialDelay = d }
        if let t = try v.number("--timeout", min: 1) { c.timeout.idle = t }
        if let t = try v.number("--connect-timeout", min: 1) { c.timeout.connect = t }
        if let t = try v.number("--max-time", min: 0.001) { c.timeout.resource = t }
        if let n = try v.integer("--max-redirects") { c.maxRedirects = n }
        try ConnectionFlags.apply(v, to: &c)
        try AuthFlags.apply(v, to: &c)
        // The command runs on libcurl alone: linking the URLSession transport would load
        // FoundationNetworking at every start (docs/transports.md). `--transport curl` is still
        // taken, for the scripts that say it.
        switch v.last("--transport") {
        case nil, "curl": break
        case "urlsession":
            throw UsageError(
                "--transport urlsession is not in the command: it runs on libcurl (URLSession is the library's HaulFoundation)"
            )
        case let other?: throw UsageError("unknown --transport \(other) (the command runs on curl)")
        }
        if let raw = v.last("--max-overall-rate") {
            // 0: no limit, as curl's --limit-rate 0 and aria2's --max-overall-download-limit=0.
            guard let rate = Self.byteCount(raw), rate >= 0 else {
                throw UsageError("--max-overall-rate expects a rate like 500K or 2M, got '\(raw)'")
            }
            c.maxOverallBytesPerSecond = rate > 0 ? rate : nil
        }
        c.maxConnectionsPerHost = try v.integer("--max-connections-per-host", min: 1) ?? 16
        return c
    }

    /// The downloads' options.
    private static func downloadOptions(_ v: [String: [String]], urls: [URL]) throws(UsageError) -> DownloadOptions {
        var o = DownloadOptions()
        o.connections = 4  // like aria2's split; small files still take one request (docs/segmented.md)
        o.resume = !v.flag("--no-continue")
        o.overwrite = v.flag("--overwrite")
        o.revalidatesExistingFile = v.flag("--timestamping")
        // A file saved by one URL of the run is not written again by another (nor the same URL
        // listed twice): its claim is kept until the run ends.
        o.keepsClaimWhenSaved = true
        for header in v["--header"] ?? [] {
            let (name, value) = try parseHeader(header)
            o.headers[name] = value
        }
        for sum in v["--checksum"] ?? [] {
            do throws(UsageError) { o.checksums = try Self.merged(o.checksums + Self.checksums(sum)) } catch {
                throw UsageError("--checksum: \(error.message)")
            }
            // One sum for several files would fail (and delete) all but one of them.
            guard urls.count == 1 else {
                throw UsageError(
                    "--checksum is the digest of one file: give one URL, or ' checksum=' lines in -i LIST")
            }
        }
        if let n = try v.integer("--connections", min: 1) {
            guard n <= 16 else { throw UsageError("--connections is at most 16, got \(n)") }
            o.connections = n
        }
        if let raw = v.last("--min-split-size") {
            guard let size = Self.byteCount(raw), size >= 1024 else {
                throw UsageError("--min-split-size expects a size like 1M (at least 1K), got '\(raw)'")
            }
            o.minSplitSize = size
        }
        if let raw = v.last("--lowest-speed-limit") {
            guard let rate = Self.byteCount(raw), rate > 0 else {
                throw UsageError("--lowest-speed-limit expects a rate like 10K, got '\(raw)'")
            }
            o.lowestSpeedLimit = rate
        }
        if let raw = v.last("--limit-rate") {
            // 0: no limit, as in curl and aria2.
            guard let rate = Self.byteCount(raw), rate >= 0 else {
                throw UsageError("--limit-rate expects a rate like 500K or 2M, got '\(raw)'")
            }
            o.maxBytesPerSecond = rate > 0 ? rate : nil
        }
        o.checksReachability = v.flag("--check-host")
        o.checksServerDigests = !v.flag("--no-server-digest")
        return o
    }

    /// The options of the URL at `index`: the command's, with its list's checksum.
    func options(for index: Int) -> DownloadOptions {
        var options = self.options
        // A list's checksums add to the command line's (one URL only; a conflict was refused).
        options.checksums = (try? Self.merged(options.checksums + listOptions[index].checksums)) ?? options.checksums
        // `out=` names a file in `dir=` or `-d`, which are created when missing as without it.
        if listOptions[index].out != nil { options.createIntermediateDirectories = true }
        return options
    }

    /// Where the URL at `index` goes: its list options, else `-o`/`-d`.
    func target(for index: Int) -> DownloadDestination {
        let own = listOptions[index]
        guard own != ListOptions() else { return destination }
        var dir = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        if case .directory(let d) = destination { dir = d }
        if let d = own.dir { dir = URL(fileURLWithPath: d) }
        if let out = own.out { return .file(dir.appendingPathComponent(out)) }
        return .directory(dir)
    }

    /// Runs every download in turn (or `-j` at once), then writes the cookies (`--cookie-jar`);
    /// returns the exit code of the first failure, else 0.
    func run(interrupts: Interrupts) async -> ExitCode {
        if !configuration.tls.verifiesCertificate { output.warning(ConnectionFlags.insecureWarning) }
        let code = await runDownloads(interrupts: interrupts)
        return CookieFlags.save(configuration, to: cookieFile, output: output, after: code)
    }

    private func runDownloads(interrupts: Interrupts) async -> ExitCode {
        for url in repeatedURLs {
            output.note("\(HaulRequest.redacted(url)) is listed more than once; downloading it once")
        }
        if let stream { return await runStreaming(to: stream, interrupts: interrupts) }
        if jobs > 1 { return await runQueue(interrupts: interrupts) }
        let session = HaulSession(configuration: configuration)
        var codes: [ExitCode] = []
        for index in urls.indices {
            let code = await download(index, session: session, interrupts: interrupts)
            if code == .interrupted { return code }
            codes.append(code)
        }
        return summarize(codes)
    }

    /// Ends a run of several URLs with a line that counts them; returns the first failure's exit
    /// code (0 when none failed).
    func summarize(_ codes: [ExitCode]) -> ExitCode {
        let failed = codes.filter { $0 != .success }.count
        if urls.count > 1 {
            let saved = codes.count - failed
            output.note(
                "\(saved) of \(urls.count) downloads saved" + (failed > 0 ? ", \(failed) failed" : ""))
        }
        return codes.first { $0 != .success } ?? .success
    }

    private func download(_ index: Int, session: HaulSession, interrupts: Interrupts) async -> ExitCode {
        let url = urls[index]
        let output = self.output
        let reporter = Reporter(output: output, url: url)
        let started = Date()
        let task = session.downloadTask(with: url, to: target(for: index), options: options(for: index))
        task.onEvent { reporter.report($0) }
        let gate = NetworkGate(source: network, waits: waitsForNetwork, allowsCellular: allowsCellular, output: output)
        let ticker = Task {
            guard output.mode == .human && output.isTerminal else { return }
            while !Task.isCancelled {
                output.tick(active: session.activity.isActive)
                try? await Task.sleep(nanoseconds: 125_000_000)
            }
        }
        let token = interrupts.onInterrupt { Task { _ = await task.cancelProducingResumeData() } }
        defer { interrupts.remove(token) }
        let outcome: Result<DownloadResult, HaulError>
        do { outcome = .success(try await gate.run(task, url: url)) } catch { outcome = .failure(error) }
        ticker.cancel()
        await ticker.value  // no redraw after the outcome's line
        return reporter.finished(outcome, seconds: Date().timeIntervalSince(started))
    }
}
