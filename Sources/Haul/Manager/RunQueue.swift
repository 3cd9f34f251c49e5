#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension UUID {
    /// A version 4 UUID from the system generator (two getrandom(2) calls). Foundation's
    /// `UUID()` on Linux opens, reads and closes /dev/urandom for each one: three syscalls per
    /// queued download, a thousand times for a long list.
    static func random() -> UUID {
        var g = SystemRandomNumberGenerator()
        let (high, low) = (g.next(), g.next())  // one getrandom each
        var bytes = (0..<16).map { i in UInt8(truncatingIfNeeded: (i < 8 ? high : low) >> (8 * (i % 8))) }
        bytes[6] = bytes[6] & 0x0F | 0x40  // version 4
        bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}

/// The manager's queued downloads in run order. Starts take them mostly from the front, which
/// moves a start index instead of the rest of the array: `remove(at: 0)` per start would make a
/// list of n downloads cost n²/2 element moves.
struct RunQueue<Element: Sendable>: Sendable {
    private var ids: [Element] = []
    /// The first queued item's index; the slots before it are spent.
    private(set) var startIndex = 0
    /// One past the last queued item's index.
    var endIndex: Int { ids.count }
    /// The last queued item, if any.
    var last: Element? { startIndex < ids.count ? ids.last : nil }

    subscript(index: Int) -> Element { ids[index] }

    /// Adds `id` at the end.
    mutating func append(_ id: Element) { ids.append(id) }

    /// Inserts `id` before the first queued item for which `runsAfter` is true, else at the end.
    mutating func insert(_ id: Element, before runsAfter: (Element) -> Bool) {
        ids.insert(id, at: ids[startIndex...].firstIndex(where: runsAfter) ?? ids.count)
    }

    /// Removes the item at `index`; returns the index of the item that followed it.
    mutating func remove(at index: Int) -> Int {
        guard index == startIndex else {
            ids.remove(at: index)
            return index
        }
        startIndex += 1
        // Spent slots are given back once they are most of the array (amortized O(1)).
        if startIndex == ids.count || (startIndex >= 256 && startIndex * 2 >= ids.count) {
            ids.removeFirst(startIndex)
            startIndex = 0
        }
        return startIndex
    }
}
