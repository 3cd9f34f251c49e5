import Haul
import HaulCore
import HaulServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What `haul watch` knows of the daemon's downloads, from the snapshot and the changes after
/// it, and how it shows them.
struct WatchView {
    let output: Output
    private(set) var downloads: [Int64: DownloadJSON] = [:]
    /// A download failed since watching began.
    private(set) var failedWhileWatching = false
    private var offline: String?
    /// The spinner's frame, turned at each redraw.
    private var frame = 0

    init(output: Output) { self.output = output }

    /// Nothing queued, running or waiting among the downloads known (the snapshot holds the
    /// first 1000: ``DaemonDoor/nothingUnfinished()`` asks for the rest).
    var isIdle: Bool { !downloads.values.contains { ["queued", "running", "waiting"].contains($0.state) } }

    mutating func apply(_ event: EventStreamReader.Event) {
        let data = Data(event.data.utf8)
        let decoder = JSONDecoder()
        switch event.name {
        case "snapshot":
            struct Snapshot: Decodable { var downloads: [DownloadJSON] }
            guard let snapshot = try? decoder.decode(Snapshot.self, from: data) else { return }
            downloads = Dictionary(snapshot.downloads.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
        case "added", "state":
            guard let item = try? decoder.decode(DownloadJSON.self, from: data) else { return }
            let before = downloads[item.id]?.state
            downloads[item.id] = item
            if before != item.state { changed(item) }
        case "removed":
            guard let removed = try? decoder.decode(RemovedEvent.self, from: data) else { return }
            downloads[removed.id] = nil
            Output.emit("\(removed.id) removed\n", to: 1)
        case "progress":
            guard let p = try? decoder.decode(ProgressEvent.self, from: data), downloads[p.id] != nil else { return }
            (downloads[p.id]!.done, downloads[p.id]!.total) = (p.done, p.total)
            (downloads[p.id]!.speed, downloads[p.id]!.eta) = (p.speed, p.eta)
        case "moved":
            struct Moved: Decodable {
                var id: Int64
                var priority: Int64
                var positions: [[Int64]]
            }
            guard let moved = try? decoder.decode(Moved.self, from: data) else { return }
            downloads[moved.id]?.priority = moved.priority
            for pair in moved.positions where pair.count == 2 { downloads[pair[0]]?.position = pair[1] }
        case "network":
            struct Network: Decodable {
                var status: String
                var reason: String?
            }
            guard let network = try? decoder.decode(Network.self, from: data) else { return }
            offline = network.status == "unsatisfied" ? (network.reason ?? "no network") : nil
        default: return
        }
    }

    /// A change of state, on stdout: `ID STATE NAME`, and why it failed.
    private mutating func changed(_ item: DownloadJSON) {
        if item.state == "failed" { failedWhileWatching = true }
        var line = "\(item.id) \(Output.printable(item.state)) \(Output.printable(item.file ?? item.name ?? item.url))"
        if item.state == "failed", let error = item.error { line += ": " + Output.printable(error) }
        output.clearBlock()
        Output.emit(line + "\n", to: 1)
    }

    /// The live lines: each unfinished download in queue order, then a total.
    mutating func draw() {
        frame += 1
        let open = downloads.values.filter { !["completed", "failed", "cancelled"].contains($0.state) }
            .sorted { ($0.priority, -$0.position) > ($1.priority, -$1.position) }
        var lines: [String] = []
        var speed = 0.0
        for item in open {
            let name = Output.printable(item.file ?? item.name ?? item.url)
            if item.state == "running" {
                speed += item.speed ?? 0
                let progress = TransferProgress(
                    completedBytes: item.done, totalBytes: item.total, bytesPerSecond: item.speed ?? 0,
                    smoothedBytesPerSecond: item.speed ?? 0)
                lines.append(
                    Output.terminalLine(progress, name: "#\(item.id) " + name, spinner: frame, width: Output.columns()))
            } else {
                lines.append("\(Output.printable(item.state))  #\(item.id) \(name)")
            }
        }
        let count = { (state: String) in open.filter { $0.state == state }.count }
        var total = "\(count("running")) running, \(count("queued")) queued"
        for state in ["paused", "waiting"] where count(state) > 0 { total += ", \(count(state)) \(state)" }
        total += "  \(Output.bytes(Int64(speed)))/s"
        if let offline { total += "  offline: \(Output.printable(offline))" }
        output.progressBlock(lines + [total])
    }
}
