#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Calls `onChange` whenever the kernel reports a link, address or route change, from an
/// rtnetlink socket watched by one thread that sleeps in poll(2) (no polling loop).
///
/// A burst of messages (a route add sends several) wakes the thread once per read, and the
/// socket is drained before `onChange` runs, so a reader re-reads the state once per burst. An
/// overflowing socket (ENOBUFS) counts as a change too.
package final class RouteEvents: Sendable {
    private let socket: Int32
    private let wake: (read: Int32, write: Int32)
    private let stopped = Locked(false)
    private let done = OneShot<Void>()

    /// Starts watching; nil when rtnetlink is not available (not Linux, or a sandbox without
    /// netlink sockets): callers fall back to re-reading the state periodically.
    package init?(onChange: @escaping @Sendable () -> Void) {
        guard let socket = try? Sys.openRouteEvents() else { return nil }
        guard let pipe = try? Sys.makePipe() else {
            Sys.close(socket)
            return nil
        }
        self.socket = socket
        self.wake = (pipe.0, pipe.1)
        Sys.startThread(name: "haul.routes") { [socket, wake, stopped, done] in
            while !stopped.get() {
                let ready = Sys.waitReadable([socket, wake.read])
                if ready.contains(wake.read) || stopped.get() { break }
                if ready.contains(socket) {
                    Sys.drain(socket)
                    onChange()
                }
            }
            Sys.close(socket)
            Sys.close(wake.read)
            Sys.close(wake.write)
            done.fulfill(())
        }
    }

    /// Stops the thread and closes the socket (idempotent).
    package func stop() {
        // Poked under the lock: the thread closes the pipe only after it has seen `stopped`,
        // so the write never meets a closed (or reused) descriptor.
        stopped.withLock { s in
            guard !s else { return }
            s = true
            Sys.poke(wake.write)
        }
    }

    /// Waits until the thread has exited.
    package func finished() async { await done.value() }

    deinit { stop() }
}
