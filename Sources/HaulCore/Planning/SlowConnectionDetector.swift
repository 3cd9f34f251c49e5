/// Finds the connection of a segmented download that is much slower than the others, or below
/// an absolute floor, so that it can be replaced. Pure: fed with samples, tested directly.
///
/// Each running fetch is sampled (its segment's cursor) a few times a second; its speed is the
/// bytes over the last `window` seconds, known once it has been watched that long. A fetch is
/// slow when that speed is below `lowestSpeed`, or below `factor` times the median speed of the
/// other fetches seen lately (running, or ended less than two windows ago, measured over any
/// two samples: fast ones often finish within a window, seen only twice) — the relative rule, off when a
/// rate limit paces the connections. A fetch that would finish within another window at its own
/// speed is left alone.
package struct SlowConnectionDetector: Sendable {
    package var window: Double
    package var factor: Double
    package var lowestSpeed: Int64?
    package var relative: Bool
    private var history: [Int: [(time: Double, bytes: Int64)]] = [:]
    /// The latest speed of each fetch seen lately, and when.
    private var recent: [Int: (speed: Double, time: Double)] = [:]

    package init(window: Double = 3, factor: Double = 0.25, lowestSpeed: Int64? = nil, relative: Bool = true) {
        self.window = window
        self.factor = factor
        self.lowestSpeed = lowestSpeed
        self.relative = relative
    }

    /// A fetch that should be replaced, and why.
    package struct Verdict: Sendable, Equatable {
        package var fetch: Int
        package var speed: Double
        package var reason: String
    }

    /// A fetch ended after writing `bytes` in `seconds` since its answer: its speed stays a
    /// reference for two windows (a fast range can end between two samples). A range that ended
    /// almost at once counts at the speed of 50 ms (a lower bound, not a division by ~0): were it
    /// not counted, a connection stalled beside such ranges would wait out the idle timeout.
    package mutating func ended(_ id: Int, bytes: Int64, seconds: Double, at now: Double) {
        history[id] = nil
        guard bytes > 0 else { return }
        recent[id] = (Double(bytes) / max(seconds, 0.05), now)
    }

    /// Records, for each running fetch (by its serial), the bytes it has written and how many are
    /// left in its range; returns the fetches to replace now.
    package mutating func observe(_ running: [Int: (written: Int64, remaining: Int64)], at now: Double) -> [Verdict] {
        history = history.filter { running[$0.key] != nil }
        recent = recent.filter { now - $0.value.time < 2 * window }
        var speeds: [Int: Double] = [:]
        for (id, sample) in running {
            var samples = history[id, default: []]
            samples.append((now, sample.written))
            while samples.count > 2, now - samples[1].time >= window { samples.removeFirst() }
            history[id] = samples
            // Two samples give a reference speed (a fast range may be seen only twice).
            guard samples.count >= 2, let first = samples.first, now > first.time else { continue }
            let speed = Double(sample.written - first.bytes) / (now - first.time)
            recent[id] = (speed, now)
            if now - first.time >= window * 0.99 { speeds[id] = speed }
        }
        var verdicts: [Verdict] = []
        for (id, speed) in speeds {
            let remaining = running[id]!.remaining
            if let floor = lowestSpeed, speed < Double(floor) {
                verdicts.append(Verdict(fetch: id, speed: speed, reason: "below the lowest speed limit"))
                continue
            }
            guard relative else { continue }
            let others = recent.filter { $0.key != id }.map(\.value.speed).sorted()
            guard !others.isEmpty else { continue }
            let median = others[others.count / 2]
            // Worth it only if, at its own speed, it would not finish within another window.
            guard speed < factor * median, Double(remaining) > speed * window else { continue }
            verdicts.append(Verdict(fetch: id, speed: speed, reason: "much slower than the other connections"))
        }
        for v in verdicts {
            history[v.fetch] = nil
            recent[v.fetch] = nil
        }
        return verdicts.sorted { $0.fetch < $1.fetch }
    }
}
