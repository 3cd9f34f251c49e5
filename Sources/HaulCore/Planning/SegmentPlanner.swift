/// Splits a file into byte ranges for several connections and rebalances them as they finish
/// (work stealing). Pure: no I/O, tested directly.
///
/// Each segment is `[start, end)` with a `cursor`: bytes `[start, cursor)` are written. A
/// connection that finishes takes the second half of the segment with the most left to do,
/// if that half is at least `minSplit` bytes; the victim's `end` moves down, so its connection
/// stops at the new end. When no segment is worth splitting, a free connection may ask for the
/// rest of a running one as well (``hedge(_:)``, once per segment): whichever of the two gets
/// there first completes it, and the other stops.
package struct SegmentPlanner: Sendable, Equatable {
    package struct Segment: Sendable, Equatable {
        package let id: Int
        package let start: Int64
        package var end: Int64
        package var cursor: Int64
        /// How many connections are working on it (two when it is hedged).
        package var workers: Int
        /// A second connection was sent for its rest (at most once).
        package var hedged = false
        /// A connection is working on it.
        package var active: Bool { workers > 0 }
        package var remaining: Int64 { end - cursor }
        package var isDone: Bool { cursor >= end }
    }

    package let total: Int64
    package let minSplit: Int64
    package private(set) var segments: [Segment] = []
    private var nextID = 0

    /// Plans the bytes not yet in `completed` over up to `connections` segments. With `first`,
    /// a fresh download's `[0, first)` is one more segment, already running (the probe's own
    /// answer, adopted).
    package init(total: Int64, completed: [ByteRange] = [], connections: Int, minSplit: Int64, first: Int64? = nil) {
        self.total = total
        self.minSplit = max(1, minSplit)
        var position: Int64 = 0
        var planned: [ByteRange]?
        if let first, completed.isEmpty, first > 0, first < total {
            // The file is cut into equal shares, one per connection, as if the probe had not
            // been there; the probe's answer is the start of the first share and the rest of that
            // share is a spare piece its connection takes next, so every connection carries the
            // same and they end together. A spare below the minimum is not worth a request: then
            // the rest is shared by the other connections (the probe's one steals when done).
            add(start: 0, end: first, done: false)
            segments[0].workers = 1
            position = first
            var shares = equalPieces(of: ByteRange(0, total), atMost: connections)
            if shares[0].end - first >= self.minSplit {
                shares[0] = ByteRange(first, shares[0].end)
                planned = shares
            } else {
                planned = equalPieces(of: ByteRange(first, total), atMost: connections - 1)
            }
        }
        // Completed ranges become done segments; the gaps are the work.
        var gaps: [ByteRange] = []
        for range in completed.sorted(by: { $0.start < $1.start }) where range.end > position {
            if range.start > position { gaps.append(ByteRange(position, min(range.start, total))) }
            add(start: max(range.start, position), end: min(range.end, total), done: true)
            position = max(position, range.end)
        }
        if position < total { gaps.append(ByteRange(position, total)) }
        var pieces: [ByteRange] = planned ?? gaps.filter { $0.count > 0 }
        if planned == nil, pieces.count == 1 {
            // One gap (a fresh download): equal pieces, none below the minimum.
            pieces = equalPieces(of: pieces[0], atMost: connections)
        }
        // Several gaps (a resume): split the largest until there are enough pieces or they would
        // get too small.
        while planned == nil, pieces.count < connections,
            let largest = pieces.indices.max(by: { pieces[$0].count < pieces[$1].count }),
            pieces[largest].count >= 2 * self.minSplit
        {
            let r = pieces[largest]
            let mid = r.start + r.count / 2
            pieces[largest] = ByteRange(r.start, mid)
            pieces.insert(ByteRange(mid, r.end), at: largest + 1)
        }
        for p in pieces { add(start: p.start, end: p.end, done: false) }
        segments.sort { $0.start < $1.start }
    }

    /// `range` cut into at most `count` equal pieces (at least one), none below the minimum.
    private func equalPieces(of range: ByteRange, atMost count: Int) -> [ByteRange] {
        let n = max(1, min(Int64(count), range.count / minSplit))
        return (0..<n).map { i in ByteRange(range.start + range.count * i / n, range.start + range.count * (i + 1) / n)
        }
    }

    private mutating func add(start: Int64, end: Int64, done: Bool) {
        guard end > start else { return }
        segments.append(Segment(id: nextID, start: start, end: end, cursor: done ? end : start, workers: 0))
        nextID += 1
    }

    package var isComplete: Bool { segments.allSatisfy(\.isDone) }
    package var completedBytes: Int64 { segments.reduce(0) { $0 + ($1.cursor - $1.start) } }

    /// Work for a free connection: the largest untaken segment, else half of the largest
    /// running one. Largest first, so that the short ones (the spare piece after the probe's
    /// answer, a small gap of a resume) go to connections that are free early and all end together.
    package mutating func assign() -> Segment? {
        let untaken = segments.indices.filter { !segments[$0].active && !segments[$0].isDone }
        // max(by:) keeps the first of equals: equal shares go out in file order.
        if let i = untaken.max(by: { segments[$0].remaining < segments[$1].remaining }) {
            segments[i].workers = 1
            return segments[i]
        }
        let running = segments.indices.filter { segments[$0].active && !segments[$0].isDone }
        guard
            let victim = running.max(by: { segments[$0].remaining < segments[$1].remaining }),
            segments[victim].remaining >= 2 * minSplit
        else { return nil }
        let mid = segments[victim].cursor + segments[victim].remaining / 2
        let oldEnd = segments[victim].end
        segments[victim].end = mid
        let stolen = Segment(id: nextID, start: mid, end: oldEnd, cursor: mid, workers: 1)
        nextID += 1
        segments.append(stolen)
        segments.sort { $0.start < $1.start }
        return stolen
    }

    /// The running segments a free connection may race for their rest, most left first: none
    /// while there is other work (``assign()`` has some), none hedged already.
    package var hedgeable: [Int] {
        let running = segments.filter { $0.active && !$0.isDone }
        guard !segments.contains(where: { !$0.active && !$0.isDone }),
            !running.contains(where: { $0.remaining >= 2 * minSplit })
        else { return [] }
        return running.filter { !$0.hedged }.sorted { $0.remaining > $1.remaining }.map(\.id)
    }

    /// Hands segment `id` out a second time, as it stands (its id and cursor): the connection
    /// asks for the same rest, and the first to write the last byte completes the segment.
    /// Nil unless it is in ``hedgeable``.
    package mutating func hedge(_ id: Int) -> Segment? {
        guard hedgeable.contains(id), let i = segments.firstIndex(where: { $0.id == id }) else { return nil }
        segments[i].hedged = true
        segments[i].workers += 1
        return segments[i]
    }

    /// The first ``hedgeable`` segment a new request is expected to finish in at most half the
    /// time its own connection needs (`fresh`, bytes/s of requests that ended lately, at least
    /// twice its `speeds[id]` so far), hedged; nil when none is.
    package mutating func race(fresh: Double, speeds: [Int: Double]) -> Segment? {
        for id in hedgeable {
            guard let speed = speeds[id], fresh >= 2 * speed else { continue }
            return hedge(id)
        }
        return nil
    }

    /// The current end of a segment (it shrinks when another connection steals from it).
    package func end(of id: Int) -> Int64? { segments.first { $0.id == id }?.end }

    /// Bytes up to `cursor` of segment `id` are written (by one of its connections: it moves
    /// only forward, so a hedged segment is as far as the one ahead).
    /// Returns whether the segment is complete.
    @discardableResult
    package mutating func advance(_ id: Int, to cursor: Int64) -> Bool {
        guard let i = segments.firstIndex(where: { $0.id == id }) else { return true }
        segments[i].cursor = min(max(segments[i].cursor, cursor), segments[i].end)
        return segments[i].isDone
    }

    /// A connection working on `id` stopped (done, failed or replaced); with none left the rest
    /// is free work.
    package mutating func release(_ id: Int) {
        guard let i = segments.firstIndex(where: { $0.id == id }) else { return }
        segments[i].workers = max(0, segments[i].workers - 1)
    }

    /// The written bytes as merged ranges, for the resume record.
    package var writtenRanges: [ByteRange] {
        var out: [ByteRange] = []
        for s in segments.sorted(by: { $0.start < $1.start }) where s.cursor > s.start {
            if let last = out.last, last.end == s.start {
                out[out.count - 1] = ByteRange(last.start, s.cursor)
            } else {
                out.append(ByteRange(s.start, s.cursor))
            }
        }
        return out
    }
}
