import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Turns SIGINT/SIGTERM into a clean cancel: the first signal asks running downloads to stop
/// (they checkpoint their partial files); a second one exits at once with 130.
final class Interrupts: @unchecked Sendable {
    private let lock = NSLock()
    private var handlers: [Int: @Sendable () -> Void] = [:]
    private var next = 0
    private var count = 0
    private var sources: [DispatchSourceSignal] = []

    init() {
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [unowned self] in fire() }
            source.resume()
            sources.append(source)
        }
    }

    private func fire() {
        let (all, n) = lock.withLock { () -> ([@Sendable () -> Void], Int) in
            count += 1
            return (Array(handlers.values), count)
        }
        if n > 1 { exit(ExitCode.interrupted.rawValue) }
        for h in all { h() }
    }

    func onInterrupt(_ handler: @escaping @Sendable () -> Void) -> Int {
        lock.withLock {
            next += 1
            handlers[next] = handler
            return next
        }
    }

    func remove(_ token: Int) { _ = lock.withLock { handlers.removeValue(forKey: token) } }
}
