import Haul
import HaulCore
import HaulServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul ls`, `haul pause|resume|cancel|rm ID...` and `haul get --background`: calls to a
/// running `haul serve` (``DaemonDoor``). Each prints one line per download and exits non-zero
/// when any call failed.
enum DaemonCommands {
    static let lsHelp = """
        usage: haul ls [--json] [--state LIST]

        Lists haul serve's downloads in queue order: id, state, progress (done/total and
        percent), speed and ETA while running, and the file under the download root (the URL
        until the file is known).

              --json              one JSON object per download per line (docs/api.md)
              --state LIST        only these states, comma-separated: queued, running, paused,
                                  waiting, completed, failed, cancelled
        """

    static let lsOptions: [Arguments.Option] = [.init("--json"), .init("--state", value: true)]

    static let controlHelp = """
        usage: haul pause|resume|cancel ID...

        Pauses haul serve's downloads (keeping their bytes), resumes them (a failed one is
        tried again from its bytes), or cancels them (removing the partial file). IDs are the
        ones haul ls and haul get --background print.
        """

    static let moveHelp = """
        usage: haul move top|up|down|bottom ID...

        Moves queued downloads of haul serve in its queue, each in turn: to the top (it starts
        next), one up, one down, or to the bottom. Priority comes first in the queue: a download
        moved next to one of another priority takes that priority.
        """

    static let rmHelp = """
        usage: haul rm [--files] ID...

        Removes downloads from haul serve's list, cancelling the unfinished ones (their partial
        files go). The finished file stays unless --files is given.

              --files             delete the downloaded file too (only under the download root)
        """

    static let rmOptions: [Arguments.Option] = [.init("--files")]

    static func ls(_ args: [String]) async throws(UsageError) -> ExitCode {
        let (v, positionals) = try Arguments.parse(args, options: lsOptions)
        guard positionals.isEmpty else { throw UsageError("ls takes no arguments (see haul help ls)") }
        let wanted = v.last("--state").map { Set($0.split(separator: ",").map(String.init)) }
        for state in wanted ?? [] where StoredDownload.State(rawValue: state) == nil {
            throw UsageError("no state '\(state)' (queued, running, paused, waiting, completed, failed, cancelled)")
        }
        do throws(DaemonDoor.Failure) {
            let all = try await DaemonDoor.open().list().filter { wanted?.contains($0.state) ?? true }
            if v.flag("--json") {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                for item in all {
                    guard let data = try? encoder.encode(item) else { continue }
                    Output.emit(String(decoding: data, as: UTF8.self) + "\n", to: 1)
                }
            } else {
                Output.emit(all.isEmpty ? "no downloads\n" : all.map(line).joined(separator: "\n") + "\n", to: 1)
            }
            return .success
        } catch {
            return failed(error)
        }
    }

    /// One download as `haul ls` prints it.
    static func line(_ d: DownloadJSON) -> String {
        var progress = Output.bytes(d.done)
        if let total = d.total, total > 0 {
            progress = "\(Int(Double(d.done) / Double(total) * 100))% \(Output.bytes(d.done))/\(Output.bytes(total))"
        }
        var extra = ""
        if let speed = d.speed { extra += "  \(Output.bytes(Int64(speed)))/s" }
        if let eta = d.eta { extra += "  ETA \(Output.duration(eta))" }
        if let error = d.error, d.state == "failed" { extra += "  " + Output.printable(error) }
        let name = d.file ?? d.url
        return Format.leftAligned(String(d.id), 5) + " " + Format.leftAligned(d.state, 10) + " "
            + Format.leftAligned(progress, 24) + " " + Output.printable(name) + extra
    }

    /// `haul pause|resume|cancel|rm ID...`, and `move` with its `body`.
    static func control(_ action: String, _ args: [String], body: String? = nil) async throws(UsageError) -> ExitCode {
        let (v, ids) = try Arguments.parse(args, options: action == "rm" ? rmOptions : [])
        guard !ids.isEmpty else { throw UsageError("\(action) takes the ids of downloads (see haul ls)") }
        for id in ids where Int64(id).map({ $0 <= 0 }) ?? true {
            throw UsageError("'\(Output.printable(id))' is not a download id (see haul ls)")
        }
        let door: DaemonDoor
        do throws(DaemonDoor.Failure) { door = try await DaemonDoor.open() } catch { return failed(error) }
        var code = ExitCode.success
        let route = action == "rm" ? "remove" : action
        let body = body ?? (action == "rm" && v.flag("--files") ? #"{"files":true}"# : "{}")
        for id in ids {
            do throws(DaemonDoor.Failure) {
                _ = try await door.call("POST", "/api/v1/downloads/\(id)/\(route)", json: Array(body.utf8))
                let done = [
                    "pause": "paused", "resume": "resumed", "cancel": "cancelled", "move": "moved", "rm": "removed",
                ][action]!
                Output.emit("\(id) \(done)\n", to: 1)
            } catch {
                code = failed(error, id: id)
            }
        }
        return code
    }

    /// `haul move top|up|down|bottom ID...`.
    static func move(_ args: [String]) async throws(UsageError) -> ExitCode {
        let (_, words) = try Arguments.parse(args, options: [])
        let places = DownloadManager.QueueMove.allCases.map(\.rawValue)
        guard let place = words.first, places.contains(place) else {
            throw UsageError("move takes where first: \(places.joined(separator: ", ")) (see haul help move)")
        }
        return try await control("move", Array(words.dropFirst()), body: #"{"to":"\#(place)"}"#)
    }

    /// `haul get --background URL...`: hands the URLs to the daemon and prints their ids.
    static func background(_ get: [String: [String]], urls: [String]) async throws(UsageError) -> ExitCode {
        let taken: Set<String> = [
            "--background", "--output", "--dir", "--connections", "--limit-rate", "--checksum", "--json", "--quiet",
        ]
        if let other = get.keys.sorted().first(where: { !taken.contains($0) }) {
            throw UsageError("--background takes -o, -d, -x, --limit-rate and --checksum, not \(other)")
        }
        guard !urls.isEmpty else { throw UsageError("--background takes one URL or more") }
        struct Add: Encodable {
            var urls: [String]
            var name, subfolder: String?
            var connections: Int?
            var maxBytesPerSecond: Int64?
            var checksums: [String]?
        }
        var add = Add(urls: urls, name: get.last("--output"), subfolder: get.last("--dir"))
        if add.name != nil && urls.count > 1 { throw UsageError("-o is for one URL; use -d for several") }
        add.connections = try get.integer("--connections", min: 1)
        if let rate = get.last("--limit-rate") {
            guard let bytes = GetCommand.byteCount(rate), bytes >= 1024 else {
                throw UsageError("--limit-rate with --background expects at least 1K, got '\(rate)'")
            }
            add.maxBytesPerSecond = bytes
        }
        add.checksums = get["--checksum"]?.flatMap { $0.split(separator: ",").map(String.init) }
        let encoder = JSONEncoder()
        guard let body = try? encoder.encode(add) else { throw UsageError("cannot encode the request") }
        do throws(DaemonDoor.Failure) {
            struct Added: Decodable { var downloads: [DownloadJSON] }
            let door = try await DaemonDoor.openStarting { Output.emit("haul: \($0)\n", to: 2) }
            let answer = try await door.call("POST", "/api/v1/downloads", json: Array(body))
            let added = (try? JSONDecoder().decode(Added.self, from: Data(answer)))?.downloads ?? []
            for item in added where !get.flag("--quiet") {
                Output.emit(
                    get.flag("--json")
                        ? "{\"id\":\(item.id),\"url\":\(Output.quote(item.url))}\n"
                        : "\(item.id) queued \(Output.printable(item.url))\n", to: 1)
            }
            return .success
        } catch {
            return failed(error)
        }
    }

    private static func failed(_ error: DaemonDoor.Failure, id: String? = nil) -> ExitCode {
        Output.emit("haul: error: \(id.map { "download \($0): " } ?? "")\(Output.printable(error.message))\n", to: 2)
        return error.code
    }
}
