import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `-j` with no live display (`-q`, `--json`): each URL is first tried the express way
/// (``HaulSession/startExpress(_:into:options:saving:completion:)``, docs/small-downloads.md), which
/// saves a small file without a task or a manager's item; one it declines goes to the run's
/// ``DownloadManager`` as every URL does otherwise. At most `-j` downloads transfer at once,
/// express and managed together. An express download whose transfer has ended frees its place
/// while its file is saved, so the next request does not wait for a sync. No URL starts while
/// `-j` files wait for their save, unless they are fewer than four times `-j` and hold less than
/// 1 MiB a job in all: a disk syncs the small files of a group together, and a few more bodies
/// of that size cost little. A save that declines waits for a place before the manager takes it.
final class ExpressFeed: Sendable {
    private struct State {
        /// The next URL to start.
        var next = 0
        /// Express downloads started and not transferred.
        var transferring: Set<Int> = []
        /// Express downloads transferred whose file is being saved, with its size.
        var saving: [Int: Int] = [:]
        /// The sizes in `saving`, added up.
        var savingBytes = 0
        /// Saves that declined, with their options, waiting for a place to go to the manager.
        var declinedSaves: [Int: DownloadOptions] = [:]
        /// URLs handed to the manager and not finished.
        var managed = 0
        var stopped = false
        /// The URLs started and not finished here (transferring, saving, declined or being handed
        /// over), and the express downloads among them (for a stop).
        var live: Set<Int> = []
        var handles: [Int: ExpressDownload] = [:]
        /// Whether a thread is starting URLs, and whether it should look again: a start can end
        /// at once (and start the next), which must not recurse.
        var pumping = false
        var again = false
        var fed: CheckedContinuation<Void, Never>?
        var isFed = false

        /// Whether one more download may transfer: not stopped, and fewer than `jobs` transfer,
        /// express and managed together.
        func hasPlace(jobs: Int) -> Bool { !stopped && transferring.count + managed < jobs }

        /// Whether the files waiting for their save leave room for one more download: fewer
        /// than `jobs` of them, whatever their sizes, or fewer than four times `jobs` holding
        /// less than 1 MiB a job in all (a disk's sync takes a group of small files at once).
        func savesLeaveRoom(jobs: Int) -> Bool {
            saving.count < jobs || (saving.count < 4 * jobs && savingBytes < jobs << 20)
        }

        /// URL `index`'s save has begun, of `bytes`.
        mutating func beginSave(_ index: Int, bytes: Int) {
            transferring.remove(index)
            if let old = saving.updateValue(bytes, forKey: index) { savingBytes -= old }
            savingBytes += bytes
        }

        /// URL `index`'s save has ended; false when it was not saving.
        @discardableResult
        mutating func endSave(_ index: Int) -> Bool {
            guard let bytes = saving.removeValue(forKey: index) else { return false }
            savingBytes -= bytes
            return true
        }
    }

    private let count: Int
    private let jobs: Int
    /// Starts URL `index` the express way, given what to call when its save begins and when it
    /// ends; nil where it takes the manager at once.
    private let express:
        @Sendable (Int, @escaping @Sendable (Int) -> Void, @escaping @Sendable (HaulSession.ExpressEnd) -> Void) ->
            ExpressDownload?
    /// Hands URL `index` to the manager, with the options of a declined express download (nil:
    /// the URL's own); the closure given is called when it has finished.
    private let manage: @Sendable (Int, DownloadOptions?, @escaping @Sendable () -> Void) -> Void
    /// Reports an express download's result.
    private let saved: @Sendable (Int, DownloadResult, DownloadStart) -> Void
    private let state = Shared(State())

    init(
        count: Int, jobs: Int,
        express:
            @escaping @Sendable (
                Int, @escaping @Sendable (Int) -> Void, @escaping @Sendable (HaulSession.ExpressEnd) -> Void
            )
            -> ExpressDownload?,
        manage: @escaping @Sendable (Int, DownloadOptions?, @escaping @Sendable () -> Void) -> Void,
        saved: @escaping @Sendable (Int, DownloadResult, DownloadStart) -> Void
    ) {
        self.count = count
        self.jobs = max(1, jobs)
        self.express = express
        self.manage = manage
        self.saved = saved
    }

    /// Starts as many URLs as `-j` allows, and more as they end; returns once every URL has
    /// ended the express way or been handed to the manager (or, after ``stop()``, once no express
    /// download runs).
    func run() async {
        pump()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.isFed { return true }
                s.fed = c
                return false
            }
            if now { c.resume() }
        }
    }

    /// Saves that declined and wait for a place (tests).
    var declinedSavesWaiting: Int { state.withLock { $0.declinedSaves.count } }

    /// Ctrl-C: no URL starts any more, and the express downloads stop (they leave nothing).
    func stop() {
        let (handles, declined) = state.withLock { s -> ([ExpressDownload], [Int: DownloadOptions]) in
            s.stopped = true
            return (Array(s.handles.values), s.declinedSaves)
        }
        for handle in handles { handle.cancel() }
        for (index, options) in declined {
            options.prefetched?.drop()
            finish(index)
        }
        pump()
    }

    private func pump() {
        let mine = state.withLock { s -> Bool in
            if s.pumping {
                s.again = true
                return false
            }
            s.pumping = true
            return true
        }
        guard mine else { return }
        repeat {
            while let (index, options) = takeDeclinedSave() { handOver(index, options: options) }
            while let index = take() {
                if let handle = express(
                    index, { [self] in saving(index, bytes: $0) }, { [self] end in ended(index, end) })
                {
                    let stopped = state.withLock { s -> Bool in
                        if s.live.contains(index) { s.handles[index] = handle }
                        return s.stopped
                    }
                    if stopped { handle.cancel() }  // a stop that came while it was started
                } else {
                    handOver(index, options: nil)
                }
            }
        } while state.withLock { s -> Bool in
            defer { s.again = false }
            if !s.again { s.pumping = false }
            return s.again
        }
        let fed = state.withLock { s -> CheckedContinuation<Void, Never>? in
            // `live`, not the sets: a URL leaves it only once the manager has it (`handOver`).
            guard !s.isFed, s.live.isEmpty, s.stopped || s.next == count else { return nil }
            s.isFed = true
            defer { s.fed = nil }
            return s.fed
        }
        fed?.resume()
    }

    /// A declined save to hand to the manager, while fewer than `-j` transfer.
    private func takeDeclinedSave() -> (Int, DownloadOptions)? {
        state.withLock { s -> (Int, DownloadOptions)? in
            guard s.hasPlace(jobs: jobs), let index = s.declinedSaves.keys.min(),
                let options = s.declinedSaves.removeValue(forKey: index)
            else { return nil }
            return (index, options)
        }
    }

    /// The next URL to start, counted as transferring, while fewer than `-j` transfer, the files
    /// waiting for their save leave room (`savesLeaveRoom`) and no declined save waits for a
    /// place.
    private func take() -> Int? {
        state.withLock { s -> Int? in
            guard s.hasPlace(jobs: jobs), s.next < count, s.savesLeaveRoom(jobs: jobs), s.declinedSaves.isEmpty else {
                return nil
            }
            s.next += 1
            s.transferring.insert(s.next - 1)
            s.live.insert(s.next - 1)
            return s.next - 1
        }
    }

    /// URL `index` has its whole file and is being saved: its place goes to the next URL, which
    /// starts here, usually on the transport's thread (no hop, and with libcurl no wake-up,
    /// before its request). An express start does `mkdir -p` of its directory there, the
    /// first time (a stat when it exists); its resume records were listed before the run
    /// (`expressFeed`).
    private func saving(_ index: Int, bytes: Int) {
        state.withLock { $0.beginSave(index, bytes: bytes) }
        pump()
    }

    private func ended(_ index: Int, _ end: HaulSession.ExpressEnd) {
        switch end {
        case .saved(let result, let start):
            saved(index, result, start)
            finish(index)
        case .declined(let options):
            let (stopped, waits) = state.withLock { s -> (Bool, Bool) in
                // A save that declined gave up its place: it waits for one.
                guard !s.stopped, s.endSave(index) else { return (s.stopped, false) }
                s.declinedSaves[index] = options
                return (false, true)
            }
            if stopped {
                options.prefetched?.drop()  // after a stop, the answer so far goes (its transfer cancelled)
                finish(index)
            } else if !waits {
                handOver(index, options: options)
            }
        }
        pump()
    }

    /// URL `index` no longer runs the express way.
    private func finish(_ index: Int) {
        state.withLock { s in
            s.transferring.remove(index)
            s.endSave(index)
            s.declinedSaves[index] = nil
            s.live.remove(index)
            s.handles[index] = nil
        }
    }

    /// URL `index` goes to the manager; it counts against `-j` until it finishes there.
    private func handOver(_ index: Int, options: DownloadOptions?) {
        state.withLock { $0.managed += 1 }
        // In the manager before it stops counting here: the run must not end between.
        manage(index, options) { [self] in
            state.withLock { $0.managed -= 1 }
            pump()
        }
        finish(index)
    }
}
