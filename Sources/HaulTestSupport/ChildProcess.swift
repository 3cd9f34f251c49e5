import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// A program a test starts (`haul`, `ip`, `openssl`, `mount`…): posix_spawn into a process group
/// of its own, stdout and stderr collected by a thread of its own, the exit found with
/// `waitpid(WNOHANG)` on that thread. Every wait is bounded and none blocks Swift's
/// cooperative threads.
///
/// Why not Foundation's `Process`: on Linux it learns of an exit through one shared thread that
/// blocks in `waitpid`, its pipes are not close-on-exec (a child spawned at the same moment by
/// another test can inherit the write end of this one's pipe, and a read to the end of the output
/// then lasts as long as that other child), and its `waitUntilExit` runs a run loop: a test run
/// can hang until its time limit with every test waiting on a child. Here the pipes are
/// close-on-exec, the child closes every other descriptor, and `finish(timeout:)` gives up after
/// a bounded time instead of waiting forever.
public final class ChildProcess: Sendable {
    /// The child's pid (also its process group id).
    public let pid: pid_t

    private struct State {
        var status: Int32?
        /// ``finish(timeout:)`` killed it, its time being up.
        var timedOut = false
        var out = Data()
        var err = Data()
        /// The reader thread is done: exit status known and output read to its end (or given up).
        var done = false
    }
    private let state = Locked(State())

    /// Starts `executable` (a path; a bare name is looked up in PATH) with `arguments`.
    /// `environment` adds to or replaces this process's variables. With `mergingStderr` the
    /// child's stderr goes to the same pipe as its stdout. After the child exits, its output is
    /// read for up to `outputGrace` seconds more while something it started still holds a pipe.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        directory: String? = nil, mergingStderr: Bool = false, outputGrace: Double = 2
    ) throws {
        let (out, err) = try Self.makePipes(mergingStderr: mergingStderr)
        defer {
            // The parent keeps only the read ends.
            close(out[1])
            if !mergingStderr { close(err[1]) }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, out[1], 1)
        posix_spawn_file_actions_adddup2(&actions, mergingStderr ? out[1] : err[1], 2)
        // Nothing else of this process reaches the child (glibc 2.34+; the pipes above are
        // close-on-exec in any case).
        if let closeFrom = Self.closeFrom { _ = closeFrom(&actions, 3) }
        if let directory {
            guard let chdir = Self.chdir else { throw POSIXError(.ENOSYS) }
            _ = chdir(&actions, directory)
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        Self.setGroupAndSignals(&attributes)

        var variables = ProcessInfo.processInfo.environment
        for (k, v) in environment { variables[k] = v }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var child: pid_t = 0
        let spawn = executable.contains("/") ? posix_spawn : posix_spawnp
        let rc = spawn(&child, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            close(out[0])
            if !mergingStderr { close(err[0]) }
            throw POSIXError(.init(rawValue: rc) ?? .EIO)
        }
        pid = child

        let outFd = out[0]
        let errFd = mergingStderr ? -1 : err[0]
        let thread = Thread { [state, pid] in Self.watch(pid, outFd, errFd, outputGrace, state) }
        thread.name = "haul.test.child"
        thread.start()
    }

    /// The child's stdout pipe, and its stderr pipe unless `mergingStderr` (then `[-1, -1]`),
    /// close-on-exec.
    private static func makePipes(mergingStderr: Bool) throws -> (out: [Int32], err: [Int32]) {
        guard let pipe2 = Self.pipe2 else { throw POSIXError(.ENOSYS) }
        var out: [Int32] = [-1, -1]
        var err: [Int32] = [-1, -1]
        guard pipe2(&out, O_CLOEXEC) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        if !mergingStderr {
            guard pipe2(&err, O_CLOEXEC) == 0 else {
                close(out[0])
                close(out[1])
                throw POSIXError(.init(rawValue: errno) ?? .EIO)
            }
        }
        return (out, err)
    }

    /// Its own process group (so a kill reaches its children too), no blocked signals, and the
    /// signals a shell would leave at their defaults (this process ignores SIGPIPE).
    private static func setGroupAndSignals(_ attributes: inout posix_spawnattr_t) {
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for sig in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT] { sigaddset(&defaults, sig) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    }

    /// Reads both pipes and polls for the exit; ends when the child has exited and its output
    /// is read to the end, or `grace` seconds after the exit if something else still holds a
    /// pipe open.
    ///
    /// The exit is seen without reaping the child (`waitid` with `WNOWAIT`), and the child is
    /// reaped only once `done` is set, under the lock that ``signal(_:)`` and ``killGroup()``
    /// send under: until then the zombie keeps its pid, so a kill can reach no other process.
    /// A pid reaped while a kill may still follow can be handed to another process, made the
    /// leader of a group with that number (pids wrap at 32768 here).
    private static func watch(_ pid: pid_t, _ outFd: Int32, _ errFd: Int32, _ grace: Double, _ state: Locked<State>) {
        var fds = [pollfd(fd: outFd, events: Int16(POLLIN), revents: 0)]
        if errFd >= 0 { fds.append(pollfd(fd: errFd, events: Int16(POLLIN), revents: 0)) }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var exitedAt: Date?
        while true {
            _ = poll(&fds, nfds_t(fds.count), 20)
            for i in fds.indices where fds[i].fd >= 0 && fds[i].revents != 0 {
                let n = read(fds[i].fd, &buffer, buffer.count)
                if n > 0 {
                    let chunk = Data(buffer[0..<n])
                    let isOut = fds[i].fd == outFd
                    state.withLock { if isOut { $0.out.append(chunk) } else { $0.err.append(chunk) } }
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    close(fds[i].fd)
                    fds[i].fd = -1
                }
            }
            if exitedAt == nil, let status = exitStatus(pid) {
                state.withLock { $0.status = status }
                exitedAt = Date()
            }
            let outputEnded = fds.allSatisfy { $0.fd < 0 }
            if let exitedAt, outputEnded || Date().timeIntervalSince(exitedAt) > grace { break }
        }
        for fd in fds where fd.fd >= 0 { close(fd.fd) }
        state.withLock { $0.done = true }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0, errno == EINTR {}
    }

    /// As Foundation reports it: the exit code, or the number of the fatal signal; nil while the
    /// child runs. The child stays a zombie (not reaped). -1 if it is not this process's child
    /// any more (something else reaped it): then it is gone too, and its pid is not ours.
    private static func exitStatus(_ pid: pid_t) -> Int32? {
        var info = siginfo_t()
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else {
            return errno == ECHILD ? -1 : nil
        }
        guard info._sifields._sigchld.si_pid == pid else { return nil }
        return info._sifields._sigchld.si_status
    }

    /// Whether the child has not exited yet (known within 20 ms of its exit).
    public var isRunning: Bool { state.withLock { $0.status == nil } }

    /// The exit code, or the number of the signal that ended it; nil while it runs.
    public var status: Int32? { state.withLock { $0.status } }

    /// What it wrote to stdout so far.
    public var stdout: Data { state.withLock { $0.out } }

    /// What it wrote to stderr so far.
    public var stderr: Data { state.withLock { $0.err } }

    /// The first executable `tool` on `PATH`, or nil.
    static func which(_ tool: String) -> String? {
        (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":")
            .map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Sends `sig` to the child (nothing once it has been reaped; see `watch`).
    public func signal(_ sig: Int32) { state.withLock { if !$0.done { _ = kill(pid, sig) } } }

    /// SIGKILLs the child's whole process group (the child and whatever it started).
    public func killGroup() { state.withLock { if !$0.done { _ = kill(-pid, SIGKILL) } } }

    /// Waits until it exits and its output is read, killing its process group after `timeout`
    /// seconds. Returns the status, or nil if it still had not ended 10 s after the kill.
    public func finish(timeout: Double = 60) async -> Int32? {
        let ended = { self.state.withLock { $0.done } }
        if await !eventually(timeout: timeout, ended) {
            state.withLock { $0.timedOut = true }
            killGroup()
            _ = await eventually(timeout: 10, ended)
        }
        return status
    }

    /// Whether ``finish(timeout:)`` killed it when its time was up.
    public var timedOut: Bool { state.withLock { $0.timedOut } }

    private typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias ChangeDirectory =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    /// pipe2(2), not in Swift's Glibc module.
    private static let pipe2: Pipe2? = cSymbol("pipe2")
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), not in Swift's Glibc module.
    private static let closeFrom: CloseFrom? = cSymbol("posix_spawn_file_actions_addclosefrom_np")
    /// glibc's `posix_spawn_file_actions_addchdir_np` (2.29+).
    private static let chdir: ChangeDirectory? = cSymbol("posix_spawn_file_actions_addchdir_np")

}
