import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// `--insecure`, `--pinnedpubkey`, `--http1.1` and `--http2` against servers the tests start.
@Suite(
    "haul get: TLS and HTTP version flags",
    .enabled(if: SelfSignedHTTPSServer.available, "needs openssl, timeout and python3"),
    .fewAtOnce)
struct TLSFlagsTests {
    static let body = TestContent.bytes(count: 1000)

    /// A valid pin of no key the server has.
    static let otherPin = "sha256//" + Data(repeating: 7, count: 32).base64EncodedString()

    @Test func insecureSkipsTheCheckAndWarnsEveryTimeEvenQuiet() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": Self.body])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        for extra in [[], ["-q"], ["--json"]] {
            let out = dir.file("f\(extra.count)-\(extra.first ?? "").bin")
            let r = try await CLI.run(["get", "--insecure", "-o", out, server.url("/f.bin").absoluteString] + extra)
            #expect(r.status == 0, "\(r.stderr)")
            expectFile(out, equals: Self.body)
            let warnings = r.stderr.split(separator: "\n").filter { $0.hasPrefix("haul: warning: --insecure") }
            #expect(warnings.count == 1, "\(extra): \(r.stderr)")
        }
    }

    @Test func theRightPinIsAcceptedWithOrWithoutVerification() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": Self.body])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let url = server.url("/f.bin").absoluteString
        let verified = try await CLI.run([
            "get", "-q", "--cacert", server.certificate, "--pinnedpubkey", "\(Self.otherPin);\(server.publicKeyPin)",
            "-o", dir.file("a.bin"), url,
        ])
        #expect(verified.status == 0, "\(verified.stderr)")
        expectFile(dir.file("a.bin"), equals: Self.body)
        let insecure = try await CLI.run([
            "get", "-q", "--insecure", "--pinnedpubkey", server.publicKeyPin, "-o", dir.file("b.bin"), url,
        ])
        #expect(insecure.status == 0, "\(insecure.stderr)")
        expectFile(dir.file("b.bin"), equals: Self.body)
    }

    /// A key that matches no pin fails as TLS (exit 7) at the first connection (no retry) and
    /// writes nothing, also with `--insecure` (the pin is the one check left then) and with a
    /// trusted certificate.
    @Test(arguments: [["--insecure"], ["--cacert"]])
    func aWrongPinFailsWith7AndWritesNothing(trust: [String]) async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": Self.body])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let flags = trust == ["--cacert"] ? ["--cacert", server.certificate] : trust
        let r = try await CLI.run(
            ["get", "--pinnedpubkey", Self.otherPin, "-d", dir.path, server.url("/f.bin").absoluteString] + flags)
        #expect(r.status == 7, "\(r.stderr)")
        #expect(r.stderr.contains("haul: error: TLS failure with 127.0.0.1"), "\(r.stderr)")
        #expect(r.stderr.contains("pinned public key"), "\(r.stderr)")
        #expect(dir.contents().isEmpty)
        _ = await eventually(timeout: 10) { !server.events.isEmpty }
        #expect(server.events.count == 1, "\(server.events)")
    }

    /// A connection reset during the handshake is a dropped connection (retried), not a TLS
    /// failure (exit 7 at once), over one connection and several.
    @Test(arguments: ["1", "4"])
    func aResetDuringTheHandshakeIsRetried(connections: String) async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": Self.body], resettingFirst: 1)
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let r = try await CLI.run([
            "get", "-q", "-x", connections, "--retry-delay", "0.1", "--cacert", server.certificate, "-o",
            dir.file("f.bin"), server.url("/f.bin").absoluteString,
        ])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("f.bin"), equals: Self.body)
        _ = await eventually(timeout: 10) { server.events.count >= 2 }
        #expect(server.events.first == "reset" && server.events.dropFirst().allSatisfy { $0.hasPrefix("alpn") })
    }

    /// Plain http has no key to check: a pinned download does not go there. The check is the
    /// transport's, made for each request, a redirect's hop included (that hop is not tested:
    /// the HTTPS test server does not redirect).
    @Test func pinsRefusePlainHTTP() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await CLI.run([
            "get", "--pinnedpubkey", Self.otherPin, "-d", dir.path, server.url("/f.bin?size=10").absoluteString,
        ])
        #expect(r.status == 7, "\(r.stderr)")
        #expect(r.stderr.contains("public keys are pinned, and an http:// URL has no TLS"), "\(r.stderr)")
        #expect(server.requests.isEmpty)
        #expect(dir.contents().isEmpty)
    }

    @Test func theInsecureWarningIsAlsoAJSONEvent() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": Self.body])
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let r = try await CLI.run([
            "get", "--json", "--insecure", "-o", dir.file("f.bin"), server.url("/f.bin").absoluteString,
        ])
        #expect(r.status == 0, "\(r.stderr)")
        let first = r.stdout.split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.hasPrefix("{\"event\":\"warning\",\"message\":\"--insecure: "), "\(r.stdout)")
    }

    @Test func offersHTTP2ByDefaultAndOnlyHTTP1WhenAsked() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": Self.body], offersHTTP2: true)
        let dir = try TemporaryDirectory()
        defer {
            server.stop()
            dir.remove()
        }
        let url = server.url("/f.bin").absoluteString
        // This server picks h2 when offered and then hangs up (it speaks HTTP/1.1 only). With no
        // retries that is one connection, the segmented download's probe.
        for flags in [[], ["--http2"]] {
            let r = try await CLI.run(
                ["get", "-q", "--retries", "0", "--cacert", server.certificate, "-o", dir.file("x.bin"), url] + flags)
            #expect(r.status == 3, "\(flags): \(r.stderr)")
        }
        _ = await eventually(timeout: 10) { server.events.count >= 2 }
        #expect(server.events == ["alpn h2", "alpn h2"])
        #expect(dir.contents().isEmpty)
        let r = try await CLI.run([
            "get", "-q", "--http1.1", "--cacert", server.certificate, "-o", dir.file("f.bin"), url,
        ])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("f.bin"), equals: Self.body)
        _ = await eventually(timeout: 10) { server.events.count >= 3 }
        #expect(server.events == ["alpn h2", "alpn h2", "alpn http/1.1"])
    }

    @Test(arguments: [
        (["--pinnedpubkey", "sha256//abc"], "--pinnedpubkey: public key pin 'sha256//abc' is not sha256//"),
        (["--pinnedpubkey", "/etc/ssl/certs/key.pem"], "--pinnedpubkey: public key pin '/etc/ssl/certs/key.pem'"),
        (["--pinnedpubkey", "sha256//" + Data(count: 20).base64EncodedString()], "--pinnedpubkey: public key pin"),
        (["--pinnedpubkey", "\(otherPin);"], "--pinnedpubkey: public key pin '' is not"),
        // Not canonical: the last digit's low bits set (curl compares the text, so it could never match).
        (["--pinnedpubkey", String(otherPin.dropLast(2)) + "d="], "--pinnedpubkey: public key pin"),
        (["--http1.1", "--http2"], "use either --http1.1 or --http2"),
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
        #expect(dir.contents().isEmpty)
    }

    /// Over plain http, `--http2` asks for an upgrade (curl's h2c), which this HTTP/1.1 server
    /// ignores; the download goes on over HTTP/1.1. Without it nothing asks.
    @Test func http2OverPlainHTTPAsksForAnUpgradeTheServerMayIgnore() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for (name, flags) in [("a.bin", ["--http2"]), ("b.bin", [])] {
            let r = try await CLI.run(
                ["get", "-q", "-x", "1", "-o", dir.file(name), server.url("/\(name)?size=1000").absoluteString] + flags)
            #expect(r.status == 0, "\(r.stderr)")
            expectFile(dir.file(name), equals: TestContent.bytes(count: 1000))
        }
        #expect(server.requests(path: "/a.bin").map { $0.header("Upgrade") } == ["h2c"])
        #expect(server.requests(path: "/b.bin").map { $0.header("Upgrade") } == [nil])
    }
}
