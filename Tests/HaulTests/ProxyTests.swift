import Foundation
import Haul
import HaulFoundation
import HaulTestSupport
import HaulTestTraits
import Testing

@Suite("Proxies: HaulConfiguration.proxy", .enabled(if: TestProxy.available, "needs timeout and python3"), .fewAtOnce)
struct ProxyTests {
    @Test func downloadsStreamsAndUploadsGoThroughIt() async throws {
        let server = try TestServer()
        let proxy = try await TestProxy(.http)
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            cleanUp(server, dir)
        }
        let session = testSession {
            $0.proxy = .url(URL(string: proxy.url())!)
            $0.noProxy = []  // whatever NO_PROXY the machine running the tests has
            $0.proxyCredential = .init(user: "ignored", password: "by-this-proxy")
        }
        let (result, _) = await run(session, server.url("/d.bin?size=5000"), to: .directory(dir.url))
        #expect(result.error == nil, "\(String(describing: result.error))")
        let (data, _) = try await session.data(from: server.url("/m.bin?size=100"))
        #expect(Array(data) == TestContent.bytes(count: 100))
        try Data("hi".utf8).write(to: dir.url.appendingPathComponent("u.txt"))
        _ = try await session.upload(fileAt: dir.url.appendingPathComponent("u.txt"), to: server.url("/put?upload=raw"))
        _ = await eventually(timeout: 10) { proxy.requests.count >= 3 }
        #expect(proxy.requests.map { URL(string: $0.target)?.path } == ["/d.bin", "/m.bin", "/put"])
        let basic = "Basic " + Data("ignored:by-this-proxy".utf8).base64EncodedString()
        #expect(proxy.requests.allSatisfy { $0.auth == basic })
    }

    @Test func noProxyHostsAndNoneGoDirect() async throws {
        let server = try TestServer()
        let proxy = try await TestProxy(.http)
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            cleanUp(server, dir)
        }
        let via = URL(string: proxy.url())!
        let skipped = testSession {
            $0.proxy = .url(via)
            $0.noProxy = ["localhost", "127.0.0.1"]
        }
        let (a, _) = await run(skipped, server.url("/a.bin?size=10"), to: .directory(dir.url))
        #expect(a.error == nil)
        let (b, _) = await run(testSession { $0.proxy = .none }, server.url("/b.bin?size=10"), to: .directory(dir.url))
        #expect(b.error == nil)
        #expect(server.requests.count == 2)
        #expect(proxy.requests.isEmpty)
        #expect("\(HaulConfiguration.Proxy.url(URL(string: "http://u:secret@p:3128")!))" == "http://p:3128")
    }

    /// libcurl quotes a proxy's URL in some messages; its password never gets through.
    @Test func messagesLoseTheProxysPassword() {
        var c = HaulConfiguration()
        c.proxy = .url(URL(string: "http://u:p%40ss@p:3128")!)
        let scrubbed = c.connectionSettings.scrubbed("bad proxy 'http://u:p%40ss@p:3128' (u:p@ss@p), port 3128")
        #expect(scrubbed == "bad proxy 'http://u:***@p:3128' (u:***@p), port 3128")
        c.proxy = .url(URL(string: "http://u:3@p:3128")!)
        #expect(c.connectionSettings.scrubbed("port 3128 of http://u:3@p:3128") == "port 3128 of http://u:***@p:3128")
    }

    @Test(arguments: ["ftp://p:21", "socks5h://"])
    func anUnusableProxyFailsBeforeAnyRequest(proxy: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (result, _) = await run(
            testSession { $0.proxy = .url(URL(string: proxy)!) }, server.url("/f.bin?size=10"), to: .directory(dir.url))
        #expect(result.error?.code == .usage, "\(String(describing: result.error))")
        #expect(server.requests.isEmpty)
    }

    @Test func urlSessionRefusesProxySettings() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession {
            $0.transport = .urlSession
            $0.proxy = .none
        }
        let (result, _) = await run(session, server.url("/f.bin?size=10"), to: .directory(dir.url))
        #expect(result.error?.code == .usage)
        #expect(
            result.error?.message.contains("need the curl transport") == true, "\(String(describing: result.error))")
        #expect(server.requests.isEmpty)
    }
}
