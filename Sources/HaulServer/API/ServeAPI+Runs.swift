import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Between the store and the runner: what the API starts, and what the runner reports back
/// (on the HTTP loop's thread, which owns the store).
extension ServeAPI {
    /// A download as the API shows it, with its progress while it runs.
    func shown(_ item: StoredDownload) -> DownloadJSON {
        DownloadJSON(item, root: root.path, progress: item.state == .running ? runner?.progress(item.id) : nil)
    }

    /// After a restart: what was running is queued again, and every queued download is handed
    /// to the runner in queue order (a paused one waits for its resume).
    package func resumeQueue() throws(ServeError) {
        try store.recover()
        for item in try store.list(states: [.queued], limit: Self.maxDownloads) { start(item) }
    }

    /// Hands `item` to the runner, its names checked again under the root (a link planted since
    /// it was added fails it here).
    func start(_ item: StoredDownload) {
        guard let runner else { return }
        let target: RunTarget
        do throws(ServeError) {
            if let name = item.name {
                target = .file(try root.resolve(folder: item.subfolder, file: name))
            } else {
                let folder = try item.subfolder.map { (f: String) throws(ServeError) -> String in try root.resolve(f) }
                if let folder {
                    do { try Sys.makeDirectories(folder) } catch {
                        throw ServeError(.internalError, "cannot make the folder \(item.subfolder ?? ""): \(error)")
                    }
                }
                target = .directory(folder ?? root.path)
            }
        } catch {
            try? changeState(item, .failed, error: error.message)
            return
        }
        runner.run(item, into: target, options: Self.downloadOptions(item.options))
    }

    /// The stored choices as the engine takes them.
    static func downloadOptions(_ json: String) -> DownloadOptions {
        var options = DownloadOptions()
        options.createIntermediateDirectories = true
        guard let stored = try? JSONDecoder().decode(StoredOptions.self, from: Data(json.utf8)) else { return options }
        options.connections = stored.connections ?? 1
        options.maxBytesPerSecond = stored.maxBytesPerSecond
        options.checksums = (stored.checksums ?? []).compactMap { try? Checksum($0) }
        return options
    }

    /// Stops `item` and removes its partial: through the runner when it runs there, else (paused
    /// before a restart) the partial at its recorded file, if haul wrote it for this URL.
    func cancel(_ item: StoredDownload) {
        if runner?.cancel(item.id) == true { return }
        discardPartial(of: item)
    }

    /// Removes the partial haul wrote for `item`'s URL at its recorded file, and nothing else.
    func discardPartial(of item: StoredDownload) {
        if let file = item.file, let url = URL(string: item.url), file.hasPrefix(root.path + "/") {
            DownloadStore.discardPartial(of: url, at: file)
        }
    }

    /// The settings the page may change: downloads at once (1-64) and the speed limit all
    /// downloads share (bytes per second, 0: none). Kept in the store; no path, hook or log can
    /// be set through the API.
    struct Settings: Codable, Equatable {
        var maxConcurrentDownloads: Int
        var maxOverallBytesPerSecond: Int64
    }

    static let concurrencyKey = "maxConcurrentDownloads"
    static let overallRateKey = "maxOverallBytesPerSecond"
    /// The lowest speed limit taken, as for one download's.
    static let lowestRate: Int64 = 1024

    func settings() throws(ServeError) -> Settings {
        Settings(
            maxConcurrentDownloads: try store.setting(Self.concurrencyKey).flatMap { Int($0) } ?? 3,
            maxOverallBytesPerSecond: try store.setting(Self.overallRateKey).flatMap { Int64($0) } ?? 0)
    }

    func changeSettings(_ body: [UInt8]) throws(ServeError) -> HTTPReply {
        struct Change: Decodable {
            var maxConcurrentDownloads: Int?
            var maxOverallBytesPerSecond: Int64?
        }
        guard let change = try? JSONDecoder().decode(Change.self, from: Data(body)) else {
            throw ServeError(
                .badRequest, "the body is not {\"maxConcurrentDownloads\"?: N, \"maxOverallBytesPerSecond\"?: N}")
        }
        // Both checked before either is kept: a refused change changes nothing.
        if let n = change.maxConcurrentDownloads, !(1...64).contains(n) {
            throw ServeError(.badRequest, "maxConcurrentDownloads must be 1...64")
        }
        if let rate = change.maxOverallBytesPerSecond, rate != 0, rate < Self.lowestRate {
            throw ServeError(
                .badRequest, "maxOverallBytesPerSecond must be 0 (no limit) or at least \(Self.lowestRate)")
        }
        let before = try settings()
        if let n = change.maxConcurrentDownloads {
            try store.setSetting(Self.concurrencyKey, String(n))
            runner?.setMaxConcurrent(n)
        }
        if let rate = change.maxOverallBytesPerSecond {
            try store.setSetting(Self.overallRateKey, String(rate))
            runner?.setMaxOverallRate(rate)
        }
        let now = try settings()
        if now != before { _ = try store.append(event: "settings", download: nil, body: try Self.text(now)) }
        return try Self.json(200, now)
    }

    /// Which file is at `path` (device, inode, birth, size): what "remove with files" binds to.
    static func identity(of path: String) -> String? {
        guard let s = try? Sys.status(path), s.isRegular else { return nil }
        return "\(s.device):\(s.inode):\(s.birth ?? 0):\(s.size)"
    }

    /// Deletes `item`'s file: only a completed download's, only the very file haul finished
    /// writing for it (not one found complete, not one put there since, not another download's
    /// at the same name), only under the root, and not through a link on the way (the name is
    /// checked again as a name the API would take). Anything else is left, with a 400.
    func removeFile(of item: StoredDownload) throws(ServeError) {
        guard item.state == .completed, let path = item.file, path.hasPrefix(root.path + "/"), let owned = item.owned
        else { throw ServeError(.badRequest, "download \(item.id) has no file of its own to delete") }
        let checked = try root.resolve(String(path.dropFirst(root.path.count + 1)))
        guard Self.identity(of: checked) == owned else {
            throw ServeError(.badRequest, "the file of download \(item.id) is not the one it wrote: left in place")
        }
        do { try Sys.unlink(checked) } catch {
            throw ServeError(.internalError, "cannot remove \(ServeError.shown(item.file ?? "")): \(error)")
        }
    }

    /// Sets `item`'s state, with an event carrying the download as it is now.
    func changeState(_ item: StoredDownload, _ state: StoredDownload.State, error: String? = nil) throws(ServeError) {
        try store.setState(item.id, state, error: error, now: now())
        guard let changed = try store.download(item.id) else { return }
        _ = try store.append(
            event: "state", download: item.id, body: try Self.text(DownloadJSON(changed, root: root.path)))
    }

    /// What the runner saw change. An ended download (in the store) stays ended: a stale report
    /// of it running does not bring it back; but one cancelled as it completed is completed
    /// (its file is there).
    package func apply(_ reports: [RunReport]) {
        for report in reports {
            guard let item = try? store.download(report.id) else {
                runner?.forget(report.id)  // removed from the list
                continue
            }
            let late = item.state == .cancelled && report.state == .completed
            if item.state.isEnded && !late {
                if report.state.isEnded { runner?.forget(report.id) }
                continue
            }
            // A file outside the root is not recorded (it cannot be, but a record is trusted later).
            let file = report.file.flatMap { $0.hasPrefix(root.path + "/") ? $0 : nil }
            try? store.setProgress(item.id, file: file, done: report.done, total: report.total)
            if report.state == .completed, let file, !report.foundComplete {
                try? store.setOwned(item.id, Self.identity(of: file))
            }
            if report.state.isEnded { runner?.forget(report.id) }
            guard report.state != item.state else { continue }
            try? changeState(item, report.state, error: report.state == .failed ? report.error : nil)
        }
    }
}
