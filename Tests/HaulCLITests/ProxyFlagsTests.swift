import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// `--proxy`, `--noproxy`, `--proxy-user` and the proxy environment, against proxies the tests
/// start.
@Suite("haul get: proxies", .enabled(if: TestProxy.available, "needs timeout and python3"), .fewAtOnce)
struct ProxyFlagsTests {
    static func basic(_ credential: String) -> String { "Basic " + Data(credential.utf8).base64EncodedString() }

    /// The proxy variables of the machine running the tests, emptied (curl reads an empty one
    /// as unset): a CI's `NO_PROXY=127.0.0.1` would send these requests around the proxy.
    static let noProxyEnvironment = Dictionary(
        uniqueKeysWithValues: [
            "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
            "no_proxy", "NO_PROXY",
        ].map { ($0, "") })

    static func run(_ args: [String], environment: [String: String] = [:]) async throws -> CLIRun {
        try await CLI.run(args, environment: noProxyEnvironment.merging(environment) { $1 })
    }

    /// What the proxy saw, once it has logged `count` requests.
    static func seen(_ proxy: TestProxy, count: Int) async -> [TestProxy.Request] {
        _ = await eventually(timeout: 10) { proxy.requests.count >= count }
        return proxy.requests
    }

    @Test func anHTTPProxyForwardsHTTPAndTunnelsHTTPS() async throws {
        let server = try TestServer()
        let tls = try await SelfSignedHTTPSServer(serving: ["t.bin": TestContent.bytes(count: 3000)])
        let proxy = try await TestProxy(.http)
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            tls.stop()
            dir.remove()
        }
        let plain = server.url("/p.bin?size=2000").absoluteString
        let r = try await Self.run(["get", "-q", "--proxy", proxy.url(), "-o", dir.file("p.bin"), plain])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("p.bin"), equals: TestContent.bytes(count: 2000))
        let secure = try await Self.run([
            "get", "-q", "--proxy", "127.0.0.1:\(proxy.port)", "--cacert", tls.certificate, "-o", dir.file("t.bin"),
            tls.url("/t.bin").absoluteString,
        ])
        #expect(secure.status == 0, "\(secure.stderr)")
        expectFile(dir.file("t.bin"), equals: TestContent.bytes(count: 3000))
        let seen = await Self.seen(proxy, count: 2)
        #expect(seen.first == .init(method: "GET", target: plain, auth: ""))
        #expect(seen.dropFirst().allSatisfy { $0.method == "CONNECT" && $0.target == "127.0.0.1:\(tls.port)" })
        #expect(server.requests(path: "/p.bin").count == 1)
    }

    /// Every range of a segmented download goes through the proxy, with its credentials.
    @Test func rangesGoThroughAProxyThatAsksForCredentials() async throws {
        let server = try TestServer()
        let proxy = try await TestProxy(.http, credential: "pu:pp")
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            dir.remove()
        }
        let url = server.url("/big.bin?size=3000000").absoluteString
        let r = try await Self.run([
            "get", "-q", "-x", "4", "--proxy", proxy.url(credential: "pu:pp"), "-o", dir.file("big.bin"), url,
        ])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("big.bin"), equals: TestContent.bytes(count: 3_000_000))
        let ranges = server.requests(path: "/big.bin")
        #expect(ranges.count >= 2)
        let seen = await Self.seen(proxy, count: ranges.count)
        #expect(seen.count == ranges.count)
        #expect(seen.allSatisfy { $0.auth == Self.basic("pu:pp") && $0.target == url })
        // Without them: the proxy's 407 is an HTTP error (exit 4), naming no credential.
        let refused = try await Self.run([
            "get", "--proxy", proxy.url(credential: "pu:wrongpw"), "-o", dir.file("no.bin"), url,
        ])
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(refused.stderr.contains("HTTP 407 Proxy Authentication Required"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("wrongpw"))
        let separate = try await Self.run([
            "get", "-q", "--proxy", proxy.url(), "--proxy-user", "pu:pp", "-o", dir.file("s.bin"),
            server.url("/s.bin?size=10").absoluteString,
        ])
        #expect(separate.status == 0, "\(separate.stderr)")
    }

    /// Through a tunnel, the answer is the server's, not the proxy's `200 Connection
    /// established`: a missing file is a 404 (exit 4), not an empty file.
    @Test func throughATunnelTheServersStatusCounts() async throws {
        let tls = try await SelfSignedHTTPSServer(serving: ["t.bin": TestContent.bytes(count: 3000)])
        let proxy = try await TestProxy(.http)
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            tls.stop()
            dir.remove()
        }
        let r = try await Self.run([
            "get", "--proxy", proxy.url(), "--cacert", tls.certificate, "-o", dir.file("none.bin"),
            tls.url("/none.bin").absoluteString,
        ])
        #expect(r.status == 4, "\(r.stderr)")
        #expect(r.stderr.contains("HTTP 404"), "\(r.stderr)")
        #expect(dir.contents().isEmpty)
        #expect(await Self.seen(proxy, count: 1).allSatisfy { $0.method == "CONNECT" })
    }

    /// With socks5h the name goes to the proxy; `--check-host` does not resolve it here either.
    @Test func aNameOnlyTheProxyKnowsWithCheckHost() async throws {
        let server = try TestServer()
        let proxy = try await TestProxy(.socks5)
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            dir.remove()
        }
        let r = try await Self.run([
            "get", "-q", "--check-host", "--proxy", proxy.url(), "-o", dir.file("f.bin"),
            "http://site.haul.test:\(server.port)/f.bin?size=100",
        ])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("f.bin"), equals: TestContent.bytes(count: 100))
        #expect(await Self.seen(proxy, count: 1).map(\.target) == ["site.haul.test:\(server.port)"])
    }

    /// A SOCKS proxy that refuses the credentials: exit 3, one line naming the proxy, no secret.
    @Test func aSOCKSRefusalNamesTheProxy() async throws {
        let proxy = try await TestProxy(.socks5, credential: "su:sp")
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            dir.remove()
        }
        let r = try await Self.run([
            "get", "--proxy", proxy.url(credential: "su:n0tright"), "-o", dir.file("f.bin"),
            "http://a.haul.test:1/f.bin",
        ])
        #expect(r.status == 3, "\(r.stderr)")
        #expect(r.stderr.hasPrefix("haul: error: proxy failed on the way to a.haul.test"), "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").count == 1 && !r.stderr.contains("n0tright"), "\(r.stderr)")
    }

    /// A tunnel the proxy refuses (407 to CONNECT) ends the download at once with that status,
    /// not a retried connection.
    @Test func aRefusedTunnelIsA407() async throws {
        let proxy = try await TestProxy(.http, credential: "pu:pp")
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            dir.remove()
        }
        let r = try await Self.run([
            "get", "--insecure", "--proxy", proxy.url(), "-o", dir.file("x.bin"), "https://127.0.0.1:1/x.bin",
        ])
        #expect(r.status == 4, "\(r.stderr)")
        #expect(r.stderr.contains("HTTP 407 Proxy Authentication Required from the proxy"), "\(r.stderr)")
        #expect(await Self.seen(proxy, count: 1).map(\.method) == ["CONNECT"])
        #expect(dir.contents().isEmpty)
    }

    /// socks5h: the proxy resolves the name (it is asked for `localhost`, not an address).
    @Test func socks5hLetsTheProxyResolveTheName() async throws {
        let server = try TestServer()
        let proxy = try await TestProxy(.socks5, credential: "su:sp")
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            dir.remove()
        }
        let r = try await Self.run([
            "get", "-q", "--proxy", proxy.url(credential: "su:sp"), "-o", dir.file("f.bin"),
            "http://localhost:\(server.port)/f.bin?size=1000",
        ])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("f.bin"), equals: TestContent.bytes(count: 1000))
        let seen = await Self.seen(proxy, count: 1)
        #expect(seen == [.init(method: "SOCKS5", target: "localhost:\(server.port)", auth: "su:sp")])
    }

    /// The environment as curl reads it: `http_proxy`, not `HTTP_PROXY`; `no_proxy` and
    /// `--noproxy` skip it; `--proxy ''` ignores it.
    @Test func theEnvironmentAsCurlReadsIt() async throws {
        let server = try TestServer()
        let proxy = try await TestProxy(.http)
        let dir = try TemporaryDirectory()
        defer {
            proxy.stop()
            dir.remove()
        }
        func get(_ name: String, _ flags: [String], _ env: [String: String]) async throws -> CLIRun {
            try await Self.run(
                ["get", "-q", "-o", dir.file(name), server.url("/\(name)?size=10").absoluteString] + flags,
                environment: env)
        }
        let via = proxy.url()
        for (name, flags, env) in [
            ("env.bin", [], ["http_proxy": via]),
            ("all.bin", [], ["all_proxy": via]),
            ("upper.bin", [], ["HTTP_PROXY": via]),
            ("noenv.bin", [], ["http_proxy": via, "no_proxy": "127.0.0.1"]),
            ("noflag.bin", ["--noproxy", "127.0.0.1"], ["http_proxy": via]),
            ("none.bin", ["--proxy", ""], ["http_proxy": via]),
        ] as [(String, [String], [String: String])] {
            let r = try await get(name, flags, env)
            #expect(r.status == 0, "\(name): \(r.stderr)")
        }
        _ = await Self.seen(proxy, count: 2)
        #expect(proxy.requests.map(\.target).map { URL(string: $0)?.lastPathComponent } == ["env.bin", "all.bin"])
        #expect(server.requests.count == 6)
    }

    @Test(arguments: [
        (["--proxy", "ftp://127.0.0.1:1"], "proxy ftp://127.0.0.1:1: the scheme must be one of"),
        (["--proxy", "http://"], "proxy http:// has no host"),
        (["--proxy-user", "nocolon"], "--proxy-user expects USER:PASSWORD"),
        (["--noproxy", "a b"], "noProxy entry 'a b' is not a host name"),
        (["--proxy", "http://u:s3cret@h:99999"], "proxy http://h:99999: port 99999 is not 1-65535"),
        (["--proxy", "http://u:se%0d%0acret@127.0.0.1:1"], "proxy http://127.0.0.1:1: a control character in it"),
    ])
    func badFlagsAreUsageErrorsBeforeAnyRequest(flags: [String], message: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await Self.run(["get", "-d", dir.path, server.url("/f.bin?size=10").absoluteString] + flags)
        #expect(r.status == 2, "\(r.stderr)")
        #expect(
            r.stderr.hasPrefix("haul: error: \(message)") && r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
        #expect(server.requests.isEmpty)
    }
}
