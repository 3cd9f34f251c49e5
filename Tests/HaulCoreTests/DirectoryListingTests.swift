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

    /// The record index keeps which names a directory held when listed, by their bytes (ASCII
    /// letters in either case), and takes a name as free only when neither it nor its partial
    /// nor its record was there, in a directory it listed, where this process wrote none since.
    @Test func aListingKeepsWhichNamesTheDirectoryHeld() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for name in ["a.bin", "b.bin.part", "c.bin.haul", "é.bin", "deep", "Upper.PART"] {
            #expect(FileManager.default.createFile(atPath: dir.file(name), contents: nil))
        }
        // A name that is not UTF-8: its bytes are kept, not the text it would be shown as.
        let path = Array((dir.path + "/f").utf8) + [0xFF, 0]
        let odd = path.withUnsafeBufferPointer {
            $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600) }
        }
        #expect(odd >= 0)
        close(odd)
        guard !Self.foldsCase(dir.path) else { return }
        let index = RecordIndex()
        #expect(!index.listedFree(dir.file("d.bin")), "not listed yet")
        index.noted(url: "http://example.com/early", destination: dir.file("early.bin"))
        let plain = RecordIndex()
        plain.prepare(dir.path)
        #expect(!plain.listedFree(dir.file("d.bin")), "a listing for records only keeps no names")
        index.prepare(dir.path, keepingNames: true)
        #expect(index.listedFree(dir.file("d.bin")))
        #expect(index.listedFree(dir.file("a")), "a name is not its prefix")
        #expect(index.listedFree(dir.file("dee")))
        #expect(index.listedFree(dir.file("f\u{FFFD}")), "a repaired name is another name")
        #expect(Sys.listDirectory(dir.path).contains("f\u{FFFD}"), "listed, shown repaired")
        for held in ["a.bin", "b.bin", "c.bin", "é.bin", "deep", "A.BIN", "upper"] {
            #expect(!index.listedFree(dir.file(held)), "\(held)")
        }
        #expect(!index.listedFree(dir.file("early.bin")), "a record noted before the listing")
        #expect(!index.listedFree(dir.file("sub/d.bin")), "another directory")
        index.noted(url: "http://example.com/d", destination: dir.file("d.bin"))
        index.removed(destination: dir.file("d.bin"))
        #expect(!index.listedFree(dir.file("d.bin")), "a record written since, even once removed")
        index.wrote(dir.file("g.bin"))
        #expect(!index.listedFree(dir.file("g.bin")), "a file written since")
    }

    /// The index keeps at most so many names and directories, all directories together: a
    /// listing that would pass the bound keeps none, and a name written past it lets all go.
    @Test func noNameIsTakenAsFreeBeyondTheBound() throws {
        let one = try TemporaryDirectory()
        let two = try TemporaryDirectory()
        defer {
            one.remove()
            two.remove()
        }
        for name in ["a", "b", "c"] {
            #expect(FileManager.default.createFile(atPath: one.file(name), contents: nil))
            #expect(FileManager.default.createFile(atPath: two.file(name), contents: nil))
        }
        guard !Self.foldsCase(one.path) else { return }
        let index = RecordIndex(namesKept: 5)
        index.prepare(one.path, keepingNames: true)
        index.prepare(two.path, keepingNames: true)
        #expect(index.listings(of: two.path) == 1)
        #expect(index.listedFree(one.file("d")), "three names and the directory: four")
        #expect(!index.listedFree(two.file("d")), "three names more would pass five")
        index.wrote(one.file("x"))
        #expect(index.listedFree(one.file("d")), "five kept")
        index.wrote(one.file("y"))
        #expect(!index.listedFree(one.file("d")), "the sixth lets all go")
        let roomy = RecordIndex(namesKept: 4)
        roomy.prepare(two.path, keepingNames: true)
        #expect(roomy.listedFree(two.file("d")))
    }

    /// A directory reached by two paths is one: what this process writes through one is not
    /// free through the other.
    @Test func aDirectoryReachedByTwoPathsIsOne() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let real = dir.file("real")
        let link = dir.file("link")
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: real)
        guard !Self.foldsCase(dir.path) else { return }
        let index = RecordIndex()
        index.prepare(real, keepingNames: true)
        index.prepare(link, keepingNames: true)
        #expect(index.listedFree(link + "/n.bin") && index.listedFree(real + "/n.bin"))
        index.noted(url: "http://example.com/n", destination: real + "/n.bin")
        #expect(!index.listedFree(link + "/n.bin"), "written through the other path")
    }

    /// A partial this process makes is at its name from its creation, before any record: a
    /// whole-file save does not take the name as free.
    @Test func aPartialIsWrittenBeforeItsRecord() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        guard !Self.foldsCase(dir.path) else { return }
        // A name no other test writes: the process's index binds directories by identity, and a
        // removed test directory's inode can come back.
        let name = "partial-\(UUID().uuidString).bin"
        RecordIndex.shared.prepare(dir.path, keepingNames: true)
        #expect(RecordIndex.shared.listedFree(dir.file(name)))
        let partial = PartialFile(destination: dir.file(name))
        try partial.open(at: 0)
        partial.close()
        #expect(!FileManager.default.fileExists(atPath: dir.file(name + ".haul")), "no record yet")
        #expect(!RecordIndex.shared.listedFree(dir.file(name)))
    }

    /// Whether names in `path` are compared without case (no names are kept there), or it
    /// cannot be told: TMPDIR on such a file system, or a system where haul does not ask.
    private static func foldsCase(_ path: String) -> Bool {
        Sys.readDirectory(path) { _ in }?.foldsCase ?? true
    }
}
