/// The commands and their options: the one table that `haul help`, the man page
/// (`haul help --man`) and the completions (`haul completions SHELL`) read.
enum Commands {
    struct Command {
        let name: String
        let help: String
        let options: [Arguments.Option]
    }

    static let all: [Command] = [
        Command(name: "get", help: GetCommand.help, options: GetCommand.options),
        Command(name: "upload", help: UploadCommand.help, options: UploadCommand.options),
        Command(name: "net", help: NetCommand.help, options: NetCommand.options),
        Command(name: "doctor", help: DoctorCommand.help, options: DoctorCommand.options),
        Command(name: "demo", help: DemoCommand.help, options: DemoCommand.options),
        Command(name: "serve", help: ServeCommand.help, options: ServeCommand.options),
        Command(name: "ls", help: DaemonCommands.lsHelp, options: DaemonCommands.lsOptions),
        Command(name: "watch", help: WatchCommand.help, options: WatchCommand.options),
        Command(name: "pause", help: DaemonCommands.controlHelp, options: []),
        Command(name: "resume", help: DaemonCommands.controlHelp, options: []),
        Command(name: "cancel", help: DaemonCommands.controlHelp, options: []),
        Command(name: "move", help: DaemonCommands.moveHelp, options: []),
        Command(name: "rm", help: DaemonCommands.rmHelp, options: DaemonCommands.rmOptions),
    ]

    /// The commands without options of their own.
    static let others = ["help", "version", "completions"]

    static func named(_ name: String?) -> Command? { all.first { $0.name == name } }

    /// What an option's value is, for completion.
    enum Value: Equatable {
        case file, directory
        case oneOf([String])
        /// Anything (a number, a URL, a header): nothing to offer.
        case free
    }

    /// The value an option takes: a fixed set where the option has one, else from
    /// its help's placeholder (FILE, LIST: a file; DIR: a directory).
    static func value(of entry: HelpText.Entry) -> Value? {
        guard let placeholder = entry.value else { return nil }
        let fixed: [String: [String]] = [
            "--transport": ["curl"],
            "--checksum": ["sha-256=", "sha-512=", "sha-1=", "md5="],
            "--request": ["PUT", "POST"],
        ]
        if let set = entry.names.lazy.compactMap({ fixed[$0] }).first { return .oneOf(set) }
        let word = placeholder.prefix { $0.isLetter }
        switch word {
        case "FILE", "LIST": return .file
        case "DIR": return .directory
        default: return .free
        }
    }
}
