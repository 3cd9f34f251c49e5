import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul net [--watch] [--json]`
struct NetCommand {
    static let help = """
        usage: haul net [--watch] [--json]

        Prints the network state: satisfied or not (an interface that is up carries a default
        route), the primary interface and its kind (wifi, wired, cellular, other), every interface
        with its kind, state and addresses, and whether the path is expensive (cellular).

          --watch   print each change as it happens (Ctrl-C to stop)
          --json    one JSON object per line
        """

    static let options: [Arguments.Option] = [.init("--watch"), .init("--json")]

    let watch: Bool
    let json: Bool

    init(_ args: [String]) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: Self.options)
        guard positionals.isEmpty else { throw UsageError("net takes no arguments (see haul help net)") }
        watch = v.flag("--watch")
        json = v.flag("--json")
    }

    func run() async -> ExitCode {
        let monitor = NetworkMonitor()
        if !watch {
            print(render(monitor.currentPath))
            return .success
        }
        for await path in monitor.paths {
            // Unbuffered: a pipe must see each change when it happens.
            Output.emit(render(path) + "\n", to: 1)
        }
        return .success
    }

    func render(_ path: NetworkPath) -> String {
        if json {
            let interfaces = path.interfaces.map { i in
                "{\"name\":\(Output.quote(i.name)),\"kind\":\"\(i.kind.rawValue)\",\"up\":\(i.isUp),"
                    + "\"addresses\":[\(i.addresses.map(Output.quote).joined(separator: ","))]}"
            }
            return "{\"status\":\"\(path.status.rawValue)\",\"primary\":"
                + (path.primary.map { Output.quote($0.name) } ?? "null") + ",\"kind\":"
                + (path.primary.map { "\"\($0.kind.rawValue)\"" } ?? "null")
                + ",\"expensive\":\(path.isExpensive),\"interfaces\":[\(interfaces.joined(separator: ","))]}"
        }
        var lines: [String] = []
        if let primary = path.primary {
            lines.append(
                "satisfied: default route via \(primary.name) (\(primary.kind.rawValue))"
                    + (path.isExpensive ? ", expensive" : ""))
        } else {
            lines.append("unsatisfied: \(path.reason ?? "no usable interface")")
        }
        for i in path.interfaces {
            let addresses = i.addresses.isEmpty ? "" : "  " + i.addresses.joined(separator: " ")
            lines.append(
                "  \(Format.leftAligned(i.name, 10)) \(Format.leftAligned(i.kind.rawValue, 9)) \(i.isUp ? "up  " : "down")\(addresses)"
            )
        }
        return lines.joined(separator: "\n")
    }
}
