import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Listing a directory", .fewAtOnce)
struct DirectoryListingTests {
    @Test func anEntryThatEndsWhereItsBufferEndsIsReadInPlace() throws {
        // readdir hands out entries only as long as their names; this one ends right before an
        // inaccessible page, as the last entry of readdir's buffer can. Copying d_name as a
        // 256-byte value (what listDirectory did) faults here.
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapped = mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        let base = try #require(mapped == MAP_FAILED ? nil : mapped)
        defer { munmap(base, 2 * page) }
        #expect(mprotect(base + page, page, PROT_NONE) == 0)
        let nameOffset = try #require(MemoryLayout<dirent>.offset(of: \dirent.d_name))
        let length = (nameOffset + 2 + 7) & ~7  // header, "a", NUL, 8-byte aligned
        let entry = base + page - length
        memset(entry, 0, length)
        (entry + nameOffset).storeBytes(of: UInt8(ascii: "a"), as: UInt8.self)
        let name = String(cString: Sys.entryName(entry.assumingMemoryBound(to: dirent.self)))
        #expect(name == "a")
    }

    @Test func aLargeDirectoryIsListedWhole() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Names of every length up to the maximum, so entries end at every offset of the buffer.
        var expected: Set<String> = []
        for i in 0..<3000 {
            let name = String(i) + "." + String(repeating: "x", count: i % 240) + ".haul"
            #expect(FileManager.default.createFile(atPath: dir.file(name), contents: nil))
            expected.insert(name)
        }
        #expect(FileManager.default.createFile(atPath: dir.file("other.part"), contents: nil))
        for _ in 0..<3 {
            #expect(Set(Sys.listDirectory(dir.path, suffix: ".haul")) == expected)
        }
        #expect(Sys.listDirectory(dir.path).count == 3001)
    }

    /// The record index keeps which names a directory held when listed, by their bytes, and
    /// answers "nothing there" only for a name, partial and record it did not hold, in a
    /// directory it listed, where no record was noted since.
    @Test func aListingKeepsWhichNamesTheDirectoryHeld() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for name in ["a.bin", "b.bin.part", "c.bin.haul", "é.bin", "deep"] {
            #expect(FileManager.default.createFile(atPath: dir.file(name), contents: nil))
        }
        let index = RecordIndex()
        #expect(!index.heldNothing(at: dir.file("d.bin")), "not listed yet")
        index.prepare(dir.path)
        #expect(index.heldNothing(at: dir.file("d.bin")))
        #expect(index.heldNothing(at: dir.file("a")), "a name is not its prefix")
        #expect(index.heldNothing(at: dir.file("dee")))
        for held in ["a.bin", "b.bin", "c.bin", "é.bin", "deep"] {
            #expect(!index.heldNothing(at: dir.file(held)), "\(held)")
        }
        #expect(!index.heldNothing(at: dir.file("sub/d.bin")), "another directory")
        index.noted(url: "http://example.com/d", destination: dir.file("d.bin"))
        #expect(!index.heldNothing(at: dir.file("d.bin")), "a record written since")
    }

    @Test func aDirectoryOfMoreNamesThanAreKeptIsNeverTakenAsEmpty() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for name in ["a", "b", "c"] { #expect(FileManager.default.createFile(atPath: dir.file(name), contents: nil)) }
        let index = RecordIndex(namesKept: 2)
        index.prepare(dir.path)
        #expect(index.listings(of: dir.path) == 1)
        #expect(!index.heldNothing(at: dir.file("d")))
        let roomy = RecordIndex(namesKept: 3)
        roomy.prepare(dir.path)
        #expect(roomy.heldNothing(at: dir.file("d")))
    }
}
