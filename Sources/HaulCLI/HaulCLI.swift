#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
import Haul

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
          demo                            a 256 MiB download from a built-in local server, with
                                          injected connection drops, a pause and resume, and a
                                          SHA-256 check
          help [command]                  this text, or a command's options
          version                         print versions

        Run 'haul help get' for download options.
        """

    static func main() async {
        Interrupts.listen()  // first: a Ctrl-C from here on is never lost
        keepFreedMemoryForReuse()
        let args = Array(CommandLine.arguments.dropFirst())
        let code = await run(args)
        exit(code.rawValue)
    }

    /// glibc's defaults hand freed heap memory back to the system once 1 MiB is free at the top
    /// of an arena, and a thousand small downloads free and take again a 512 KiB receive buffer
    /// each (libcurl's, per transfer): the pages would be returned and faulted in again every
    /// time. Buffers under 1 MiB come from the heap instead, and up to 8 MiB stays for reuse. Set
    /// by the command, not the library: an application's allocator is its own business.
    static func keepFreedMemoryForReuse() {
        #if canImport(Glibc)
            // mallopt(3), which Swift's Glibc module does not import; M_TRIM_THRESHOLD is -1,
            // M_MMAP_THRESHOLD -3.
            typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
            guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "mallopt") else { return }
            let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
            _ = mallopt(-3, 1 << 20)
            _ = mallopt(-1, 8 << 20)
        #endif
    }

    static func run(_ args: [String]) async -> ExitCode {
        guard let command = args.first else {
            Output.emit(help + "\n", to: 2)
            return .usage
        }
        let rest = Array(args.dropFirst())
        do throws(UsageError) {
            switch command {
            case "get":
                if rest.contains("--help") || rest.contains("-h") {
                    Output.emit(GetCommand.help + "\n", to: 1)
                    return .success
                }
                let get = try GetCommand(rest)
                return await get.run(interrupts: Interrupts())
            case "upload":
                if rest.contains("--help") || rest.contains("-h") {
                    Output.emit(UploadCommand.help + "\n", to: 1)
                    return .success
                }
                let upload = try UploadCommand(rest)
                return await upload.run(interrupts: Interrupts())
            case "net":
                return try await NetCommand(rest).run()
            case "demo":
                let demo = try DemoCommand(rest)
                return await demo.run(interrupts: Interrupts())
            case "help", "--help", "-h":
                switch rest.first {
                case "get": Output.emit(GetCommand.help + "\n", to: 1)
                case "demo": Output.emit(DemoCommand.help + "\n", to: 1)
                case "upload": Output.emit(UploadCommand.help + "\n", to: 1)
                case "net": Output.emit(NetCommand.help + "\n", to: 1)
                default: Output.emit(help + "\n", to: 1)
                }
                return .success
            case "version", "--version":
                Output.emit("haul \(HaulInfo.version) (\(HaulInfo.transportDescription))\n", to: 1)
                return .success
            default:
                throw UsageError("unknown command '\(command)' (see haul help)")
            }
        } catch {
            Output.emit("haul: error: \(Output.printable(error.message))\n", to: 2)
            return .usage
        }
    }
}
