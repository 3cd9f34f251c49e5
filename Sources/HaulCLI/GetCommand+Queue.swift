import Haul
import HaulCore

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
        let numbers = Shared<[UUID: Int]>([:])
        let (urls, places) = (self.urls, self.places)
        let targets = urls.indices.map(managerTarget(for:))
        let allOptions = urls.indices.map(options(for:))
        let reporters = urls.indices.map { Reporter(output: output, url: urls[$0], number: places[$0]) }
        let manage = Self.managing(
            manager, urls: urls, places: places, targets: targets, options: allOptions, reporters: reporters,
            codes: codes, numbers: numbers)
        // Without a live display (drawn from the manager's items), small files take the express
        // way first.
        let feed =
            output.mode == .human
            ? nil
            : Self.expressFeed(
                manager: manager, jobs: jobs, urls: urls, targets: targets, options: allOptions, manage: manage
            ) { index, result, start in
                let reporter = reporters[index]
                reporter.report(.started(start))
                reporter.report(.progress(TransferProgress(completedBytes: result.bytes, totalBytes: result.bytes)))
                let code = reporter.finished(.success(result))
                codes.withLock { $0.append(code) }
            }
        if feed == nil {
            for index in urls.indices { manage(index, nil) {} }
        }
        let interrupted = Shared(false)
        let token = interrupts.onInterrupt {
            interrupted.set(true)
            feed?.stop()
            Task { await manager.shutdown() }
        }
        defer { interrupts.remove(token) }
        let watcher = Task { await Self.reportNetworkWaits(of: manager, numbers: numbers, output: output) }
        let renderer = Task { await Self.drawBlock(of: manager, numbers: numbers.get(), output: output) }
        await feed?.run()
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

    /// Hands URL `index` to the manager (with the options given, else its own), its number
    /// noted first for the JSON lines; its outcome is reported and counted, then `finished` runs.
    private static func managing(
        _ manager: DownloadManager, urls: [URL], places: [Int], targets: [DownloadManager.Target],
        options: [DownloadOptions], reporters: [Reporter], codes: Shared<[ExitCode]>, numbers: Shared<[UUID: Int]>
    ) -> @Sendable (Int, DownloadOptions?, @escaping @Sendable () -> Void) -> Void {
        { index, given, finished in
            let reporter = reporters[index]
            let id = UUID()
            numbers.withLock { $0[id] = places[index] }
            _ = manager.add(
                urls[index], to: targets[index], options: given ?? options[index], id: id,
                events: { reporter.report($0) },
                completion: { result in
                    let code = reporter.finished(result)
                    codes.withLock { $0.append(code) }
                    finished()
                })
        }
    }

    /// The feed of a run without a live display: URLs into a directory that the network policy
    /// lets start now are tried the express way; the others, and those it declines, go to
    /// `manage`.
    private static func expressFeed(
        manager: DownloadManager, jobs: Int, urls: [URL], targets: [DownloadManager.Target],
        options: [DownloadOptions],
        manage: @escaping @Sendable (Int, DownloadOptions?, @escaping @Sendable () -> Void) -> Void,
        saved: @escaping @Sendable (Int, DownloadResult, DownloadStart) -> Void
    ) -> ExpressFeed {
        // Each URL's directory as a normalised path (nil: a named file), worked out once for a
        // run of URLs into the same one (a thousand URLs into `-d` share one).
        var paths: [String?] = []
        paths.reserveCapacity(targets.count)
        var last: (directory: URL, path: String)?
        for target in targets {
            guard case .directory(let directory) = target else {
                paths.append(nil)
                continue
            }
            if let last, last.directory == directory {
                paths.append(last.path)
                continue
            }
            let path = Sys.lexicallyNormalized(directory.path)
            last = (directory, path)
            paths.append(path)
        }
        // The next URL may start on the transport's thread, which must not wait for a listing of
        // a directory's resume records: each directory a resuming download looks in is listed
        // now (one made later is empty when its first download lists it).
        var directories = Set<String>()
        for (index, path) in paths.enumerated() where options[index].resume {
            if let path { directories.insert(path) }
        }
        for path in directories where Sys.isDirectory(path) { RecordIndex.shared.prepare(path, keepingNames: true) }
        return ExpressFeed(
            count: urls.count, jobs: jobs,
            express: { [session = manager.session, paths] index, saving, ended in
                guard let path = paths[index], manager.mayStartNow(urls[index]) else { return nil }
                return session.startExpress(
                    urls[index], intoDirectoryAt: path, options: options[index], saving: saving, completion: ended)
            },
            manage: manage, saved: saved)
    }

    /// Where the manager puts URL `index`: a list line's own file or directory, else `-d` (a
    /// custom destination means the working directory).
    private func managerTarget(for index: Int) -> DownloadManager.Target {
        switch target(for: index) {
        case .file(let f): .file(f)
        case .directory(let d): .directory(d)
        case .custom: .directory(URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        }
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
    private static func reportNetworkWaits(
        of manager: DownloadManager, numbers: Shared<[UUID: Int]>, output: Output
    ) async {
        guard output.mode == .json else { return }
        var last: [UUID: DownloadManager.Item.State] = [:]
        for await items in manager.updates {
            for item in items where last[item.id] != item.state {
                if item.state == .waitingForNetwork {
                    output.json(
                        "waiting",
                        [
                            ("id", numbers.get()[item.id] ?? 0),
                            ("reason", manager.networkUnavailableReason ?? "no usable network"),
                        ])
                } else if last[item.id] == .waitingForNetwork {
                    output.json("network", [("id", numbers.get()[item.id] ?? 0), ("status", "satisfied")])
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
