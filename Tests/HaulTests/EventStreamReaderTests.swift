import HaulTestTraits
import Testing

@testable import Haul

/// `haul watch`'s reading of Server-Sent Events, chunk by chunk as they arrive.
@Suite(.fewAtOnce) struct EventStreamReaderTests {
    @Test func eventsAreReadAcrossChunksWhateverTheSplit() throws {
        let stream =
            Array(
                "retry: 2000\n\n: still here\nid: 7\nevent: state\ndata: {\"name\":\"été\"}\n\n"
                    .utf8) + Array("event: progress\r\ndata: one\r\ndata:two\r\n\r\nevent: x\n".utf8)
        let expected: [EventStreamReader.Event] = [
            .init(name: "state", data: #"{"name":"été"}"#, id: "7"), .init(name: "progress", data: "one\ntwo"),
        ]
        // Every split point: a UTF-8 sequence, a CRLF and a field cut in two among them.
        for cut in 0...stream.count {
            var reader = EventStreamReader()
            let events = try reader.take(Array(stream[..<cut])) + reader.take(Array(stream[cut...]))
            #expect(events == expected, "cut at \(cut)")
        }
    }

    @Test func anEventPastTheLimitIsRefusedNotHeld() throws {
        var reader = EventStreamReader()
        #expect(try reader.take(Array("data: ".utf8)).isEmpty)
        let line = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20) + [UInt8(ascii: "\n")]
        var refused = false
        for _ in 0..<40 {
            do { _ = try reader.take(Array("data: ".utf8) + line) } catch {
                refused = true
                break
            }
        }
        #expect(refused)
    }
}
