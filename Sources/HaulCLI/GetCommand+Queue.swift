import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension GetCommand {
    /// `-j N`: the URLs go through a ``DownloadManager`` with N downloads at once (and at most N
    /// to one host); the terminal shows a line per running download and a total line.
    func runQueue(interrupts: Interrupts) async -> ExitCode {
        let output = self.output
        let manager: DownloadManager
        do { manager = try DownloadManager(configuration: managerConfiguration()) } catch {
            output.error(error.message)
            return ExitCode(error)
        }
        let codes = Shared<[ExitCode]>([])
        var numbers: [UUID: Int] = [:]
        for (index, url) in urls.enumerated() {
            let target: DownloadManager.Target
            switch self.target(for: index) {
            case .file(let f): target = .file(f)
            case .directory(let d): target = .directory(d)
            case .custom: target = .directory(URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
            }
            let reporter = Reporter(output: output, url: url, number: places[index])
            let id = manager.add(
                url, to: target, options: options(for: index), events: { reporter.report($0) },
                completion: { result in
                    let code = reporter.finished(result)
                    codes.withLock { $0.append(code) }
                })
            numbers[id] = places[index]
        }
        let interrupted = Shared(false)
        let token = interrupts.onInterrupt {
            interrupted.set(true)
            Task { await manager.shutdown() }
        }
        defer { interrupts.remove(token) }
        let watcher = Task { [numbers] in await Self.reportNetworkWaits(of: manager, numbers: numbers, output: output) }
        let renderer = Task { [numbers] in await Self.drawBlock(of: manager, numbers: numbers, output: output) }
        await manager.waitUntilIdle()
        watcher.cancel()
        renderer.cancel()
        _ = await renderer.value
        output.clearBlock()
        if interrupted.get() {
            output.note("interrupted; partial downloads kept. Run the same command again to resume.")
            return .interrupted
        }
        return summarize(codes.get())
    }

    /// The run's manager: `-j` downloads at once (and to one host), nothing persisted, every
    /// item kept to the end (the total line counts them).
    private func managerConfiguration() -> DownloadManager.Configuration {
        var configuration = DownloadManager.Configuration()
        configuration.maxConcurrentDownloads = jobs
        configuration.maxDownloadsPerHost = jobs
        configuration.persistence = .ephemeral
        configuration.maxFinishedItems = max(configuration.maxFinishedItems, urls.count)
        configuration.session = self.configuration
        // Only watched when some URL needs it: downloads from this machine are never held, so a
        // run of loopback URLs opens no netlink socket and reads no network state.
        configuration.network = urls.contains(where: DownloadManager.needsNetwork) ? network : nil
        configuration.waitsForConnectivity = waitsForNetwork
        configuration.allowsCellularAccess = allowsCellular
        return configuration
    }

    /// `--json`: a download held for the network says so, and again when it goes on.
    private static func reportNetworkWaits(of manager: DownloadManager, numbers: [UUID: Int], output: Output) async {
        guard output.mode == .json else { return }
        var last: [UUID: DownloadManager.Item.State] = [:]
        for await items in manager.updates {
            for item in items where last[item.id] != item.state {
                if item.state == .waitingForNetwork {
                    output.json(
                        "waiting",
                        [
                            ("id", numbers[item.id] ?? 0),
                            ("reason", manager.networkUnavailableReason ?? "no usable network"),
                        ])
                } else if last[item.id] == .waitingForNetwork {
                    output.json("network", [("id", numbers[item.id] ?? 0), ("status", "satisfied")])
                }
                last[item.id] = item.state
            }
        }
    }

    /// The block of a human run: a line per running download and a total line, ten times a
    /// second, until cancelled.
    private static func drawBlock(of manager: DownloadManager, numbers: [UUID: Int], output: Output) async {
        var frame = 0
        while !Task.isCancelled && output.mode == .human {
            let lines = manager.items(in: [.running, .waitingForNetwork]).map { item -> String in
                let name = "#\(numbers[item.id] ?? 0) \(item.fileURL?.lastPathComponent ?? item.url.lastPathComponent)"
                if item.state == .waitingForNetwork { return "waiting for network  \(name)" }
                return Output.progressLine(
                    item.progress ?? TransferProgress(completedBytes: 0, totalBytes: nil), name: name, spinner: frame)
            }
            let active = manager.activity.activeTransfers
            // The activity indicator: the spinner turns only while transfers are on the wire.
            if active > 0 { frame += 1 }
            output.progressBlock(
                lines + [totalLine(of: manager, count: numbers.count, active: active, frame: frame, output: output)])
            try? await Task.sleep(nanoseconds: 100_000_000)
        }
    }

    /// The total line: on a terminal it leads with the spinner (turning only while transfers
    /// are on the wire); plain lines have none. "connections", not "active", which would read
    /// as downloads (3 downloads of -x 2: "6 connections").
    private static func totalLine(
        of manager: DownloadManager, count: Int, active: Int, frame: Int, output: Output
    ) -> String {
        let done = manager.count(in: .completed)
        let aggregate = manager.aggregateProgress
        let connections = active == 1 ? "1 connection" : "\(active) connections"
        let total = Output.progressLine(
            aggregate, name: "total (\(done)/\(count) done, \(connections))",
            spinner: output.isTerminal && aggregate.totalBytes == nil ? frame : nil)
        guard output.isTerminal && aggregate.totalBytes != nil else { return total }
        return (active > 0 ? Output.spinnerFrames[frame % 4] : " ") + " " + total
    }
}
