import CHaulCurl
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The system calls that go through the seam, named for fault injection.
package enum Syscall: String, Sendable {
    case open, close, pwrite, pread, read, fsync, syncfs, ftruncate, rename, link, unlink, mkdir, stat, opendir
}

/// Fault injection for tests: a hook consulted before each call through the seam.
///
/// The hook gets the call, for `pwrite` the number of bytes about to be written, and the path
/// when the caller knows it; returning an `Errno` makes the call fail with it. Debug builds also
/// read `HAUL_INJECT_ENOSPC_AFTER=N` from the environment (the first `pwrite` that crosses N
/// bytes fails with ENOSPC), so tests can inject a full disk into a spawned `haul` process.
package enum FaultInjection {
    package typealias Hook = @Sendable (Syscall, Int, String?) -> Errno?
    /// The hooks by id; tests that run at the same time each add their own (filtering by path).
    private static let hooks = Locked<(next: Int, all: [Int: Hook])>((1, environmentHook().map { [0: $0] } ?? [:]))

    /// Adds a hook for this process; returns the id that ``remove(_:)`` takes.
    @discardableResult
    package static func add(_ hook: @escaping Hook) -> Int {
        hooks.withLock { hooks in
            defer { hooks.next += 1 }
            hooks.all[hooks.next] = hook
            return hooks.next
        }
    }

    /// Removes the hook `add` returned `id` for.
    package static func remove(_ id: Int) { hooks.withLock { _ = $0.all.removeValue(forKey: id) } }

    /// Whether any hook is in place (one may hold a call, as a slow disk would).
    package static var isActive: Bool { hooks.withLock { !$0.all.isEmpty } }

    /// The first error a hook gives for this call, if any.
    static func check(_ call: Syscall, _ count: Int = 0, path: String? = nil) -> Errno? {
        let all = hooks.withLock { $0.all }
        if all.isEmpty { return nil }
        for id in all.keys.sorted() { if let error = all[id]!(call, count, path) { return error } }
        return nil
    }

    private static func environmentHook() -> Hook? {
        #if DEBUG
            guard let value = getenv("HAUL_INJECT_ENOSPC_AFTER"), let limit = Int(String(cString: value)) else {
                return nil
            }
            let written = Atomic<Int>(0)
            let fired = Atomic<Bool>(false)
            return { call, count, _ in
                guard call == .pwrite else { return nil }
                let before = written.add(count, ordering: .relaxed).oldValue
                guard before + count > limit else { return nil }
                // Fail once, as a disk that filled up and then had space freed.
                return fired.exchange(true, ordering: .relaxed) ? nil : .noSpace
            }
        #else
            return nil
        #endif
    }
}

/// A log of the writes and syncs that go through the seam, for simulating a power loss in a
/// spawned `haul` (tests): debug builds with `HAUL_WRITE_LOG=FILE` append one line per event,
/// `W offset count path` after a positional write, `B path` before and `S path` after an fsync,
/// `R durable hex path` after a record was put in place (its bytes, in hex). A test then drops
/// what was never synced (docs/resume-record.md, "Power loss"). A file the ``FileWorker`` commits
/// on tmpfs or ramfs is never synced (its fsync would do nothing), so it has no `S` line: a
/// power loss after a commit is simulated in a disk's directory.
package enum WriteLog {
    #if DEBUG
        private static let fd: Int32? = {
            guard let value = getenv("HAUL_WRITE_LOG") else { return nil }
            let fd = open(String(cString: value), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            return fd >= 0 ? fd : nil
        }()
    #endif

    static func hex(_ bytes: [UInt8]) -> String { Hex.string(bytes) }

    static func log(_ line: @autoclosure () -> String) {
        #if DEBUG
            guard let fd else { return }
            let text = line() + "\n"
            _ = text.withCString { write(fd, $0, strlen($0)) }
        #endif
    }
}
