import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore
@testable import HaulServer

/// The checks at `haul serve`'s doors, each against what an attacker would send or plant.
@Suite("haul serve's doors: token, Host and Origin, paths, throttle")
struct DoorTests {
    @Test func aTokenIsMadeOnceInAFileOnlyThisUserCanRead() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/state/token"
        let first = try ServeToken.loadOrCreate(at: file)
        #expect(first.text.utf8.count == 64)
        #expect(try ServeToken.loadOrCreate(at: file).text == first.text)
        #expect("\(first)" == "ServeToken(…)")
        // Nothing left beside it: the temporary it was written to is gone.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path + "/state") == ["token"])
        var st = stat()
        #expect(lstat(file, &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(lstat(dir.path + "/state", &st) == 0 && st.st_mode & 0o777 == 0o700)
        #expect(ServeToken.random().text != ServeToken.random().text)
    }

    @Test(arguments: ["readable", "link", "garbage", "directory", "empty", "hardlink", "openparent"])
    func aTokenFileHaulDidNotMakeIsRefusedNotUsed(planted: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.path + "/state/token"
        mkdir(dir.path + "/state", 0o700)
        let known = String(repeating: "a", count: 64)
        switch planted {
        case "readable":  // another user could have read it
            _ = FileManager.default.createFile(atPath: file, contents: Data(known.utf8))
            chmod(file, 0o644)
        case "link":
            _ = FileManager.default.createFile(atPath: dir.path + "/elsewhere", contents: Data(known.utf8))
            chmod(dir.path + "/elsewhere", 0o600)
            symlink(dir.path + "/elsewhere", file)
        case "garbage":
            _ = FileManager.default.createFile(atPath: file, contents: Data("not a token".utf8))
            chmod(file, 0o600)
        case "empty":  // what a crash between create and write would leave, were it written in place
            _ = FileManager.default.createFile(atPath: file, contents: Data())
            chmod(file, 0o600)
        case "hardlink":  // a second name for it somewhere else
            _ = FileManager.default.createFile(atPath: file, contents: Data(known.utf8))
            chmod(file, 0o600)
            link(file, dir.path + "/copy")
        case "openparent":
            chmod(dir.path + "/state", 0o755)
        default:
            mkdir(file, 0o700)
        }
        #expect(throws: HaulError.self) { try ServeToken.loadOrCreate(at: file) }
        // Nothing was overwritten.
        if planted == "readable" { #expect(FileManager.default.contents(atPath: file) == Data(known.utf8)) }
    }

    @Test func theProofIsHMACSHA256AndOnlyTheTokensOwnMatches() throws {
        // RFC 4231, test case 2.
        let mac = ServeToken.hmacSHA256(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))
        #expect(Hex.string(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let token = ServeToken.random()
        let nonce = String(repeating: "ab", count: 16)
        let proof = token.proof(nonce: nonce)
        #expect(token.matchesProof(proof, nonce: nonce) && token.matchesProof(proof.uppercased(), nonce: nonce))
        #expect(!token.matchesProof(proof, nonce: String(repeating: "cd", count: 16)))
        #expect(!ServeToken.random().matchesProof(proof, nonce: nonce) && !token.matchesProof("", nonce: nonce))
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("127.1", true), ("0x7f.0.0.1", true), ("0.0.0.0", true), ("[::1]", true), ("[::]", true),
        ("[::ffff:127.0.0.1]", true), ("localhost.", true), ("LOCALHOST", true), ("a.localhost", true),
        ("10.0.0.1", false), ("[::2]", false), ("example.com", false), ("127.example", false),
    ])
    func everySpellingOfLoopbackIsTheDaemonsOwn(host: String, own: Bool) {
        #expect(ServeAPI.isLoopback(host) == own)
    }

    @Test func theTokenIsComparedWholly() throws {
        let token = try #require(ServeToken(text: String(repeating: "0", count: 63) + "1"))
        #expect(token.matches(token.text.utf8))
        #expect(!token.matches(String(repeating: "0", count: 64).utf8))
        #expect(!token.matches(token.text.dropLast().utf8))
        #expect(!token.matches((token.text + "0").utf8))
        #expect(!token.matches("".utf8))
        #expect(ServeToken(text: String(repeating: "A", count: 64)) == nil)  // lowercase hex only
        #expect(ServeToken(text: "abc") == nil)
    }

    @Test(arguments: [
        ("127.0.0.1:6800", true), ("localhost:6800", true), ("LOCALHOST:6800", true), ("[::1]:6800", true),
        ("nas.local:6800", true), ("127.0.0.1:6801", false), ("127.0.0.1", false), ("evil.example:6800", false),
        ("localhost.evil.example:6800", false), ("user@localhost:6800", false), ("localhost:6800/x", false),
        ("[::1]", false), ("::1:6800", false), ("localhost:06800", true), ("localhost:", false), ("", false),
        ("localhost:99999", false), ("local host:6800", false), ("localhost.:6800", false),
        ("[0:0:0:0:0:0:0:1]:6800", false), ("127.0.0.1:6800:6800", false), ("127.0.0.1%2e:6800", false),
        (String(repeating: "a", count: 400) + ":6800", false), ("xn--caf-dma.local:6800", false),
    ])
    func theHostHeaderMustNameThisDaemon(host: String, allowed: Bool) throws {
        let policy = try HostPolicy(port: 6800, extraNames: ["NAS.local"])
        let refused: ServeError? = {
            do throws(ServeError) {
                try policy.checkHost(host)
                return nil
            } catch { return error }
        }()
        #expect((refused == nil) == allowed, "\(host)")
        if let refused { #expect(refused.status == 421) }
    }

    @Test func aMissingHostIsABadRequestAndABadNameOrPortIsRefusedAtTheStart() throws {
        #expect(throws: ServeError(.badRequest, "a request without a Host header")) {
            try HostPolicy(port: 6800).checkHost(nil)
        }
        for name in ["nas.local:6800", "", "x.", ".x", "caf\u{E9}.local", "a b"] {
            #expect(throws: ServeError.self, "\(name)") { try HostPolicy(port: 6800, extraNames: [name]) }
        }
        for port in [0, 80, 65536] {
            #expect(throws: ServeError.self, "\(port)") { try HostPolicy(port: port) }
        }
        // What is echoed of a header is bounded and printable.
        let refused = try #require(throws: ServeError.self) {
            try HostPolicy(port: 6800).checkHost(String(repeating: "\u{1B}x", count: 300) + ":6800")
        }
        #expect(refused.message.utf8.count < 160 && !refused.message.contains("\u{1B}"), "\(refused.message)")
    }

    @Test func aChangeMustComeFromThisDaemonsPageOrCarryTheToken() throws {
        let policy = try HostPolicy(port: 6800)
        try policy.checkOrigin("http://127.0.0.1:6800", bearer: false)
        try policy.checkOrigin("http://LOCALHOST:6800", bearer: false)
        try policy.checkOrigin(nil, bearer: true)
        for origin in [
            "http://evil.example", "http://127.0.0.1:6801", "https://127.0.0.1:6800", "null", "http://127.0.0.1",
            "http://127.0.0.1:6800.evil.com", "http://localhost:6800/", "http://user@localhost:6800",
        ] {
            #expect(throws: ServeError.self, "\(origin)") { try policy.checkOrigin(origin, bearer: true) }
        }
        #expect(throws: ServeError.self) { try policy.checkOrigin(nil, bearer: false) }
    }

    @Test(arguments: [
        "/etc/passwd", "../x", "a/../../x", "a/..", "..", ".", "a/./b", "a//b", "a/", "", "a\u{0}b", "a\nb",
        "a\u{7F}", String(repeating: "x", count: 256), ".ssh/authorized_keys", "a/.hidden",
    ])
    func aNameThatLeavesTheRootOrIsNotANameIsRefused(name: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let root = try DownloadRoot(dir.path + "/root")
        #expect(throws: ServeError.self, "\(name.debugDescription)") { try root.resolve(name) }
    }

    @Test(
        arguments: [
            (nil, "f.iso.part"), (nil, "f.iso.HAUL"), (nil, "f.haul.tmp"), ("a", "../b"), ("a", "b/c"), ("..", "f"),
            (nil, String(repeating: "x", count: 201)), ("/etc", "passwd"), (nil, ".bashrc"),
        ] as [(String?, String)])
    func aFileNameThatIsNotOneFileOfTheRootsIsRefused(folder: String?, file: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let root = try DownloadRoot(dir.path + "/root")
        #expect(throws: ServeError.self, "\(String(describing: folder)) \(file)") {
            try root.resolve(folder: folder, file: file)
        }
    }

    @Test func theRootCannotBeSlashTheHomeOrAboveTheState() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.path + "/home"
        let state = home + "/.local/state"
        for root in ["/", home, home + "/", dir.path, home + "/.local", state] {
            #expect(throws: ServeError.self, "\(root)") { try DownloadRoot(root, home: home, state: state) }
        }
        #expect(try DownloadRoot(home + "/Downloads", home: home, state: state).path == home + "/Downloads")
        #expect(throws: ServeError.self) { try DownloadRoot("relative/dir", home: home, state: state) }
    }

    @Test func namesUnderTheRootResolveThere() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let root = try DownloadRoot(dir.path + "/root/")
        #expect(root.path == dir.path + "/root")
        #expect(try root.resolve("f.iso") == root.path + "/f.iso")
        #expect(try root.resolve("new/sub/f.iso") == root.path + "/new/sub/f.iso")
        #expect(try root.resolve("caf\u{E9} ..x/f..") == root.path + "/caf\u{E9} ..x/f..")
        #expect(try root.resolve(folder: "new/sub", file: "f.iso") == root.path + "/new/sub/f.iso")
        #expect(try root.resolve(folder: nil, file: "f...") == root.path + "/f...")
    }

    @Test(arguments: ["link/f", "link", "file/f", "dangling"])
    func aPlantedLinkOrFileOnTheWayIsRefused(name: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let root = try DownloadRoot(dir.path + "/root")
        mkdir(dir.path + "/outside", 0o700)
        symlink(dir.path + "/outside", root.path + "/link")  // ~/.ssh, for one
        symlink(dir.path + "/nothing", root.path + "/dangling")
        _ = FileManager.default.createFile(atPath: root.path + "/file", contents: Data())
        #expect(throws: ServeError.self, "\(name)") { try root.resolve(name) }
    }

    @Test func wrongTokensBeyondTheFreeOnesAreHeldBackLongerEachTime() {
        var throttle = FailureThrottle()
        #expect((0..<5).map { throttle.failed(now: Double($0)) } == [0, 0, 0, 0, 0])
        #expect(throttle.failed(now: 5) == 0.25)
        #expect(throttle.failed(now: 5.5) == 0.5)
        #expect(throttle.failed(now: 6) == 1)
        #expect((0..<30).map { _ in throttle.failed(now: 7) }.last == 30)  // the cap
        // A window later the count starts again.
        #expect(throttle.failed(now: 61) == 0)
    }
}
