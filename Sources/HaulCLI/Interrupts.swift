import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Turns SIGINT/SIGTERM/SIGHUP into a clean cancel: the first signal asks running downloads to
/// stop (they checkpoint their partial files); a second one exits at once with 130. The first
/// stays in force: a handler registered after it (the next download of a list) runs at once.
///
/// SIGHUP (a closed terminal, a dropped ssh session) would otherwise kill the process with up to
/// a second of written bytes not yet in the record. A SIGHUP ignored when haul started (`nohup`)
/// stays ignored: the user asked for the download to outlive the terminal.
/// Unchecked Sendable: `sources` is filled in `init`; the other vars are touched only under `lock`.
final class Interrupts: @unchecked Sendable {
    private let lock = NSLock()
    private var handlers: [Int: @Sendable () -> Void] = [:]
    private var next = 0
    private var count = 0
    private var sources: [DispatchSourceSignal] = []

    private static let queue = DispatchQueue(label: "haul.signals")

    /// Takes over `signals` (tests pass none and call ``fire()``).
    init(signals: [Int32] = [SIGINT, SIGTERM, SIGHUP]) {
        for sig in signals {
            let previous = signal(sig, SIG_IGN)
            if sig == SIGHUP, Self.isIgnore(previous) { continue }
            // A queue of its own: the global one also runs the file worker's blocking jobs.
            let source = DispatchSource.makeSignalSource(signal: sig, queue: Self.queue)
            source.setEventHandler { [unowned self] in fire() }
            source.resume()
            sources.append(source)
        }
    }

    /// Whether a disposition `signal(2)` returned is SIG_IGN.
    private static func isIgnore(_ handler: __sighandler_t?) -> Bool {
        guard let handler else { return false }
        return unsafeBitCast(handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// A signal arrived.
    func fire() {
        let (all, n) = lock.withLock { () -> ([@Sendable () -> Void], Int) in
            count += 1
            return (Array(handlers.values), count)
        }
        if n > 1 { exit(ExitCode.interrupted.rawValue) }
        for h in all { h() }
    }

    /// Registers `handler` for the first signal; runs it at once if that signal came already.
    func onInterrupt(_ handler: @escaping @Sendable () -> Void) -> Int {
        let (token, signalled) = lock.withLock { () -> (Int, Bool) in
            next += 1
            handlers[next] = handler
            return (next, count > 0)
        }
        if signalled { handler() }
        return token
    }

    func remove(_ token: Int) { _ = lock.withLock { handlers.removeValue(forKey: token) } }
}
