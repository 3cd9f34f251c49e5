import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// `haul doctor URL`: the screen, `--json`, exit codes and what is never shown.
@Suite("haul doctor", .fewAtOnce)
struct DoctorCommandTests {
    /// Checks without the speed measurement, whose numbers depend on the machine's load.
    static let quick = ["--seconds", "0", "--max-connections", "2"]

    static func json(_ text: String) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func aGoodServerGetsOneScreenWithNoFindings() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let url = server.url("/f?size=200000").absoluteString
        let r = try await CLI.run(["doctor", url] + Self.quick)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.first == "haul doctor \(url)")
        for expected in [
            "redirects      none",
            "answer         200, 195.3 KiB (200000 bytes)",
            "connection     HTTP/1.1",
            "validators     ETag \"s1-v0-200000\", Last-Modified Thu, 01 Jan 2026 00:00:00 GMT; the same on a second request",
            "ranges         honoured: two ranges of 512 bytes match a whole read of the same span",
            "HEAD vs GET    agree (200, length and type)",
            "gzip on ranges no",
            "connections    2 admitted of 2 tried",
            "speed          not measured",
            "no problem found: a download of this URL resumes and splits over connections",
        ] {
            #expect(lines.contains(expected), "\(expected)\n\(r.stdout)")
        }
        #expect(r.stderr.isEmpty, "\(r.stderr)")
    }

    @Test func jsonIsOneObjectWithEveryCheck() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let r = try await CLI.run(
            ["doctor", "--json", server.url("/j?size=5000&ranges=0").absoluteString] + Self.quick)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.split(separator: "\n").count == 1, "\(r.stdout)")
        let object = try Self.json(r.stdout)
        let answer = try #require(object["answer"] as? [String: Any])
        #expect(answer["status"] as? Int == 200 && answer["length"] as? Int == 5000)
        let ranges = try #require(object["ranges"] as? [String: Any])
        #expect(ranges["support"] as? String == "ignored")
        let findings = try #require(object["findings"] as? [String])
        #expect(findings.contains { $0.hasPrefix("the server ignores Range") }, "\(findings)")
        for key in ["url", "hops", "connection", "validators", "head", "connections", "speeds"] {
            #expect(object[key] != nil, "\(key) missing: \(r.stdout)")
        }
    }

    @Test func anErrorStatusExits4WithItsFinding() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let r = try await CLI.run(["doctor", server.url("/gone?status=410").absoluteString] + Self.quick)
        #expect(r.status == 4, "\(r.stderr)")
        #expect(r.stdout.contains("  - the server answers HTTP 410 Gone: there is nothing to download"), "\(r.stdout)")
        #expect(!r.stdout.contains("ranges "), "\(r.stdout)")
    }

    @Test func noServerIsOneErrorLineAndExit3() async throws {
        let port = try RefusingPort()
        let r = try await CLI.run(["doctor", port.url("/f").absoluteString] + Self.quick)
        #expect(r.status == 3)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.hasPrefix("haul: error: cannot connect to 127.0.0.1"), "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").count == 1, "\(r.stderr)")
    }

    @Test(arguments: [
        ([], "doctor needs a URL"), (["http://a/", "http://b/"], "doctor takes one URL"),
        (["--max-connections", "65", "http://a/"], "--max-connections must be 0-64"),
        (["--seconds", "61", "http://a/"], "--seconds must be 0-60"),
        (["example.com/f"], "https://example.com/f"),
    ])
    func usageErrorsExit2(args: [String], message: String) async throws {
        let r = try await CLI.run(["doctor"] + args)
        #expect(r.status == 2)
        #expect(r.stderr.hasPrefix("haul: error: ") && r.stderr.contains(message), "\(r.stderr)")
    }

    @Test func credentialsAreSentButNeverShown() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let port = server.url("/").port!
        let url = "http://alice:s3cret@127.0.0.1:\(port)/auth?size=3000&auth=alice:s3cret"
        for format in [[], ["--json"]] {
            let r = try await CLI.run(["doctor", url] + format + Self.quick)
            #expect(r.status == 0, "\(r.stderr)")
            #expect(!r.stdout.contains("alice:s3cret@"), "\(r.stdout)")
            #expect(r.stdout.contains("//127.0.0.1:\(port)/auth?"), "\(r.stdout)")
        }
        #expect(server.requests(path: "/auth").allSatisfy { $0.header("Authorization") != nil })
    }

    @Test(.enabled(if: SelfSignedHTTPSServer.available, "needs openssl, timeout and python3"))
    func tlsVersionAndCertificateExpiryAreShown() async throws {
        let server = try await SelfSignedHTTPSServer(serving: ["f.bin": TestContent.bytes(count: 1000)])
        defer { server.stop() }
        let url = server.url("/f.bin").absoluteString
        let r = try await CLI.run(["doctor", "--json", "--cacert", server.certificate, url] + Self.quick)
        #expect(r.status == 0, "\(r.stderr)")
        let connection = try #require(try Self.json(r.stdout)["connection"] as? [String: Any])
        #expect((connection["tlsVersion"] as? String)?.hasPrefix("TLSv1.") == true, "\(connection)")
        // Python's http.server answers in HTTP/1.0.
        #expect(connection["httpVersion"] as? String == "HTTP/1.0", "\(connection)")
        // The test certificate is valid for 2 days from its making (whole days left: 1 once a
        // second has passed).
        #expect((connection["certificateExpires"] as? String)?.hasSuffix("Z") == true, "\(connection)")
        #expect((1...2).contains(connection["certificateDaysLeft"] as? Int ?? -1), "\(connection)")
        let screen = try await CLI.run(["doctor", "--cacert", server.certificate, url] + Self.quick)
        #expect(screen.stdout.contains("  - the server's certificate expires in "), "\(screen.stdout)")
        #expect(screen.stdout.contains("  - the server ignores Range"), "\(screen.stdout)")
    }

    @Test(.enabled(if: SelfSignedHTTPSServer.available, "needs openssl, timeout and python3"))
    func theCertificateIsReadAfterASameHostRedirect() async throws {
        // HTTP/1.1 with keep-alive: /d answers 301 to /d/, whose file would come over the
        // same connection, which has no certificate to tell of; the hop gets one of its own.
        let server = try await SelfSignedHTTPSServer(
            serving: ["d/index.html": TestContent.bytes(count: 1000)], keepsAlive: true)
        defer { server.stop() }
        let r = try await CLI.run(
            ["doctor", "--json", "--cacert", server.certificate, server.url("/d").absoluteString] + Self.quick)
        #expect(r.status == 0, "\(r.stderr)")
        let json = try Self.json(r.stdout)
        let hops = try #require(json["hops"] as? [[String: Any]])
        #expect(hops.map { $0["status"] as? Int } == [301, 200], "\(hops)")
        let connection = try #require(json["connection"] as? [String: Any])
        #expect(connection["httpVersion"] as? String == "HTTP/1.1", "\(connection)")
        #expect((connection["certificateExpires"] as? String)?.hasSuffix("Z") == true, "\(connection)")
    }
}
