import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul get` without `-j`: runs one download task, holding it while the network path is
/// unusable (no default route, or cellular with `--no-cellular`): "waiting for network", then
/// it continues from its bytes when the path returns. With `--no-wait` it fails instead,
/// keeping the partial file. Downloads from this machine (loopback) are never held.
struct NetworkGate {
    /// Where paths come from; nil turns the gate off.
    let source: (any NetworkPathSource)?
    /// Wait for the path (else fail with ``HaulError/Code/networkUnavailable``).
    let waits: Bool
    /// Whether a cellular path may be used.
    let allowsCellular: Bool
    let output: Output

    func run(_ task: DownloadTask, url: URL) async throws(HaulError) -> DownloadResult {
        guard let source, DownloadManager.needsNetwork(url) else {
            task.resume()
            return try await task.finished()
        }
        let failure = Shared<HaulError?>(nil)
        let (waits, cellular, output) = (waits, allowsCellular, output)
        let watcher = Task {
            var holding = true  // not transferring: not started yet, or suspended for the network
            var announced = false
            for await path in source.paths {
                let allowed = DownloadManager.allows(path, cellular: cellular, expensive: true)
                if allowed && holding {
                    holding = false
                    if announced {
                        let via = path.primary.map { "\($0.name) (\($0.kind.rawValue))" } ?? "?"
                        output.json("network", [("status", "satisfied"), ("interface", path.primary?.name)])
                        output.note("network is back via \(via); continuing")
                    }
                    task.resume()
                } else if !allowed && (!holding || !announced) {
                    let reason =
                        path.status == .satisfied ? "cellular is not allowed (--no-cellular)" : path.reason ?? "no path"
                    guard waits else {
                        failure.set(HaulError(.networkUnavailable, "no usable network: \(reason) (--no-wait)"))
                        _ = await task.cancelProducingResumeData()
                        return
                    }
                    holding = true
                    announced = true
                    task.suspend()
                    output.json("waiting", [("reason", reason)])
                    output.note("waiting for network: \(reason)")
                }
            }
        }
        defer { watcher.cancel() }
        do {
            return try await task.finished()
        } catch {
            throw failure.get() ?? error
        }
    }
}
