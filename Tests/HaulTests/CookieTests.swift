import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@Suite("Cookies: a session's jar", .fewAtOnce)
struct CookieTests {
    static func encoded(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }

    /// Set by a redirect's answer, sent to its target on the same host; not to another host.
    @Test func aRedirectsCookieGoesToItsHostOnly() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        let same = Self.encoded("/same.bin?size=10")
        let other = Self.encoded("http://localhost:\(server.port)/other.bin?size=10")
        for (name, to) in [("a", same), ("b", other)] {
            let (result, _) = await run(
                session, server.url("/start-\(name)?to=\(to)&setcookie=\(Self.encoded("sid=\(name)1; Path=/"))"),
                to: .directory(dir.url))
            #expect(result.error == nil, "\(String(describing: result.error))")
        }
        #expect(server.requests(path: "/same.bin").map { $0.header("Cookie") } == ["sid=a1"])
        #expect(server.requests(path: "/other.bin").map { $0.header("Cookie") } == [nil])
        // The second set replaced the first; localhost has none.
        #expect(session.cookieJar?.cookies.map { "\($0.domain) \($0.name)=\($0.value)" } == ["127.0.0.1 sid=b1"])
    }

    /// Every range of a segmented download sends the cookie the probe's answer set.
    @Test func rangesSendTheProbesCookie() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = 4
        options.minSplitSize = 100_000
        let (result, _) = await run(
            testSession(), server.url("/big.bin?size=1000000&setcookie=\(Self.encoded("k=v"))"),
            to: .directory(dir.url), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        let requests = server.requests(path: "/big.bin")
        #expect(requests.count >= 2)
        #expect(requests.first?.header("Cookie") == nil)
        #expect(
            requests.dropFirst().allSatisfy { $0.header("Cookie") == "k=v" }, "\(requests.map { $0.header("Cookie") })")
    }

    @Test func aGivenCookieHeaderComesFirstAndNoJarKeepsNone() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let shared = HaulCookieJar()
        #expect(shared.setCookie(HaulCookie(name: "jar", value: "1", domain: ".127.0.0.1")))
        for bad in [
            HaulCookie(name: "a;b", value: "1", domain: "h"), HaulCookie(name: "a", value: "1;x=2", domain: "h"),
            HaulCookie(name: "a", value: "1\r\n", domain: "h"),
            HaulCookie(name: "a", value: "1", domain: "h", path: "x"),
        ] {
            #expect(!shared.setCookie(bad), "\(bad)")
        }
        var options = DownloadOptions()
        options.headers = ["Cookie": "mine=2"]
        _ = await run(
            testSession { $0.cookieJar = shared }, server.url("/a.bin?size=10"), to: .directory(dir.url),
            options: options)
        #expect(server.requests(path: "/a.bin").map { $0.header("Cookie") } == ["mine=2; jar=1"])
        let off = testSession {
            $0.cookieJar = shared
            $0.httpShouldSetCookies = false
        }
        #expect(off.cookieJar == nil)
        for _ in 0..<2 {
            _ = await run(
                off, server.url("/b.bin?size=10&setcookie=x=1"), to: .directory(dir.url), options: DownloadOptions())
        }
        #expect(server.requests(path: "/b.bin").map { $0.header("Cookie") } == [nil, nil])
        #expect(shared.cookies.map(\.name) == ["jar"])
    }

    @Test func theJarIsWrittenForItsOwnerAndReadBack() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        _ = await run(
            session, server.url("/c.bin?size=10&setcookie=\(Self.encoded("a=1; Max-Age=3600|b=2; HttpOnly"))"),
            to: .directory(dir.url))
        let file = dir.file("cookies.txt")
        try #require(session.cookieJar).write(toNetscapeFile: file)
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let back = HaulCookieJar()
        #expect(try back.read(netscapeFile: file) == 2)
        #expect(back.cookies.map(\.name) == ["a", "b"])
        #expect(back.cookies.last?.isHTTPOnly == true && back.cookies.last?.expiresDate == nil)
        #expect(throws: HaulError.self) { try back.read(netscapeFile: dir.path) }
    }
}
