import HaulCore

/// Server-Sent Events out of bytes as they come: `event:`, `data:` (lines joined with `\n`)
/// and `id:` fields, an event at each blank line; comments skipped. Bytes, not Characters: a
/// UTF-8 sequence split between two chunks is put together before it is read.
package struct EventStreamReader {
    package struct Event: Equatable, Sendable {
        package var name = "message"
        package var data = ""
        package var id: String?

        package init(name: String = "message", data: String = "", id: String? = nil) {
            (self.name, self.data, self.id) = (name, data, id)
        }
    }

    /// The most a single event may hold (a snapshot of 1000 long URLs is about 10 MiB).
    package static let maxEventBytes = 32 << 20
    private var pending: [UInt8] = []
    /// Where the search for the next newline goes on: the bytes before it have none.
    private var searched = 0
    private var current = Event()
    private var hasData = false

    package init() {}

    /// The events completed by `bytes`.
    package mutating func take(_ bytes: [UInt8]) throws(HaulError) -> [Event] {
        pending += bytes
        var events: [Event] = []
        var start = 0
        while let newline = pending[max(start, searched)...].firstIndex(of: UInt8(ascii: "\n")) {
            var line = pending[start..<newline]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            start = newline + 1
            if line.isEmpty {
                if hasData { events.append(current) }
                (current, hasData) = (Event(), false)
            } else if line.first != UInt8(ascii: ":") {
                field(line)
            }
        }
        pending.removeFirst(start)
        searched = pending.count
        if pending.count + current.data.utf8.count > Self.maxEventBytes {
            throw HaulError(.responseTooLarge, "an event of haul serve's is over 32 MiB")
        }
        return events
    }

    private mutating func field(_ line: ArraySlice<UInt8>) {
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
        let name = String(decoding: line[..<colon], as: UTF8.self)
        var value = colon < line.endIndex ? line[(colon + 1)...] : []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        let text = String(decoding: value, as: UTF8.self)
        switch name {
        case "event": current.name = text
        case "data":
            current.data += hasData ? "\n" + text : text
            hasData = true
        case "id": current.id = text
        default: break
        }
    }
}

/// The bodies of `haul serve`'s `progress` and `removed` events (docs/api.md): written by the
/// daemon, read by `haul watch` and ``BackgroundSession``.
package struct ProgressEvent: Codable, Equatable, Sendable {
    package var id: Int64
    package var done: Int64
    package var total: Int64?
    /// Bytes per second and seconds left, while known.
    package var speed: Double?
    package var eta: Double?

    package init(id: Int64, done: Int64, total: Int64?, speed: Double?, eta: Double?) {
        (self.id, self.done, self.total, self.speed, self.eta) = (id, done, total, speed, eta)
    }
}

package struct RemovedEvent: Codable, Equatable, Sendable {
    package var id: Int64
}
