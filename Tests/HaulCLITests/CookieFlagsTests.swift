import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// `-b` and `--cookie-jar` through the spawned `haul`.
@Suite("haul get and upload: cookies", .fewAtOnce)
struct CookieFlagsTests {
    static func encoded(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }

    @Test func aFileIsSentAndTheJarWrittenWithWhatTheServerSet() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let jar = dir.file("jar.txt")
        try Data("# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tfrom\tfile\n".utf8)
            .write(to: URL(fileURLWithPath: jar))
        let set = Self.encoded("new=1; Max-Age=600")
        let r = try await CLI.run([
            "get", "-q", "-b", jar, "--cookie-jar", jar, "-d", dir.path,
            server.url("/a.bin?size=10&setcookie=\(set)").absoluteString, server.url("/b.bin?size=10").absoluteString,
        ])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.requests(path: "/a.bin").map { $0.header("Cookie") } == ["from=file"])
        #expect(server.requests(path: "/b.bin").map { $0.header("Cookie") } == ["from=file; new=1"])
        let written = String(decoding: contents(jar), as: UTF8.self)
        #expect(written.contains("127.0.0.1\tFALSE\t/\tFALSE\t0\tfrom\tfile\n"), "\(written)")
        #expect(written.contains("\tnew\t1\n"), "\(written)")
        let mode = try FileManager.default.attributesOfItem(atPath: jar)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// With a '=' it is the header's text, as with curl, even where a file has that name.
    @Test func aLiteralCookieAndAMissingFileAreFine() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Data("127.0.0.1\tFALSE\t/\tFALSE\t0\tfrom\tfile\n".utf8).write(to: dir.url.appendingPathComponent("a=1"))
        let r = try await CLI.run(
            [
                "get", "-q", "-b", "a=1; b=2", "-b", dir.file("none.txt"), "-o", dir.file("x.bin"),
                server.url("/x.bin?size=10").absoluteString,
            ], in: dir.path)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.requests(path: "/x.bin").map { $0.header("Cookie") } == ["a=1; b=2"])
        #expect(dir.contents().sorted() == ["a=1", "x.bin"], "no jar written without --cookie-jar")
    }

    /// The downloads are saved; the jar that cannot be written is an error line and exit 5.
    @Test func aJarThatCannotBeWrittenIsExit5AfterTheDownload() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await CLI.run([
            "get", "-q", "--cookie-jar", dir.file("missing/jar.txt"), "-o", dir.file("x.bin"),
            server.url("/x.bin?size=10&setcookie=a=1").absoluteString,
        ])
        #expect(r.status == 5, "\(r.stderr)")
        #expect(r.stderr.hasPrefix("haul: error: ") && r.stderr.contains("cookie file"), "\(r.stderr)")
        expectFile(dir.file("x.bin"), equals: TestContent.bytes(count: 10))
    }

    @Test func uploadSendsAndKeepsCookiesToo() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Data("hello".utf8).write(to: dir.url.appendingPathComponent("up.txt"))
        let r = try await CLI.run([
            "upload", "-q", "-b", "u=1", "--cookie-jar", dir.file("jar"),
            server.url("/put?upload=raw&setcookie=kept%3D1").absoluteString, "-T", dir.file("up.txt"),
        ])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.requests(path: "/put").map { $0.header("Cookie") } == ["u=1"])
        #expect(String(decoding: contents(dir.file("jar")), as: UTF8.self).contains("\tkept\t1\n"))
    }

    @Test(arguments: [
        (["-b", "/"], "-b: "),
        (["--cookie-jar", ""], "--cookie-jar needs a file name"),
        (["-b", "-"], "-b - (cookies from standard input) is not supported"),
        (["--cookie-jar", "-"], "--cookie-jar - (standard output) is not supported"),
    ])
    func badFlagsAreUsageErrors(flags: [String], message: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await CLI.run(["get", "-d", dir.path, server.url("/f.bin?size=10").absoluteString] + flags)
        #expect(r.status == 2, "\(r.stderr)")
        #expect(
            r.stderr.hasPrefix("haul: error: \(message)") && r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
        #expect(server.requests.isEmpty)
    }
}
