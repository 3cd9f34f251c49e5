import Foundation
import Haul

extension GetCommand {
    /// What a download of a `-j` run says while it runs, with its number: the start, retries and
    /// restarts, as one download says them, and progress in JSON.
    static func report(_ event: DownloadEvent, of number: Int, url: URL, output: Output) {
        // Only the notes name the download: built when one is written, not for every event.
        var name: String { "#\(number) \(url.lastPathComponent)" }
        switch event {
        case .started(let s):
            output.json(
                "start",
                [
                    ("id", number), ("url", HaulRequest.redacted(url)), ("destination", s.destination.path),
                    ("status", s.status), ("offset", s.offset), ("total", s.totalBytes),
                ])
            if s.offset > 0 { output.note("\(name): resuming at \(Output.bytes(s.offset))") }
        case .progress(let p):
            output.json(
                "progress",
                [
                    ("id", number), ("bytes", p.completedBytes), ("total", p.totalBytes),
                    ("speed", p.bytesPerSecond), ("eta", p.estimatedTimeRemaining),
                ])
        case .retrying(let attempt, let error, let delay):
            output.json(
                "retry",
                [
                    ("id", number), ("attempt", attempt), ("delay", delay), ("code", error.code.description),
                    ("message", error.message),
                ])
            output.note("\(name): \(error.message); retry \(attempt) in \(String(format: "%.1f", delay)) s")
        case .restarted(let reason):
            output.json("restart", [("id", number), ("reason", reason)])
            output.note("\(name): starting over: \(reason)")
        case .suspended, .resumed, .completed, .failed:
            break  // the outcome is reported by the completion
        }
    }

    /// `-j N`: the URLs go through a ``DownloadManager`` with N downloads at once (and at most N
    /// to one host); the terminal shows a line per running download and a total line.
    func runQueue(interrupts: Interrupts) async -> ExitCode {
        var configuration = DownloadManager.Configuration()
        configuration.maxConcurrentDownloads = jobs
        configuration.maxDownloadsPerHost = jobs
        configuration.persistence = .ephemeral
        // Every item stays to the end: the total line counts them.
        configuration.maxFinishedItems = max(configuration.maxFinishedItems, urls.count)
        configuration.session = self.configuration
        // Only watched when some URL needs it: downloads from this machine are never held, so a
        // run of loopback URLs opens no netlink socket and reads no network state.
        configuration.network = urls.contains(where: DownloadManager.needsNetwork) ? network : nil
        configuration.waitsForConnectivity = waitsForNetwork
        configuration.allowsCellularAccess = allowsCellular
        let output = self.output
        let manager: DownloadManager
        do { manager = try DownloadManager(configuration: configuration) } catch {
            output.error(error.message)
            return ExitCode(error)
        }
        let codes = Shared<[ExitCode]>([])
        var ids: [UUID: Int] = [:]
        for (index, url) in urls.enumerated() {
            let number = places[index]
            let shown = HaulRequest.redacted(url)
            let target: DownloadManager.Target
            switch self.target(for: index) {
            case .file(let f): target = .file(f)
            case .directory(let d): target = .directory(d)
            case .custom: target = .directory(URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
            }
            let id = manager.add(
                url, to: target, options: options(for: index),
                events: { event in Self.report(event, of: number, url: url, output: output) },
                completion: { result in
                    switch result {
                    case .success(let r):
                        output.json(
                            "done",
                            [
                                ("id", number), ("url", shown), ("path", r.fileURL.path), ("bytes", r.bytes),
                                ("alreadyComplete", r.alreadyComplete),
                            ])
                        output.note(
                            r.alreadyComplete
                                ? "\(r.fileURL.path) is already complete (\(Output.bytes(r.bytes)))"
                                : "saved \(r.fileURL.path)")
                        codes.withLock { $0.append(.success) }
                    case .failure(let e):
                        let code = ExitCode(e)
                        output.json(
                            "error",
                            [
                                ("id", number), ("url", shown), ("code", e.code.description), ("message", e.message),
                                ("exit", code.rawValue),
                            ])
                        output.error(e.message)
                        codes.withLock { $0.append(code) }
                    }
                })
            ids[id] = number
        }
        let numbers = ids
        let interrupted = Shared(false)
        let token = interrupts.onInterrupt {
            interrupted.set(true)
            Task { await manager.shutdown() }
        }
        defer { interrupts.remove(token) }
        // `--json`: a download held for the network says so, and again when it goes on.
        let watcher = Task {
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
        let renderer = Task {
            var frame = 0
            while !Task.isCancelled && output.mode == .human {
                let lines = manager.items(in: [.running, .waitingForNetwork]).map {
                    item -> String in
                    let name =
                        "#\(numbers[item.id] ?? 0) \(item.fileURL?.lastPathComponent ?? item.url.lastPathComponent)"
                    if item.state == .waitingForNetwork { return "waiting for network  \(name)" }
                    return Output.progressLine(
                        item.progress ?? TransferProgress(completedBytes: 0, totalBytes: nil), name: name,
                        spinner: frame)
                }
                let done = manager.count(in: .completed)
                let active = manager.activity.activeTransfers
                // The activity indicator: the spinner turns only while transfers are on the wire.
                if active > 0 { frame += 1 }
                // On a terminal the total line leads with the spinner (turning only while
                // transfers are on the wire); plain lines have none.
                let aggregate = manager.aggregateProgress
                // "connections", not "active", which would read as downloads (3 downloads of
                // -x 2: "6 connections").
                let connections = active == 1 ? "1 connection" : "\(active) connections"
                var total = Output.progressLine(
                    aggregate, name: "total (\(done)/\(numbers.count) done, \(connections))",
                    spinner: output.isTerminal && aggregate.totalBytes == nil ? frame : nil)
                if output.isTerminal && aggregate.totalBytes != nil {
                    total = (active > 0 ? Output.spinnerFrames[frame % 4] : " ") + " " + total
                }
                output.progressBlock(lines + [total])
                try? await Task.sleep(nanoseconds: 100_000_000)
            }
        }
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
}
