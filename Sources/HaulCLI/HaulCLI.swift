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

/// `haul`: the command-line front end. Parsing and printing only; downloads run in `Haul`.
@main
struct HaulCLI {
    static let help = """
        haul — resumable downloads

        usage: haul <command> [options]

        commands:
          get URL... [-o FILE | -d DIR]   download (rerun the same command to resume)
          upload URL (-F FIELD... | -T FILE)  multipart form or raw file upload
          net [--watch] [--json]          network state: interfaces, kinds, default route
          doctor URL [--json]             why a download of URL is slow or does not resume:
                                          redirects, TLS, validators, ranges, connections, speed
          demo                            a 256 MiB download from a built-in local server, with
                                          injected connection drops, a pause and resume, and a
                                          SHA-256 check
          serve [--port N] [-d DIR]       the download daemon: a queue that outlives haul, a JSON API
          get --background URL...         hand downloads to haul serve; their ids are printed
          ls [--json]                     haul serve's downloads, with progress
          watch [--until-idle]            haul serve's downloads live: bars, speed, ETA, changes
          pause|resume|cancel ID...       control them; rm [--files] ID... removes them
          move top|up|down|bottom ID...   reorder haul serve's queue
          help [command | --man]          this text, a command's options, or the man page haul(1)
          completions bash|zsh|fish       a completion script for that shell
          version                         print haul's and libcurl's versions (--version or
                                          -V: haul's alone, without loading libcurl)

        Run 'haul help get' for download options.
        """

    static func main() {
        // Before this, CHaulStart's constructor set the allocator's thresholds and started
        // loading libcurl on a thread of its own (start.c).
        let args = Array(CommandLine.arguments.dropFirst())
        // `haul get -i LIST`: the list is read and parsed here, while libcurl loads on the
        // constructor's thread, before any other thread is made: glibc makes a new thread wait
        // for a dlopen in progress (docs/startup.md). Meanwhile a signal has its default effect
        // (nothing is downloaded yet), which also ends a read stuck on a hung mount.
        let early = GetCommand.parsedEarly(args)
        Interrupts.listen()  // from here on a Ctrl-C is never lost
        // The command runs as a task and ends the process itself; the main thread only waits.
        // An async main would park it with dispatch_main(), whose pthread_exit unwinds the main
        // thread's stack: ten searches of the binary's unwind tables at every start, which map
        // about 0.7 MiB of them (docs/startup.md). It waits with the signals Interrupts catches
        // unblocked, whatever mask haul was started with, so they reach its handler here
        // (Dispatch's threads block every signal); others the parent blocked stay blocked.
        Task.detached { leave(await run(args, early: early).rawValue) }
        var waiting = sigset_t()
        pthread_sigmask(SIG_BLOCK, nil, &waiting)
        for sig in Interrupts.caught { sigdelset(&waiting, sig) }
        while true { sigsuspend(&waiting) }
    }

    /// Ends the process, straight out: exit(3) would run the atexit handlers and destructors of
    /// OpenSSL and the other libraries libcurl loaded, a millisecond of freeing what the process
    /// is about to drop, and while another thread may still be using them: a transfer at a
    /// second Ctrl-C, or libcurl still loading (CHaulStart) when a usage error ends the run at
    /// once, which crashed one run in a few dozen. Output goes out with write(2), and `print`'s
    /// buffer is flushed here. (Code coverage of the command's processes, which would be written
    /// from atexit, is not collected.)
    static func leave(_ code: Int32) -> Never {
        fflush(nil)
        _exit(code)
    }

    /// The commands whose `--help` (or `-h`) anywhere among their arguments prints their help.
    static let answerHelpFlag: Set = [
        "get", "upload", "doctor", "serve", "ls", "watch", "pause", "resume", "cancel", "move", "rm",
    ]

    static func run(_ args: [String], early: Result<GetCommand, UsageError>? = nil) async -> ExitCode {
        guard let command = args.first else {
            Output.emit(help + "\n", to: 2)
            return .usage
        }
        let rest = Array(args.dropFirst())
        if answerHelpFlag.contains(command), rest.contains("--help") || rest.contains("-h"),
            let text = Commands.named(command)?.help
        {
            Output.emit(text + "\n", to: 1)
            return .success
        }
        do throws(UsageError) {
            switch command {
            case "get":
                if rest.contains("--background") {
                    let (values, urls) = try Arguments.parse(rest, options: GetCommand.options)
                    return try await DaemonCommands.background(values, urls: urls)
                }
                let get: GetCommand
                if let early { get = try early.get() } else { get = try GetCommand(rest) }
                return await get.run(interrupts: Interrupts())
            case "upload":
                let upload = try UploadCommand(rest)
                return await upload.run(interrupts: Interrupts())
            case "net":
                return try await NetCommand(rest).run()
            case "doctor":
                return try await DoctorCommand(rest).run()
            case "serve":
                let serve = try ServeCommand(rest)
                return await serve.run(interrupts: Interrupts())
            case "ls":
                return try await DaemonCommands.ls(rest)
            case "pause", "resume", "cancel", "rm":
                return try await DaemonCommands.control(command, rest)
            case "move":
                return try await DaemonCommands.move(rest)
            case "watch":
                let watch = try WatchCommand(rest)
                return await watch.run(interrupts: Interrupts())
            case "demo":
                let demo = try DemoCommand(rest)
                return await demo.run(interrupts: Interrupts())
            default:
                return try informational(command, rest)
            }
        } catch {
            Output.emit("haul: error: \(Output.printable(error.message))\n", to: 2)
            return .usage
        }
    }

    /// The commands that only print: help, completions, the version.
    private static func informational(_ command: String, _ rest: [String]) throws(UsageError) -> ExitCode {
        switch command {
        case "help", "--help", "-h":
            if rest.first == "--man" {
                Output.emit(ManPage.render(version: HaulInfo.version), to: 1)
            } else {
                Output.emit((Commands.named(rest.first)?.help ?? help) + "\n", to: 1)
            }
            return .success
        case "completions":
            guard rest.count == 1, let script = Completions.script(for: rest[0]) else {
                throw UsageError("completions takes one of \(Completions.shells.joined(separator: ", "))")
            }
            Output.emit(script, to: 1)
            return .success
        case "version":
            Output.emit("haul \(HaulInfo.version) (\(HaulInfo.transportDescription))\n", to: 1)
            return .success
        case "--version", "-V":
            // What scripts ask to check what they run: no libcurl loaded for it.
            Output.emit("haul \(HaulInfo.version)\n", to: 1)
            return .success
        default:
            throw UsageError("unknown command '\(command)' (see haul help)")
        }
    }
}
