import Haul
import HaulCore
import HaulServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// `haul serve`: the download daemon, in the foreground.
struct ServeCommand {
    static let help = """
        usage: haul serve [--port N] [-d DIR] [-j N] [--max-overall-rate RATE] [--listen ADDRESS]
                          [--host NAME]...

        Runs the download daemon in the foreground, as a systemd user service runs it. Its queue,
        history and settings are kept in SQLite under $XDG_STATE_HOME/haul/serve (default
        ~/.local/state/haul/serve) and survive kill -9 and a reboot: a restarted daemon continues
        what was running from its partial files. It answers a JSON API (docs/api.md) on
        http://127.0.0.1:PORT and http://[::1]:PORT; every call needs the token in the 0600 file
        serve/token there. haul ls, pause, resume, cancel, rm and get --background talk to it.
        Ctrl-C or SIGTERM stops the transfers, keeping their bytes. One daemon per state
        directory.

          --port N          the HTTP port (default $HAUL_SERVE_PORT, else 6800; not 80; 0: a
                            free one, written with the token for the other commands)
          -d, --dir DIR     the download root, the only directory it writes in (default
                            $XDG_DOWNLOAD_DIR, else ~/Downloads); not / nor the home directory
          -j, --max-concurrent N  downloads at once, 1-64 (default 3, or what the page set last;
                                  -j is kept as that setting)
              --max-overall-rate RATE  the speed all downloads share, like 500K or 2M; 0: no
                                  limit (default none, or what the page set last; kept as that)
              --listen ADDRESS  also listen on this numeric address (the token is still needed)
              --host NAME   also answer to this Host name (repeatable; letters, digits, - and .)
        """

    static let options: [Arguments.Option] = [
        .init("--port", value: true), .init("-d", "--dir", value: true), .init("-j", "--max-concurrent", value: true),
        .init("--max-overall-rate", value: true), .init("--listen", value: true), .init("--host", value: true),
    ]

    var configuration: ServeDaemon.Configuration

    init(_ args: [String]) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: Self.options)
        guard positionals.isEmpty else { throw UsageError("serve takes no arguments (see haul help serve)") }
        guard let state = DaemonDoor.stateDirectory() else {
            throw UsageError("no home directory for haul's state: set HOME or XDG_STATE_HOME")
        }
        let root: String
        if let dir = v.last("--dir") {
            guard let absolute = Sys.absolutePath(dir) else {
                throw UsageError("cannot tell the working directory (was it removed?) for --dir \(dir)")
            }
            root = absolute
        } else {
            root = try Self.defaultRoot()
        }
        configuration = ServeDaemon.Configuration(state: state, root: root)
        if let port = try v.integer("--port", min: 0) {
            guard port <= 65535 else { throw UsageError("--port expects 0-65535, got \(port)") }
            configuration.port = port
        } else if let raw = ProcessInfo.processInfo.environment["HAUL_SERVE_PORT"] {
            guard let port = Int(raw), (0...65535).contains(port) else {
                throw UsageError("HAUL_SERVE_PORT expects 0-65535, got '\(Output.printable(raw))'")
            }
            configuration.port = port
        }
        if let n = try v.integer("--max-concurrent", min: 1) {
            guard n <= 64 else { throw UsageError("--max-concurrent expects 1-64, got \(n)") }
            configuration.maxConcurrentDownloads = n
        }
        if let raw = v.last("--max-overall-rate") {
            guard let rate = GetCommand.byteCount(raw), rate == 0 || rate >= 1024 else {
                throw UsageError("--max-overall-rate expects 0 or a rate of at least 1K, like 500K or 2M, got '\(raw)'")
            }
            configuration.maxOverallBytesPerSecond = rate
        }
        if let address = v.last("--listen") { configuration.addresses.append(address) }
        configuration.names = v["--host"] ?? []
        // The page's concurrency is the cap, for one host too (a mirror list is often one host);
        // connections to one host, for all its downloads and ranges together, are capped here.
        configuration.manager.maxDownloadsPerHost = 64
        configuration.manager.session.maxConnectionsPerHost = 16
        // Downloads wait (bytes kept) while there is no network, and the page shows it.
        configuration.manager.network = NetworkMonitor()
    }

    /// `$XDG_DOWNLOAD_DIR` when absolute, else `~/Downloads`.
    static func defaultRoot() throws(UsageError) -> String {
        if let dir = ProcessInfo.processInfo.environment["XDG_DOWNLOAD_DIR"], dir.hasPrefix("/") { return dir }
        guard let home = XDGDirectory.home() else { throw UsageError("no home directory: give --dir DIR") }
        return home + "/Downloads"
    }

    func run(interrupts: Interrupts) async -> ExitCode {
        let daemon: ServeDaemon
        do throws(ServeError) { daemon = try ServeDaemon(configuration) } catch {
            Output.emit("haul: error: \(Output.printable(error.message))\n", to: 2)
            return .internalError
        }
        let (stopped, stop) = AsyncStream<Void>.makeStream()
        let token = interrupts.onInterrupt { stop.finish() }
        defer { interrupts.remove(token) }
        // The page's address carries the token: printed to a terminal, not to a log.
        let page =
            isatty(1) == 1
            ? daemon.pageURL
            : "http://127.0.0.1:\(daemon.port)/ (token in \(DaemonDoor.tokenFile(configuration.state)))"
        Output.emit(
            "haul serve: downloading into \(configuration.root), listening on port \(daemon.port)\n  \(page)\n", to: 1)
        for await _ in stopped {}
        Output.emit("haul serve: stopping (transfers keep their bytes)\n", to: 2)
        await daemon.stop()
        return .success
    }
}
