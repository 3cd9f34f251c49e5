import Dispatch
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Turns SIGINT/SIGTERM/SIGHUP into a clean cancel: the first signal asks running downloads to
/// stop (they checkpoint their partial files); a Ctrl-C after it exits at once with 130. A
/// repeated SIGHUP or SIGTERM does not (a closed terminal sends its jobs a hangup from the shell
/// and another from the kernel; a supervisor repeats its SIGTERM). The first stays in force: a
/// handler registered after it (the next download of a list) runs at once.
///
/// SIGHUP (a closed terminal, a dropped ssh session) would otherwise kill the process with up to
/// a second of written bytes not yet in the record. A signal ignored when haul started stays
/// ignored: a SIGHUP under `nohup`, a SIGINT of a job a script put in the background.
///
/// The handler is a real one (`sigaction`), installed at the top of `main` (``listen()``): it
/// writes the signal's number to a pipe, and one thread reads the pipe and acts. A caught signal
/// is delivered to some thread that does not block it, so none is discarded. Rejected: SIG_IGN
/// plus a Dispatch signal source (a signal sent while the source is being armed is discarded:
/// a Ctrl-C in the first moments of a run went unseen), and blocking the signals for `sigwait`
/// (the main thread waits in `sigsuspend` with nothing blocked, so the signal's default action
/// ends the process there). A signal that comes before a command has made its ``Interrupts``
/// has its default effect, and so does every signal when no pipe could be made.
final class Interrupts: Sendable {
    private struct Registry {
        var handlers: [Int: @Sendable () -> Void] = [:]
        var next = 0
        var count = 0
    }
    private let registry = Mutex(Registry())

    /// The instance the signal thread reports to, once a command has made one.
    private static let receiver = Mutex<Interrupts?>(nil)

    /// Takes over the signals ``listen()`` catches (tests pass false and call ``fire()``).
    init(takingSignals: Bool = true) {
        guard takingSignals else { return }
        Self.listen()
        Self.receiver.withLock { $0 = self }
    }

    /// Catches SIGINT, SIGTERM and SIGHUP (those not ignored at start) and starts the thread that
    /// acts on them. Once per process; the earlier the better.
    static func listen() { _ = started }

    /// The signals ``listen()`` catches (unless ignored when haul started).
    static let caught: [Int32] = [SIGINT, SIGTERM, SIGHUP]

    /// The pipe's write end, for the signal handler (which may only make async-signal-safe calls).
    nonisolated(unsafe) private static var signalPipe: Int32 = -1

    private static let started: Bool = {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return false }
        for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        // A full pipe (signals nobody reads) must not hold the handler: the write end never blocks.
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        signalPipe = ends[1]
        for sig in caught {
            var current = sigaction()
            sigaction(sig, nil, &current)
            if isIgnore(current) { continue }
            var action = sigaction()
            setHandler(&action) { sig in
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: sig)
                _ = write(Interrupts.signalPipe, &byte, 1)
                errno = saved
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(sig, &action, nil)
        }
        let readEnd = ends[0]
        // A serial queue of its own gets a thread of its own, which this loop keeps for life.
        DispatchQueue(label: "haul.signals").async {
            var byte: UInt8 = 0
            while true {
                let n = read(readEnd, &byte, 1)
                if n < 0, errno == EINTR { continue }
                guard n == 1 else { return }
                if let receiver = receiver.withLock({ $0 }) {
                    receiver.fire(Int32(byte))
                } else {
                    endByDefault(Int32(byte))
                }
            }
        }
        return true
    }()

    /// What `sig` does to a program that does not handle it: the process ends by that signal
    /// (the shell sees an interrupted command, not an exit code).
    private static func endByDefault(_ sig: Int32) -> Never {
        signal(sig, SIG_DFL)
        // The reader runs on a Dispatch thread, and Dispatch threads block signals: raise()
        // would leave it pending there and the exit below would end the process with 130.
        var only = sigset_t()
        sigemptyset(&only)
        sigaddset(&only, sig)
        pthread_sigmask(SIG_UNBLOCK, &only, nil)
        raise(sig)
        HaulCLI.leave(128 + sig)
    }

    private static func setHandler(_ action: inout sigaction, _ handler: @escaping @convention(c) (Int32) -> Void) {
        #if canImport(Glibc)
            action.__sigaction_handler.sa_handler = handler
        #else
            action.__sigaction_u.__sa_handler = handler
        #endif
    }

    /// Whether `action` ignores its signal.
    private static func isIgnore(_ action: sigaction) -> Bool {
        #if canImport(Glibc)
            let handler = action.__sigaction_handler.sa_handler
        #else
            let handler = action.__sigaction_u.__sa_handler
        #endif
        guard let handler else { return false }
        return unsafeBitCast(handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// Signal `sig` arrived.
    func fire(_ sig: Int32 = SIGINT) {
        let (all, n) = registry.withLock { r -> ([@Sendable () -> Void], Int) in
            r.count += 1
            return (Array(r.handlers.values), r.count)
        }
        if n > 1 {
            // Straight out, not even a flush: another thread may hold standard output's lock
            // while it waits on a full pipe or a stopped terminal.
            if sig == SIGINT { _exit(ExitCode.interrupted.rawValue) }
            return  // a repeated hangup or termination: the first is being acted on
        }
        for h in all { h() }
    }

    /// Registers `handler` for the first signal; runs it at once if that signal came already.
    func onInterrupt(_ handler: @escaping @Sendable () -> Void) -> Int {
        let (token, signalled) = registry.withLock { r -> (Int, Bool) in
            r.next += 1
            r.handlers[r.next] = handler
            return (r.next, r.count > 0)
        }
        if signalled { handler() }
        return token
    }

    func remove(_ token: Int) { _ = registry.withLock { $0.handlers.removeValue(forKey: token) } }
}
