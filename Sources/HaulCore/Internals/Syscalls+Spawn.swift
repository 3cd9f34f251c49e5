#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Starting a daemon: `haul get --background` starts `haul serve` when none runs.
extension Sys {
    /// Starts this very program (`/proc/self/exe`) with `arguments` in a session of its own
    /// (no controlling terminal: Ctrl-C in the shell that started it does not reach it), stdin
    /// from /dev/null, stdout and stderr appended to `log` (created 0600), no other descriptor
    /// of this process, the signal mask and dispositions reset, in `/`. Its pid; the caller does not
    /// wait for it (`hasExited` looks without waiting).
    package static func spawnSelf(_ arguments: [String], log: String) throws(Errno) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        if let closeFrom: CloseFrom = symbol("posix_spawn_file_actions_addclosefrom_np") { _ = closeFrom(&actions, 3) }
        // In `/`, as daemons are: the directory it was started from stays free to unmount.
        if let chdir: ChangeDirectory = symbol("posix_spawn_file_actions_addchdir_np") { _ = chdir(&actions, "/") }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for sig in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD] { sigaddset(&defaults, sig) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) | Self.setSession)
        let argv = (["haul"] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, "/proc/self/exe", &actions, &attributes, argv, environ)
        guard rc == 0 else { throw Errno(rc) }
        return child
    }

    /// Whether child `pid` has exited (it is reaped if so); false while it runs, and when it
    /// cannot be told (SIGCHLD ignored: children are reaped unseen).
    package static func hasExited(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == pid
    }

    /// glibc's `POSIX_SPAWN_SETSID` (2.26+), which Swift's Glibc module does not import.
    private static let setSession: Int16 = 0x80
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+): without it, descriptors
    /// opened close-on-exec (all of haul's) still do not reach the child.
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    /// glibc's `posix_spawn_file_actions_addchdir_np` (2.29+).
    private typealias ChangeDirectory =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    private static func symbol<T>(_ name: String) -> T? {
        guard let pointer = dlsym(dlopen(nil, RTLD_NOW), name) else { return nil }
        return unsafeBitCast(pointer, to: T.self)
    }
}
