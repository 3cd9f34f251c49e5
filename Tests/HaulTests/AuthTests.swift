import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@Suite("Basic credentials and netrc files", .fewAtOnce)
struct AuthTests {
    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// `http://localhost:PORT/...` on the same server: another origin than 127.0.0.1.
    static func elsewhere(_ server: TestServer, _ path: String) -> String {
        "http://localhost:\(server.port)\(path)".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }

    @Test func theCredentialGoesToTheURLsHostAndNoFurther() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.credential = .init(user: "alice", password: "pa:55") }
        let (ok, _) = await run(
            session, server.url("/same.bin?size=10&redirect=2&auth=alice:pa:55"), to: .directory(dir.url))
        #expect(ok.error == nil, "\(String(describing: ok.error))")
        #expect(
            server.requests(path: "/same.bin").map { $0.header("Authorization") }
                == Array(repeating: Self.basic("alice", "pa:55"), count: 3))
        let (moved, _) = await run(
            session, server.url("/hop?to=\(Self.elsewhere(server, "/there.bin?size=10"))"), to: .directory(dir.url))
        #expect(moved.error == nil, "\(String(describing: moved.error))")
        #expect(server.requests(path: "/hop").first?.header("Authorization") == Self.basic("alice", "pa:55"))
        #expect(server.requests(path: "/there.bin").map { $0.header("Authorization") } == [nil])
    }

    /// Every range of a segmented download carries it.
    @Test func rangesCarryIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.credential = .init(user: "alice", password: "s3cretpw") }
        var options = DownloadOptions()
        options.connections = 4
        options.minSplitSize = 100_000
        let (result, _) = await run(
            session, server.url("/big.bin?size=1000000"), to: .directory(dir.url), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        let requests = server.requests(path: "/big.bin")
        #expect(requests.count >= 2)
        #expect(requests.allSatisfy { $0.header("Authorization") == Self.basic("alice", "s3cretpw") })
    }

    /// A download that fails part way leaves a record with none of the credential in it.
    @Test func theRecordKeepsNoneOfIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession {
            $0.credential = .init(user: "alice", password: "s3cretpw")
            $0.retry.maxRetries = 0
        }
        let dest = dir.url.appendingPathComponent("cut.bin")
        let (result, _) = await run(session, server.url("/cut.bin?size=500000&drop=150000"), to: .file(dest))
        let error = try #require(result.error)
        #expect(!error.message.contains("s3cretpw"))
        let record = String(decoding: bytes(at: dest.path + ".haul"), as: UTF8.self)
        #expect(record.contains("cut.bin"), "the record is there: \(record)")
        #expect(
            !record.contains("s3cretpw") && !record.contains("alice")
                && !record.contains(Self.basic("alice", "s3cretpw")))
    }

    @Test func aUserInTheURLOrAnAuthorizationHeaderComesFirst() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession { $0.credential = .init(user: "alice", password: "pw") }
        let inURL = URL(string: "http://bob:b0b@127.0.0.1:\(server.port)/u.bin?size=10")!
        _ = await run(session, inURL, to: .directory(dir.url))
        var options = DownloadOptions()
        options.headers = ["Authorization": "Bearer tok"]
        _ = await run(session, server.url("/h.bin?size=10"), to: .directory(dir.url), options: options)
        #expect(server.requests(path: "/u.bin").map { $0.header("Authorization") } == [Self.basic("bob", "b0b")])
        #expect(server.requests(path: "/h.bin").map { $0.header("Authorization") } == ["Bearer tok"])
    }

    @Test func aWrongOrMissingCredentialIsA401() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        for credential in [nil, HaulConfiguration.Credential(user: "alice", password: "wrong")] {
            let session = testSession { $0.credential = credential }
            let (result, _) = await run(
                session, server.url("/locked.bin?size=10&auth=alice:right"), to: .directory(dir.url))
            let error = try #require(result.error)
            #expect(error.httpStatus == 401, "\(error)")
            #expect(!error.message.contains("wrong"))
        }
        #expect(dir.contents().isEmpty)
        let credential = HaulConfiguration.Credential(user: "a", password: "hunter2")
        var dumped = ""
        dump(credential, to: &dumped)
        for shown in ["\(credential)", String(reflecting: credential), dumped] {
            #expect(!shown.contains("hunter2"), "\(shown)")
        }
    }

    @Test func netrcCredentialsGoToEachHostByName() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let netrc = dir.file("netrc")
        try Data("machine 127.0.0.1 login alice password one\nmachine localhost login bob password two\n".utf8)
            .write(to: URL(fileURLWithPath: netrc))
        let session = testSession { $0.netrcFile = netrc }
        let (result, _) = await run(
            session, server.url("/start?to=\(Self.elsewhere(server, "/land.bin?size=10&auth=bob:two"))"),
            to: .directory(dir.url.appendingPathComponent("out")),
            options: {
                var o = DownloadOptions()
                o.createIntermediateDirectories = true
                return o
            }())
        #expect(result.error == nil, "\(String(describing: result.error))")
        #expect(server.requests(path: "/start").map { $0.header("Authorization") } == [Self.basic("alice", "one")])
        #expect(server.requests(path: "/land.bin").map { $0.header("Authorization") } == [Self.basic("bob", "two")])
        // Uploads too.
        let file = dir.url.appendingPathComponent("up.txt")
        try Data("hello".utf8).write(to: file)
        let reply = try await session.upload(fileAt: file, to: server.url("/put?upload=raw"))
        #expect(reply.response.statusCode == 200)
        #expect(server.requests(path: "/put").map { $0.header("Authorization") } == [Self.basic("alice", "one")])
    }

    @Test(arguments: ["missing", "malformed", "badCredential"])
    func unusableSettingsFailBeforeAnyRequest(kind: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let netrc = dir.file("netrc")
        if kind == "malformed" { try Data("machine h login".utf8).write(to: URL(fileURLWithPath: netrc)) }
        let session = testSession {
            if kind == "badCredential" {
                $0.credential = .init(user: "a:b", password: "c")
            } else {
                $0.netrcFile = netrc
            }
        }
        let (result, _) = await run(session, server.url("/f.bin?size=10"), to: .directory(dir.url))
        let error = try #require(result.error)
        #expect(error.code == .usage, "\(error)")
        let expected = [
            "missing": "cannot read netrc file", "malformed": "line 1: 'login' has no value",
            "badCredential": "cannot contain ':'",
        ][kind]!
        #expect(error.message.contains(expected), "\(error.message)")
        #expect(server.requests.isEmpty)
    }
}
