import CHaulCurl
import Synchronization
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The Linux default transport: libcurl's multi interface driven by one thread.
///
/// All transfers share one `curl_multi` handle and one thread, which runs `curl_multi_perform`
/// and `curl_multi_poll`; other threads talk to it through a command queue and
/// `curl_multi_wakeup`. Body bytes go straight from curl's receive buffer to the handler (which
/// pwrite()s them), with real flow control: a handler that returns `.pause` makes the callback
/// return `CURL_WRITEFUNC_PAUSE`, and `resume()` calls `curl_easy_pause(CONT)`.
/// Unchecked Sendable: `active` is the curl thread's alone; other threads use the command queue.
package final class CurlTransport: HTTPTransport, @unchecked Sendable {
    /// The process-wide instance, or the reason libcurl could not be loaded.
    package static let shared: Result<CurlTransport, TransportError> = {
        do throws(TransportError) { return .success(try CurlTransport()) } catch { return .failure(error) }
    }()

    /// Receive buffer per transfer. 16 KiB (curl's default) costs ~40% wall time on fast links.
    static let bufferSize = 512 * 1024

    private enum Command {
        case add(CurlTransfer)
        case pause(CurlTransfer)
        case resume(CurlTransfer)
        case cancel(CurlTransfer)
    }

    /// Commands for the multi thread, and whether it sleeps in poll (then a command wakes it).
    private struct Inbox {
        var commands: [Command] = []
        var polling = false
    }

    private let multi: UnsafeMutableRawPointer
    private let inbox = Locked(Inbox())
    // Owned by the multi thread.
    private var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    /// Handles of finished transfers, reset, for the next ones (libcurl's advice): a new one is
    /// a curl_easy_init per transfer, a tenth of the curl thread's own work for a small file.
    /// (libcurl 7.88 still allocates the receive buffer, ``bufferSize``, per transfer.)
    private var idleHandles: [UnsafeMutableRawPointer] = []
    /// The most handles kept idle.
    private static let idleHandleLimit = 32
    /// Transfers that ran on a kept handle, and handles not kept because they refused a
    /// transfer's settings after their reset (for tests).
    private let reusedHandles = Atomic<Int>(0)
    private let refusedHandles = Atomic<Int>(0)
    package var reusedHandleCount: Int { reusedHandles.load(ordering: .relaxed) }
    package var refusedHandleCount: Int { refusedHandles.load(ordering: .relaxed) }
    /// The longest the multi thread sleeps in poll with nothing due, in milliseconds.
    private let idlePollMilliseconds: Int32

    /// - Parameter idlePoll: the longest the transfer thread sleeps with nothing due (a command
    ///   wakes it at once); a test of the wake-up makes it long, so that a lost one shows.
    package init(idlePoll: Double = 1) throws(TransportError) {
        idlePollMilliseconds = Int32(max(1, min(3_600_000, (idlePoll * 1000).rounded())))
        var err = [CChar](repeating: 0, count: 512)
        guard haul_curl_load(&err, err.count) == 0 else {
            throw TransportError(.other, String(nulTerminated: err))
        }
        guard let m = haul_multi_init() else { throw TransportError(.other, "curl_multi_init failed") }
        multi = m
        // No HTTP/2 multiplexing (CURLPIPE_NOTHING; libcurl's default is CURLPIPE_MULTIPLEX): every
        // transfer on the wire has a connection of its own. Multiplexed, the ranges of a segmented
        // download would be streams of one connection, which a per-connection limit shapes as
        // one, and --max-connections-per-host would count streams. HTTP/2 itself stays, one
        // stream per connection, reused when idle.
        _ = haul_multi_setopt_long(m, Int32(HAUL_CURLMOPT_PIPELINING), 0)
        Sys.startThread(name: "haul.curl") { [unowned self] in self.run() }
    }

    /// libcurl's version string.
    package static var version: String {
        guard case .success = shared else { return "libcurl (not loaded)" }
        return String(cString: haul_curl_version())
    }

    package func start(_ request: TransportRequest, handler: any TransportHandler) -> any TransportTask {
        let transfer = CurlTransfer(request: request, handler: handler, transport: self)
        submit(.add(transfer))
        return transfer
    }

    func pause(_ t: CurlTransfer) { submit(.pause(t)) }
    func resume(_ t: CurlTransfer) { submit(.resume(t)) }
    func cancel(_ t: CurlTransfer) { submit(.cancel(t)) }

    /// Queues a command; wakes the multi thread only when it sleeps in poll (a wake-up is a
    /// write to curl's socket pair and a read on the other side: two syscalls per command when
    /// the thread was busy anyway, as with a thousand small downloads).
    private func submit(_ command: Command) {
        let sleeping = inbox.withLock { inbox -> Bool in
            inbox.commands.append(command)
            defer { inbox.polling = false }
            return inbox.polling
        }
        if sleeping { _ = haul_multi_wakeup(multi) }
    }

    private func run() {
        var running: Int32 = 0
        var numfds: Int32 = 0
        while true {
            let batch = inbox.withLock { inbox -> [Command] in
                defer { inbox.commands = [] }
                return inbox.commands
            }
            for command in batch { handle(command) }
            // Transfers paused by their rate limit continue when their time comes, the one that
            // has waited longest first: an unpaused transfer takes its chunk at once, so the first
            // in line gets the budget and the others wait again. In the table's order the same
            // transfer would come first every time, and downloads sharing --max-overall-rate
            // would finish one after another, the last one getting nothing until then.
            let now = monotonicSeconds()
            var due: [(UnsafeMutableRawPointer, CurlTransfer)] = []
            for (easy, t) in active where t.paceUntil.map({ $0 <= now }) == true { due.append((easy, t)) }
            if due.count > 1 { due.sort { ($0.1.waitingSince ?? now) < ($1.1.waitingSince ?? now) } }
            for (easy, t) in due {
                t.paceUntil = nil
                if t.lastActivity != nil { t.lastActivity = now }  // the wait was ours
                _ = haul_easy_pause(easy, Int32(HAUL_CURLPAUSE_CONT))
            }
            _ = haul_multi_perform(multi, &running)
            var easy: UnsafeMutableRawPointer?
            var code: Int32 = 0
            while haul_multi_info_read_done(multi, &easy, &code) == 1, let e = easy {
                finish(e, code: code)
            }
            // After curl has read what arrived: a process that was not scheduled for a while
            // (a loaded machine, SIGSTOP) finds the bytes that came meanwhile, and does not take
            // its own absence for the server's silence.
            expireStalled(at: now)
            // Wake for the next paced transfer to go on, or the next one that would stall.
            var next: Double?
            for t in active.values {
                if let at = t.paceUntil ?? t.stallDeadline { next = min(next ?? at, at) }
            }
            let longest = idlePollMilliseconds
            let wait =
                next.map { max(0, min(longest, Int32((($0 - monotonicSeconds()) * 1000).rounded(.up)))) } ?? longest
            // Sleep only with no command waiting; one that arrives from here on wakes the poll.
            let idle = inbox.withLock { inbox -> Bool in
                inbox.polling = inbox.commands.isEmpty
                return inbox.polling
            }
            guard idle else { continue }
            _ = haul_multi_poll(multi, wait, &numfds)
            inbox.withLock { $0.polling = false }
        }
    }

    private func handle(_ command: Command) {
        switch command {
        case .add(let t):
            if t.cancelRequested.load(ordering: .acquiring) {
                t.complete(.failure(TransportError(.cancelled, "cancelled")))
                return
            }
            if let refusal = t.refusal() {
                t.complete(.failure(refusal))
                return
            }
            // `haul doctor`'s report wants a handshake of its own: a kept handle holds the TLS
            // sessions of its earlier transfers (libcurl 7.88 caches them per handle), and a
            // resumed one stands on an earlier handshake's checks.
            let kept = t.request.reportsConnection ? nil : idleHandles.popLast()
            var made = t.makeEasyHandle(reusing: kept)
            var reused = kept != nil
            if case .failure = made, kept != nil {
                made = t.makeEasyHandle()  // a kept handle refused an option: a new one
                reused = false
            }
            switch made {
            case .success(let easy):
                if reused { reusedHandles.add(1, ordering: .relaxed) }
                active[easy] = t
                _ = haul_multi_add_handle(multi, easy)
            case .failure(let error):
                t.complete(.failure(error))
            }
        case .pause(let t):
            if let easy = t.easy, active[easy] != nil {
                t.paused = true  // no stall while paused
                _ = haul_easy_pause(easy, 1 /* CURLPAUSE_RECV */)
            }
        case .resume(let t):
            if let easy = t.easy, active[easy] != nil {
                t.paused = false
                if t.lastActivity != nil { t.lastActivity = monotonicSeconds() }  // the wait was ours
                _ = haul_easy_pause(easy, Int32(HAUL_CURLPAUSE_CONT))
            }
        case .cancel(let t):
            guard let easy = t.easy else { return }
            end(easy) { _ in .failure(TransportError(.cancelled, "cancelled")) }
        }
    }

    /// Ends the transfers that have had no byte for their idle timeout since their answer began.
    /// curl's own low-speed check (kept for the wait before the first byte) averages over its
    /// last 5 s, so it sees a stall after a burst 5-6 s late. Paused transfers (by their consumer
    /// or a rate limit) wait on us, not on the server: their clock restarts when they go on.
    private func expireStalled(at now: Double) {
        var stalled: [UnsafeMutableRawPointer] = []
        for (easy, t) in active where t.stallDeadline.map({ $0 <= now }) == true { stalled.append(easy) }
        for easy in stalled {
            end(easy) {
                .failure(TransportError(.idleTimeout, "no data for \(Seconds.text($0.request.idleTimeout)) s"))
            }
        }
    }

    private func finish(_ easy: UnsafeMutableRawPointer, code: Int32) {
        end(easy) { $0.result(code: code) }
    }

    /// Takes an active transfer off the multi handle and completes it with `result` (read
    /// before the handle is cleaned up).
    private func end(
        _ easy: UnsafeMutableRawPointer, with result: (CurlTransfer) -> Result<Void, TransportError>
    ) {
        guard let t = active.removeValue(forKey: easy) else { return }
        _ = haul_multi_remove_handle(multi, easy)
        let outcome = result(t)
        if idleHandles.count < Self.idleHandleLimit {
            if Self.resetForReuse(easy) {
                idleHandles.append(easy)
                t.detach()
            } else {
                refusedHandles.add(1, ordering: .relaxed)
                t.cleanup()
            }
        } else {
            t.cleanup()
        }
        t.complete(outcome)
    }

    /// Resets a finished transfer's handle for the next one (no option, credential or callback
    /// of this transfer reaches it) and says whether it takes a transfer's settings again. One
    /// whose transfer failed before connecting (a URL libcurl rejects, a name that does not
    /// resolve) keeps libcurl 7.88's receive buffer through the reset, and then refuses
    /// ``bufferSize`` with CURLE_BAD_FUNCTION_ARGUMENT: it is not kept.
    private static func resetForReuse(_ easy: UnsafeMutableRawPointer) -> Bool {
        haul_easy_reset(easy)
        return haul_easy_setopt_long(easy, Int32(HAUL_CURLOPT_BUFFERSIZE), bufferSize) == 0
    }
}

let curlWriteCallback: haul_curl_data_cb = { ptr, size, count, userdata in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.onBody(UnsafeRawBufferPointer(start: ptr, count: size * count))
}

let curlReadCallback: haul_curl_data_cb = { ptr, size, count, userdata in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.onRead(UnsafeMutableRawBufferPointer(start: ptr, count: size * count))
}

let curlHeaderCallback: haul_curl_data_cb = { ptr, size, count, userdata in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.onHeaderLine(UnsafeRawBufferPointer(start: ptr, count: size * count))
}
