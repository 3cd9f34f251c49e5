import CHaulCurl
import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `Sys.linkUnnamed` names an unnamed file by its descriptor where the kernel lets its opener
/// (Linux 6.10), else through /proc: both ways give the name, and neither replaces what is there.
@Suite(.fewAtOnce) struct UnnamedFileTests {
    /// The test process's umask, as haul reads it (0 where it cannot be read).
    static let umask = Sys.processUmask ?? 0

    /// An unnamed file in `dir` holding `bytes`; nil where there are none (then nothing to test).
    func unnamed(in dir: TemporaryDirectory, _ bytes: [UInt8]) throws -> Int32? {
        guard let fd = try Sys.openUnnamed(inDirectory: dir.path) else { return nil }
        try bytes.withUnsafeBytes { try Sys.pwriteAll(fd, $0, at: 0) }
        return fd
    }

    @Test(arguments: ["descriptor or proc", "proc"])
    func eitherWayNamesTheFileAndNeverReplaces(way: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let link: (Int32, String) -> Int32 = { fd, path in
            way == "proc" ? haul_link_unnamed_through_proc(fd, path) : haul_link_unnamed(fd, path)
        }
        guard let fd = try unnamed(in: dir, Array("first".utf8)) else { return }
        defer { Sys.close(fd) }
        #expect(link(fd, dir.file("a")) == 0)
        #expect(try Sys.readSmallFile(dir.file("a")) == Array("first".utf8))
        #expect(FileManager.default.createFile(atPath: dir.file("taken"), contents: Data("theirs".utf8)))
        guard let other = try unnamed(in: dir, Array("second".utf8)) else { return }
        defer { Sys.close(other) }
        #expect(link(other, dir.file("taken")) == EEXIST)
        #expect(try Sys.readSmallFile(dir.file("taken")) == Array("theirs".utf8))
        // A symbolic link at the name is not followed: the name is taken.
        try FileManager.default.createSymbolicLink(atPath: dir.file("sym"), withDestinationPath: dir.file("elsewhere"))
        #expect(link(other, dir.file("sym")) == EEXIST)
        #expect(!FileManager.default.fileExists(atPath: dir.file("elsewhere")))
        #expect(link(other, dir.file("missing/b")) == ENOENT)
        #expect(dir.contents() == ["a", "sym", "taken"])
    }

    /// Where the kernel refuses the descriptor's own link (ENOENT before Linux 6.10 without
    /// CAP_DAC_READ_SEARCH, EPERM in some sandboxes), /proc names the file, and the descriptor is
    /// not tried again in this process. (Steered through a debug build's hook: this kernel
    /// allows the link. Other tests' links meanwhile take /proc too, which names them alike.)
    @Test(.serialized, arguments: [ENOENT, EPERM])
    func aRefusedDescriptorLinkFallsBackToProcOnce(refusal: Int32) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        haul_test_refuse_empty_path_links(refusal)
        defer { haul_test_refuse_empty_path_links(0) }
        guard let first = try unnamed(in: dir, Array("one".utf8)) else { return }
        defer { Sys.close(first) }
        #expect(haul_link_unnamed(first, dir.file("one")) == 0)
        #expect(haul_test_empty_path_link_tries() >= 1)
        let tried = haul_test_empty_path_link_tries()
        guard let second = try unnamed(in: dir, Array("two".utf8)) else { return }
        defer { Sys.close(second) }
        #expect(haul_link_unnamed(second, dir.file("two")) == 0)
        #expect(haul_test_empty_path_link_tries() == tried, "learned: /proc at once")
        #expect(try Sys.readSmallFile(dir.file("one")) == Array("one".utf8))
        #expect(try Sys.readSmallFile(dir.file("two")) == Array("two".utf8))
    }

    /// The directory's default ACL decides an unnamed file's mode where there is one; a directory
    /// found without one is not asked again (an ACL given to it later narrows files to the
    /// umask's mode, never widens them), and one that could not be asked (missing) is asked
    /// again. Needs a file system with ACLs and unnamed files (else it has nothing to look at),
    /// and a umask that takes something from 0666 (else nothing tells the two modes apart).
    @Test(.enabled(if: 0o666 & ~UnnamedFileTests.umask != 0o666, "the umask takes nothing from 0666"))
    func aDirectoryIsAskedForItsDefaultACLUntilItIsKnownToHaveNone() throws {
        let umask = Self.umask
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let modeOfNewFile = { (directory: String) throws -> mode_t? in
            guard let fd = try Sys.openUnnamed(inDirectory: directory, mode: 0o666) else { return nil }
            defer { Sys.close(fd) }
            var st = stat()
            #expect(fstat(fd, &st) == 0)
            return st.st_mode & 0o777
        }
        guard try modeOfNewFile(dir.path) != nil else { return }
        let shared = dir.file("shared")
        let plain = dir.file("plain")
        let late = dir.file("late")
        #expect(throws: Errno.self) { try modeOfNewFile(late) }
        for path in [shared, plain, late] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        }
        guard try DefaultACL.set(shared, user: 6, group: 6, other: 6) else { return }
        #expect(try modeOfNewFile(shared) == 0o666, "the ACL decides")
        #expect(try modeOfNewFile(plain) == 0o666 & ~umask, "the umask (the kernel's too): found without an ACL")
        #expect(try DefaultACL.set(plain, user: 6, group: 6, other: 6))
        #expect(try modeOfNewFile(plain) == 0o666 & ~umask, "not asked again: narrower than the ACL")
        #expect(try DefaultACL.set(late, user: 6, group: 6, other: 6))
        #expect(try modeOfNewFile(late) == 0o666, "missing when first asked: asked again")
    }
}
