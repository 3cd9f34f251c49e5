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

/// A snapshot of a transfer's progress.
///
/// `fraction` and `estimatedTimeRemaining` are nil while the total is unknown.
public struct TransferProgress: Sendable, Equatable {
    /// Bytes of the file on disk (or sent, for uploads), including bytes from earlier attempts.
    public var completedBytes: Int64
    /// The full size, when known.
    public var totalBytes: Int64?
    /// Bytes per second over the last few seconds.
    public var bytesPerSecond: Double
    /// An exponentially smoothed speed, steadier for display.
    public var smoothedBytesPerSecond: Double

    /// Creates a snapshot.
    public init(
        completedBytes: Int64, totalBytes: Int64?, bytesPerSecond: Double = 0, smoothedBytesPerSecond: Double = 0
    ) {
        self.completedBytes = completedBytes
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.smoothedBytesPerSecond = smoothedBytesPerSecond
    }

    /// `completedBytes / totalBytes` in 0...1, nil when the total is unknown.
    public var fraction: Double? {
        guard let totalBytes else { return nil }
        if totalBytes == 0 { return 1 }
        return min(1, Double(completedBytes) / Double(totalBytes))
    }

    /// Seconds left at the smoothed speed, nil when unknown.
    public var estimatedTimeRemaining: Double? {
        guard let totalBytes, smoothedBytesPerSecond > 0 else { return nil }
        return Double(max(0, totalBytes - completedBytes)) / smoothedBytesPerSecond
    }
}

/// Measures speed over a sliding window of samples. Not thread-safe: owned by one transfer.
package struct ProgressMeter: Sendable {
    package var window: Double
    private var samples: [(time: Double, bytes: Int64)] = []
    private var smoothed: Double = 0
    private var lastSmoothTime: Double?

    package init(window: Double = 5) { self.window = window }

    /// Records that `bytes` bytes are done at `time` (seconds, monotonic) and returns the speeds.
    package mutating func record(bytes: Int64, at time: Double) -> (window: Double, smoothed: Double) {
        if let last = samples.last, bytes < last.bytes { samples.removeAll() }  // restarted from zero
        samples.append((time, bytes))
        while let first = samples.first, time - first.time > window, samples.count > 2 { samples.removeFirst() }
        var speed = 0.0
        if let first = samples.first, time - first.time > 0.05 {
            speed = Double(bytes - first.bytes) / (time - first.time)
        }
        if smoothed == 0 {
            // Start from the first real measurement rather than ramping up from zero.
            smoothed = speed
            lastSmoothTime = time
        } else if let lastTime = lastSmoothTime {
            let dt = time - lastTime
            if dt > 0 {
                let alpha = 1 - exp(-dt / 2.0)  // ~2 s time constant
                smoothed += alpha * (speed - smoothed)
                lastSmoothTime = time
            }
        }
        return (speed, smoothed)
    }
}

/// Monotonic seconds.
package func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
