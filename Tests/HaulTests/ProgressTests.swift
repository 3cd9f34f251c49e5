import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Progress while a transfer stalls", .fewAtOnce)
struct ProgressTests {
    /// Every progress report with the time it arrived.
    final class Reports: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [(at: Double, progress: TransferProgress)] = []
        func add(_ p: TransferProgress) { lock.withLock { items.append((monotonicSeconds(), p)) } }
        var all: [(at: Double, progress: TransferProgress)] { lock.withLock { items } }
        func at(_ bytes: Int64) -> [(at: Double, progress: TransferProgress)] {
            all.filter { $0.progress.completedBytes == bytes }
        }
    }

    /// Starts a download of `path` that stalls once `stalled` bytes are on disk, waits for three
    /// reports of exactly those bytes, then cancels it; returns every report.
    func reportsOfAStall(
        _ path: String, stalled: Int64, options: DownloadOptions = DownloadOptions()
    ) async throws -> [(at: Double, progress: TransferProgress)] {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let reports = Reports()
        // A long idle timeout: the stall must not end in a retry while the test watches it.
        let session = testSession { $0.timeout.idle = 60 }
        let download = Task {
            try await session.download(
                from: server.url(path), to: .file(dir.url.appendingPathComponent("stall.bin")), options: options
            ) { event in
                if case .progress(let p) = event { reports.add(p) }
            }
        }
        let seen = await eventually(timeout: 60) { reports.at(stalled).count >= 3 }
        download.cancel()
        _ = await download.result
        #expect(seen, "reports: \(reports.all.map(\.progress.completedBytes))")
        return reports.all
    }

    /// The reports of a stall carry its exact bytes once a second, and a speed that falls.
    func expectQuietReports(_ all: [(at: Double, progress: TransferProgress)], at bytes: Int64) {
        let quiet = all.filter { $0.progress.completedBytes == bytes }
        let gaps = zip(quiet, quiet.dropFirst()).map { $1.at - $0.at }
        #expect(gaps.allSatisfy { $0 >= 0.9 }, "one report per second while nothing arrives: \(gaps)")
        let speeds = quiet.map(\.progress.bytesPerSecond)
        // (Non-increasing: once the stall outlasts the 5 s window the speed stays at zero.)
        #expect(
            zip(speeds, speeds.dropFirst()).allSatisfy { $1 <= $0 } && (speeds.last ?? 0) < (speeds.first ?? 0),
            "the speed falls: \(speeds)")
        #expect(quiet.allSatisfy { $0.progress.fraction != 1 })
        let counts = all.map(\.progress.completedBytes)
        #expect(counts == counts.sorted(), "reports never go backwards: \(counts)")
    }

    @Test func aStalledDownloadReportsItsExactBytesAndAFallingSpeed() async throws {
        // 1 MB, then nothing: before, the last report was the one of the burst's first chunk.
        let all = try await reportsOfAStall("/one.bin?size=3000000&stall=1000000", stalled: 1_000_000)
        expectQuietReports(all, at: 1_000_000)
    }

    @Test func aStalledSegmentedDownloadReportsItsExactBytesToo() async throws {
        // Every request (the probe's range and the other) sends 500 KB and stalls.
        var options = DownloadOptions()
        options.connections = 2
        options.minSplitSize = 1 << 20
        let all = try await reportsOfAStall(
            "/two.bin?size=4194304&stall=500000", stalled: 1_000_000, options: options)
        expectQuietReports(all, at: 1_000_000)
    }
}
