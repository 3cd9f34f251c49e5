import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `Sys.readSmallFile`: records, the manager's list, /proc and /sys files.
@Suite(.fewAtOnce) struct ReadSmallFileTests {
    /// Files that report no size (/proc) are read to their end, past the first page.
    @Test func aFileThatReportsNoSizeIsReadWhole() throws {
        let maps = try #require(try Sys.readSmallFile("/proc/self/maps", limit: 16 << 20))
        #expect(maps.count > 4096, "\(maps.count) bytes")
        #expect(maps.last == UInt8(ascii: "\n"))
    }

    /// Over the limit is an error, not the first `limit` bytes (which no decoder could read: a
    /// download manager's list past 16 MiB loaded as nothing).
    @Test func aFileOverTheLimitThrowsAndOneAtItIsRead() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("ten")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("0123456789".utf8)))
        #expect(throws: Errno(EFBIG)) { try Sys.readSmallFile(path, limit: 9) }
        #expect(try Sys.readSmallFile(path, limit: 10) == Array("0123456789".utf8))
        #expect(try Sys.readSmallFile(dir.file("none")) == nil)
    }
}
