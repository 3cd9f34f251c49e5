import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// `haul get --background` with no daemon running starts one, as `haul serve` with its
/// defaults would run, and waits (bounded) until it answers.
extension DaemonDoor {
    /// The longest wait for a daemon just started to answer.
    static let startTimeout = 30.0

    /// The door; when no daemon answers, `haul serve` is started in the background (its own
    /// session, output to `serve.log` in the state directory) and the door opened once it
    /// answers. `announce` is told where it downloads and logs.
    static func openStarting(announce: (String) -> Void) async throws(Failure) -> DaemonDoor {
        do throws(Failure) { return try await open() } catch { guard error.isNotRunning else { throw error } }
        guard let state = stateDirectory() else {
            throw Failure(message: "no home directory: set HOME or XDG_STATE_HOME", code: .usage)
        }
        let root: String
        do throws(UsageError) { root = try ServeCommand.defaultRoot() } catch {
            throw Failure(message: error.message, code: .usage)
        }
        try? Sys.makeDirectories(Sys.parentDirectory(of: state))
        guard Sys.privateDirectory(state) != nil else {
            throw Failure(message: "\(state) is not a directory of this user's, closed to others", code: .internalError)
        }
        let log = state + "/serve.log"
        let pid: pid_t
        do throws(Errno) { pid = try Sys.spawnSelf(["serve"], log: log) } catch {
            throw Failure(message: "cannot start haul serve: \(error)", code: .internalError)
        }
        announce("started haul serve in the background: downloads go to \(root); its log is \(log)")
        let deadline = monotonicSeconds() + startTimeout
        // One that lost the race to another start exits while the other comes up: the wait goes
        // on to the deadline either way, shorter once ours has exited.
        var end = deadline
        while monotonicSeconds() < end {
            do throws(Failure) { return try await open() } catch { guard error.isNotRunning else { throw error } }
            if end == deadline && Sys.hasExited(pid) { end = min(deadline, monotonicSeconds() + 10) }
            try? await Task.sleep(nanoseconds: 100_000_000)
        }
        throw Failure(
            message: "haul serve did not start" + (lastLine(of: log).map { ": " + $0 } ?? "") + " (see \(log))",
            code: .network)
    }

    /// The last line the daemon wrote to its log, if short enough to show.
    private static func lastLine(of log: String) -> String? {
        guard let read = (try? Sys.readSmallFile(log, followingLinks: false)) ?? nil else { return nil }
        let text = String(decoding: read, as: UTF8.self)
        return text.split(separator: "\n").last.map { Output.printable(String($0.prefix(300))) }
    }
}
