import Dispatch
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Turns a transfer's byte count into progress reports: at most one per `interval` while bytes
/// arrive, and, from ``ProgressClock``, one per `max(interval, 1 s)` while none do, so a stalled
/// transfer reports its exact bytes and a speed that falls towards zero (as curl's meter does).
///
/// Reports are made one at a time (the transfer's thread and the clock's never interleave), so
/// their byte counts never go backwards, except after ``begin(at:total:)`` starts over.
package final class ProgressReporter: Sendable {
    private struct State {
        var meter = ProgressMeter()
        var bytes: Int64 = 0
        var total: Int64?
        /// When the last report was made (monotonic seconds; 0 before the first).
        var last = 0.0
        /// A transfer is on the wire: the clock may report.
        var active = false
    }

    private let state = Locked(State())
    /// Held while a report is made and delivered; counts the reports. (Not `Locked(())`:
    /// ThreadSanitizer reported the inout access to a zero-sized value as a race.)
    private let reporting = Locked(0)
    private let interval: Double
    private let report: @Sendable (TransferProgress) -> Void
    /// Monotonic seconds now (tests pass their own).
    private let clock: @Sendable () -> Double

    /// Seconds without bytes after which the clock reports.
    private var quietInterval: Double { max(interval, 1) }

    /// A reporter that calls `report` with each report; `clock` tells the time of each.
    package init(
        interval: Double, clock: @escaping @Sendable () -> Double = { monotonicSeconds() },
        report: @escaping @Sendable (TransferProgress) -> Void
    ) {
        self.interval = interval
        self.clock = clock
        self.report = report
    }

    /// A transfer starts with `bytes` already done (a resume offset, or 0 after a restart).
    package func begin(at bytes: Int64, total: Int64?) {
        state.withLock { s in
            s.bytes = bytes
            s.total = total
            s.active = true
        }
    }

    /// `bytes` are done; reports when `interval` has passed since the last report.
    package func update(_ bytes: Int64, total: Int64?, at time: Double? = nil) {
        let now = time ?? clock()
        let due = state.withLock { s -> Bool in
            s.bytes = max(s.bytes, bytes)  // a late caller of several threads never moves it back
            s.total = total
            s.active = true
            return now - s.last >= interval
        }
        if due { make(minimumGap: interval) }
    }

    /// No transfer is on the wire (between attempts): the clock stops reporting.
    package func idle() { state.withLock { $0.active = false } }

    /// Reports `bytes` now, whatever the interval (a finished transfer), and stops the clock's
    /// reports.
    package func finish(_ bytes: Int64, total: Int64?) {
        state.withLock { s in
            s.bytes = bytes
            s.total = total
            s.active = false
        }
        make(minimumGap: 0)
    }

    /// From the clock: reports when a transfer is on the wire and nothing was reported for the
    /// quiet interval.
    func tick(at now: Double) {
        let due = state.withLock { $0.active && $0.last > 0 && now - $0.last >= quietInterval }
        if due { make(minimumGap: quietInterval, requireActive: true) }
    }

    /// Makes a report unless one was made less than `minimumGap` ago (checked again under the
    /// reporting lock: another thread may have reported meanwhile).
    private func make(minimumGap: Double, requireActive: Bool = false) {
        reporting.withLock { made in
            let now = clock()
            let progress = state.withLock { s -> TransferProgress? in
                guard now - s.last >= minimumGap, !requireActive || s.active else { return nil }
                s.last = now
                let speed = s.meter.record(bytes: s.bytes, at: now)
                return TransferProgress(
                    completedBytes: s.bytes, totalBytes: s.total, bytesPerSecond: speed.window,
                    smoothedBytesPerSecond: speed.smoothed)
            }
            if let progress {
                report(progress)
                made += 1
            }
        }
    }
}

/// One timer for the quiet-time reports of every transfer in the process: a Dispatch timer on a
/// queue of its own, four times a second, running only while some reporter is registered.
package final class ProgressClock: Sendable {
    /// The process's clock.
    package static let shared = ProgressClock(period: 0.25)

    /// Unchecked Sendable: `DispatchSourceTimer` is not marked Sendable on Linux, though
    /// libdispatch sources may be used from any thread; this one is touched only under the lock.
    private struct State: @unchecked Sendable {
        var reporters: [ObjectIdentifier: ProgressReporter] = [:]
        var timer: DispatchSourceTimer?
    }

    private let state = Locked(State())
    private let period: Double
    private let queue = DispatchQueue(label: "haul.progress-clock")

    init(period: Double) { self.period = period }

    /// `reporter` gets ticks until ``remove(_:)``.
    package func add(_ reporter: ProgressReporter) {
        state.withLock { s in
            s.reporters[ObjectIdentifier(reporter)] = reporter
            guard s.timer == nil else { return }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + period, repeating: period, leeway: .milliseconds(50))
            timer.setEventHandler { [weak self] in self?.fire() }
            timer.resume()
            s.timer = timer
        }
    }

    /// Stops the ticks of `reporter`; the timer stops with the last one.
    package func remove(_ reporter: ProgressReporter) {
        let stopped = state.withLock { s -> DispatchSourceTimer? in
            s.reporters[ObjectIdentifier(reporter)] = nil
            guard s.reporters.isEmpty, let timer = s.timer else { return nil }
            s.timer = nil
            return timer
        }
        stopped?.cancel()
    }

    private func fire() {
        let now = monotonicSeconds()
        for reporter in state.withLock({ Array($0.reporters.values) }) { reporter.tick(at: now) }
    }
}
