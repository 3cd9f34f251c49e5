import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Progress reports: rate-limited while bytes arrive, from the clock while none do", .fewAtOnce)
struct ProgressReporterTests {
    final class Sink: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [TransferProgress] = []
        func add(_ p: TransferProgress) { lock.withLock { items.append(p) } }
        var all: [TransferProgress] { lock.withLock { items } }
    }

    /// On a clock the test moves: nothing depends on how fast the machine runs.
    @Test func bytesReportAtMostOncePerIntervalAndTheClockReportsAQuietTransfer() {
        let sink = Sink()
        let now = Locked(100.0)
        let reporter = ProgressReporter(interval: 0.2, clock: { now.get() }) { sink.add($0) }
        reporter.begin(at: 0, total: 1000)
        reporter.update(100, total: 1000)
        now.set(100.1)
        reporter.update(200, total: 1000)  // within the interval: no report
        #expect(sink.all.map(\.completedBytes) == [100])
        reporter.tick(at: now.get())  // not quiet for a second yet
        #expect(sink.all.count == 1)
        now.set(101.05)
        reporter.tick(at: now.get())
        #expect(sink.all.map(\.completedBytes) == [100, 200], "the quiet report has the latest bytes")
        reporter.idle()
        now.set(102.1)
        reporter.tick(at: now.get())
        #expect(sink.all.count == 2, "no report between transfers")
        reporter.finish(1000, total: 1000)
        #expect(sink.all.last?.fraction == 1)
    }

    @Test func reportsFromSeveralThreadsAndTheClockNeverGoBackwards() async {
        let sink = Sink()
        let reporter = ProgressReporter(interval: 0) { sink.add($0) }
        reporter.begin(at: 0, total: nil)
        let counter = Locked<Int64>(0)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<2000 {
                        let bytes = counter.withLock { c -> Int64 in
                            c += 10
                            return c
                        }
                        reporter.update(bytes, total: nil)
                    }
                }
            }
            group.addTask {
                for _ in 0..<2000 { reporter.tick(at: monotonicSeconds() + 10) }
            }
        }
        let counts = sink.all.map(\.completedBytes)
        #expect(counts.count > 100)
        let back = zip(counts, counts.dropFirst()).enumerated().first { $0.element.1 < $0.element.0 }
        #expect(
            back == nil,
            "report \(back?.offset ?? 0) of \(counts.count) went back: \(String(describing: back?.element))")
    }

    @Test func theClockTicksOnlyWhileReportersAreRegistered() async throws {
        let sink = Sink()
        let clock = ProgressClock(period: 0.05)
        let reporter = ProgressReporter(interval: 0) { sink.add($0) }
        reporter.begin(at: 0, total: nil)
        reporter.update(5, total: nil)
        clock.add(reporter)
        #expect(
            await eventually(timeout: 10) { sink.all.count >= 2 }, "one report, then the clock's after a quiet second")
        let whileRegistered = sink.all.count
        clock.remove(reporter)
        try await Task.sleep(nanoseconds: 1_300_000_000)
        #expect(sink.all.count == whileRegistered)
    }
}
