import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// `-u`, `--netrc` and `--netrc-file` through the spawned `haul`.
@Suite("haul get and upload: credentials", .fewAtOnce)
struct AuthFlagsTests {
    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    @Test func userFlagAuthenticatesAndNeverShowsThePassword() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let url = server.url("/locked.bin?size=1000&auth=alice:pa:ss%20w").absoluteString
        let ok = try await CLI.run(["get", "-u", "alice:pa:ss w", "-o", dir.file("ok.bin"), url])
        #expect(ok.status == 0, "\(ok.stderr)")
        expectFile(dir.file("ok.bin"), equals: TestContent.bytes(count: 1000))
        for flags in [["-u", "alice:wr0ngpw"], ["-u", "alice:wr0ngpw", "--json"], []] {
            let r = try await CLI.run(["get", "-o", dir.file("no.bin"), url] + flags)
            #expect(r.status == 4, "\(flags): \(r.stderr)")
            #expect((r.stderr + r.stdout).contains("401"), "\(r.stderr)")
            #expect(!r.stderr.contains("wr0ngpw") && !r.stdout.contains("wr0ngpw"))
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("no.bin")))
        #expect(!dir.contents().contains { $0.hasSuffix(".haul") })
    }

    @Test func netrcFromHomeAndFromAFileGoesToEachHost() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = dir.file("home")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        try Data("machine 127.0.0.1 login alice password one\nmachine localhost login bob password two\n".utf8)
            .write(to: URL(fileURLWithPath: home + "/.netrc"))
        let there = "http://localhost:\(server.port)/land.bin?size=10&auth=bob:two"
            .addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let start = server.url("/start?auth=alice:one&to=\(there)").absoluteString
        let fromHome = try await CLI.run(
            ["get", "-q", "--netrc", "-o", dir.file("a.bin"), start], environment: ["HOME": home])
        #expect(fromHome.status == 0, "\(fromHome.stderr)")
        let fromFile = try await CLI.run([
            "get", "-q", "--netrc-file", home + "/.netrc", "-o", dir.file("b.bin"), start,
        ])
        #expect(fromFile.status == 0, "\(fromFile.stderr)")
        #expect(
            server.requests(path: "/land.bin").map { $0.header("Authorization") } == [
                Self.basic("bob", "two"), Self.basic("bob", "two"),
            ])
        // No ~/.netrc: no credential, and no error either (curl's way).
        let none = try await CLI.run(
            ["get", "-q", "--netrc", "-o", dir.file("c.bin"), server.url("/open.bin?size=10").absoluteString],
            environment: ["HOME": dir.file("nowhere")])
        #expect(none.status == 0, "\(none.stderr)")
        #expect(server.requests(path: "/open.bin").map { $0.header("Authorization") } == [nil])
    }

    @Test func uploadTakesTheSameFlags() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Data("hello".utf8).write(to: dir.url.appendingPathComponent("up.txt"))
        let r = try await CLI.run([
            "upload", "-q", "-u", "carol:c4rol", server.url("/put?upload=raw").absoluteString, "-T", dir.file("up.txt"),
        ])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.requests(path: "/put").map { $0.header("Authorization") } == [Self.basic("carol", "c4rol")])
    }

    @Test(arguments: [
        (["-u", "alice"], "-u expects USER:PASSWORD"),
        (["-u", ":pw"], "-u expects USER:PASSWORD, with a user name"),
        (["--netrc-file", "/nonexistent/netrc"], "cannot read netrc file /nonexistent/netrc"),
        (["--netrc", "--netrc-file", "x"], "use either --netrc or --netrc-file"),
    ])
    func badFlagsAreUsageErrorsBeforeAnyRequest(flags: [String], message: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await CLI.run(["get", "-d", dir.path, server.url("/f.bin?size=10").absoluteString] + flags)
        #expect(r.status == 2)
        #expect(
            r.stderr.hasPrefix("haul: error: \(message)") && r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
        #expect(server.requests.isEmpty)
    }
}
