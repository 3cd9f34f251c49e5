import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Destination claims: one download per file", .fewAtOnce)
struct DestinationClaimsTests {
    /// A directory name no other test, and no other test process, uses: a claim also locks the
    /// path for the user's other processes (two test runs at once shared fixed paths here).
    let base = "/tmp/haul-claims-\(UUID().uuidString)"

    /// A path's byte in the lock file is where every haul version looks for it: 62 bits of the
    /// SHA-256 of its key (Python: `int.from_bytes(sha256(key).digest()[:8], "big") & (2**62 - 1)`).
    @Test func aKeysLockOffsetIsTheSameInEveryVersion() {
        #expect(DestinationClaims.offset("2049:131073/report.pdf") == 4_504_653_827_192_504_257)
    }

    @Test func anotherOwnerIsRefusedTheSameFileSpelledDifferently() throws {
        let claims = DestinationClaims()
        let first = DestinationClaims.Owner()
        let second = DestinationClaims.Owner()
        try claims.claim("\(base)/x/dir/file.bin", for: first)
        for spelling in ["\(base)/x/dir/file.bin", "\(base)/x/dir/./file.bin", "\(base)/x/other/../dir/file.bin"] {
            let error = #expect(throws: HaulError.self) { try claims.claim(spelling, for: second) }
            #expect(error?.code == .destinationInUse)
            #expect(error?.path == spelling)
        }
        try claims.claim("\(base)/x/dir/other.bin", for: second)
        claims.releaseAll(of: first)
        claims.releaseAll(of: second)
    }

    /// A file kept after its download (a `haul get` run) stays refused to every later download,
    /// naming the URL it came from; a release does not free it.
    @Test func aKeptFileIsRefusedNamingWhereItCameFrom() throws {
        let claims = DestinationClaims()
        let first = DestinationClaims.Owner()
        try claims.claim("\(base)/k/file.bin", for: first)
        claims.keep(first, savedFrom: URL(string: "http://user:pw@a.example/file.bin")!)
        claims.releaseAll(of: first)
        for owner in [first, DestinationClaims.Owner()] {
            let error = #expect(throws: HaulError.self) { try claims.claim("\(base)/k/./file.bin", for: owner) }
            #expect(error?.code == .destinationInUse)
            #expect(
                error?.message
                    == "\(base)/k/./file.bin was saved from http://a.example/file.bin earlier in this run; "
                    + "give this download its own name")
        }
        #expect(!claims.isClaimed("\(base)/k/file.bin"), "kept, not in flight")
    }

    /// A directory reached through a symlink (as `~/Downloads -> /data/dl`) is the same
    /// directory: its files are claimed by device and inode, not by spelling.
    @Test func aSymlinkedDirectoryIsTheSameDirectory() throws {
        let real = "\(base)/real"
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createSymbolicLink(atPath: "\(base)/link", withDestinationPath: real)
        let claims = DestinationClaims()
        let first = DestinationClaims.Owner()
        let second = DestinationClaims.Owner()
        try claims.claim("\(real)/f.bin", for: first)
        for spelling in ["\(base)/link/f.bin", "\(base)//link/./f.bin", "\(base)/real/../link/f.bin"] {
            let error = #expect(throws: HaulError.self) { try claims.claim(spelling, for: second) }
            #expect(error?.code == .destinationInUse)
        }
        try claims.claim("\(base)/link/g.bin", for: second)
        #expect(claims.isClaimed("\(real)/g.bin"))
        claims.releaseAll(of: first)
        claims.releaseAll(of: second)
        #expect(!claims.isClaimed("\(base)/link/f.bin") && !claims.isClaimed("\(real)/g.bin"))
    }

    /// A name that begins with a combining mark: its `/` and the mark are one Character, and
    /// still two things to the kernel. The file is found through its directory (here a symlink
    /// to the real one) all the same.
    @Test func aNameBeginningWithACombiningMarkIsInItsDirectory() throws {
        let real = "\(base)/marks"
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createSymbolicLink(atPath: "\(base)/alias", withDestinationPath: real)
        #expect(Sys.parentDirectory(of: "\(real)/\u{301}x.bin") == real)
        #expect(Sys.split("/\u{301}x") == ("/", "\u{301}x"))
        #expect(Sys.split("\u{301}x") == (".", "\u{301}x"))
        for path in ["", "/", "//", "a/", "a", "/a", "a/b/c", "/\u{301}x", "\u{301}x", "dir/näme 漢字", "x/\u{301}"] {
            #expect(Sys.name(of: path) == Sys.split(path).name, "\(path)")
        }
        #expect(Sys.split("") == (".", "") && Sys.split("/") == ("/", "") && Sys.split("a/") == ("a", ""))
        let claims = DestinationClaims()
        let first = DestinationClaims.Owner()
        try claims.claim("\(real)/\u{301}x.bin", for: first)
        let error = #expect(throws: HaulError.self) {
            try claims.claim("\(base)/alias/\u{301}x.bin", for: DestinationClaims.Owner())
        }
        #expect(error?.code == .destinationInUse)
        claims.releaseAll(of: first)
        // Its name is its own bytes, not the directory's name before them: a directory of 240
        // bytes does not make it too long.
        let long = "\(real)/" + String(repeating: "d", count: 240)
        try PartialFile.prepareDirectory(of: "\(long)/\u{301}x.bin", creating: true)
        #expect(Sys.isDirectory(long))
    }

    @Test(arguments: [
        ("/a/./b//c", "/a/b/c"), ("/a/x/../b", "/a/b"), ("/../a", "/a"), ("/", "/"), ("a/../../b", "../b"),
        ("./a/", "a"), (".", "."), ("a/..", "."), ("", "."), ("/a/b/", "/a/b"), ("a//b", "a/b"), ("/a/..", "/"),
        ("/a/.b/c..d/...", "/a/.b/c..d/..."), ("/a/b.bin", "/a/b.bin"), ("rel/x", "rel/x"), ("/a/b/.", "/a/b"),
        // A "/" or "." before a combining mark is one Character and still a separator or a dot.
        ("a/../\u{301}x", "\u{301}x"), ("/a/\u{301}/..", "/a"), ("/a/..\u{301}", "/a/..\u{301}"),
        ("/a/./\u{301}", "/a/\u{301}"),
    ])
    func lexicalNormalization(path: String, expected: String) {
        #expect(Sys.lexicallyNormalized(path) == expected)
    }

    @Test func theOwnerMayClaimAgainAndReleasingFreesEverything() throws {
        let claims = DestinationClaims()
        let owner = DestinationClaims.Owner()
        try claims.claim("\(base)/y/a.bin", for: owner)
        try claims.claim("\(base)/y/a.bin", for: owner)  // a segmented download handing over
        try claims.claim("\(base)/y/b.bin", for: owner)
        claims.releaseAll(of: owner)
        #expect(!claims.isClaimed("\(base)/y/a.bin") && !claims.isClaimed("\(base)/y/b.bin"))
        let next = DestinationClaims.Owner()
        try claims.claim("\(base)/y/a.bin", for: next)
        claims.releaseAll(of: next)
    }

    @Test func releasingDoesNotFreeAnotherOwnersFile() throws {
        let claims = DestinationClaims()
        let holder = DestinationClaims.Owner()
        let refused = DestinationClaims.Owner()
        try claims.claim("\(base)/z/f.bin", for: holder)
        #expect(throws: HaulError.self) { try claims.claim("\(base)/z/f.bin", for: refused) }
        claims.releaseAll(of: refused)
        #expect(claims.isClaimed("\(base)/z/f.bin"))
        claims.releaseAll(of: holder)
    }
}
