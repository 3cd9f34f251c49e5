import HaulCore
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

/// What the test server received in an upload.
public struct UploadReport: Sendable, Equatable {
    /// One part of a multipart body.
    public struct Part: Sendable, Equatable {
        /// The field name.
        public var name: String
        /// The file name, for file parts.
        public var filename: String?
        /// The part's Content-Type, if sent.
        public var contentType: String?
        /// Bytes in the part's body.
        public var size: Int
        /// Hex SHA-256 of the part's body.
        public var sha256: String
    }
    /// The request path.
    public var path: String
    /// The method.
    public var method: String
    /// The multipart parts (empty for raw bodies).
    public var parts: [Part]
    /// Body bytes received.
    public var size: Int
    /// Hex SHA-256 of a raw body (nil for multipart and `upload=count`).
    public var sha256: String?
}

/// Streams a multipart/form-data body through, hashing each part; never holds more than a
/// chunk and a delimiter's worth of bytes.
final class MultipartParser {
    private enum State { case preamble, headers, body, done }
    private let delimiter: [UInt8]
    private var buffer: [UInt8] = [13, 10]  // so the first boundary also reads "\r\n--boundary"
    private var state = State.preamble
    private var current: (name: String, filename: String?, type: String?, size: Int, hasher: SHA256)?
    private(set) var parts: [UploadReport.Part] = []
    var isComplete: Bool { state == .done }

    init(boundary: String) { delimiter = Array("\r\n--\(boundary)".utf8) }

    func feed(_ bytes: ArraySlice<UInt8>) {
        buffer += bytes
        var progressed = true
        while progressed {
            progressed = false
            switch state {
            case .preamble, .body:
                if let i = find(delimiter, in: buffer) {
                    if state == .body { emit(buffer[0..<i]) }
                    finishPart()
                    let after = i + delimiter.count
                    guard buffer.count >= after + 2 else {
                        // Keep the delimiter until we can see what follows it.
                        if state == .body { state = .preamble }
                        buffer.removeFirst(i)
                        return
                    }
                    if buffer[after] == 45 && buffer[after + 1] == 45 {
                        state = .done
                        buffer = []
                        return
                    }
                    buffer.removeFirst(after + 2)
                    state = .headers
                    progressed = true
                } else if buffer.count >= delimiter.count {
                    let keep = delimiter.count - 1
                    if state == .body { emit(buffer[0..<(buffer.count - keep)]) }
                    buffer.removeFirst(buffer.count - keep)
                }
            case .headers:
                if let i = find([13, 10, 13, 10], in: buffer) {
                    startPart(String(decoding: buffer[0..<i], as: UTF8.self))
                    buffer.removeFirst(i + 4)
                    state = .body
                    progressed = true
                }
            case .done:
                buffer = []
            }
        }
    }

    private func emit(_ bytes: ArraySlice<UInt8>) {
        guard !bytes.isEmpty, current != nil else { return }
        current!.size += bytes.count
        bytes.withUnsafeBytes { current!.hasher.update($0) }
    }

    private func startPart(_ head: String) {
        var name = ""
        var filename: String?
        var type: String?
        for line in head.components(separatedBy: "\r\n") {
            let lower = line.lowercased()
            if lower.hasPrefix("content-disposition:") {
                name = Self.parameter("name", in: line) ?? ""
                filename = Self.parameter("filename", in: line)
            } else if lower.hasPrefix("content-type:") {
                type = line.dropFirst("content-type:".count).trimmingASCIIWhitespace()
            }
        }
        current = (name, filename, type, 0, SHA256())
    }

    private func finishPart() {
        guard var c = current else { return }
        parts.append(
            UploadReport.Part(
                name: c.name, filename: c.filename, contentType: c.type, size: c.size, sha256: c.hasher.hexDigest()))
        current = nil
    }

    static func parameter(_ key: String, in line: String) -> String? {
        guard let range = line.firstRange(of: "; \(key)=\"") else { return nil }
        let rest = line[range.upperBound...]
        guard let end = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[..<end])
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        // memchr for the first byte, memcmp for the rest (memmem is not exported by Glibc here).
        return haystack.withUnsafeBytes { h -> Int? in
            needle.withUnsafeBytes { n -> Int? in
                let first = Int32(needle[0])
                var start = 0
                let last = h.count - n.count
                while start <= last {
                    guard let hit = memchr(h.baseAddress! + start, first, last - start + 1) else { return nil }
                    let i = h.baseAddress!.distance(to: UnsafeRawPointer(hit))
                    if memcmp(h.baseAddress! + i, n.baseAddress!, n.count) == 0 { return i }
                    start = i + 1
                }
                return nil
            }
        }
    }
}
