import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Basic credentials and netrc files", .fewAtOnce)
struct CredentialsTests {
    func parse(_ text: String) throws -> Netrc { try Netrc.parse(Array(text.utf8), name: "test") }

    @Test func basicAuthorizationIsBase64OfUserColonPasswordInUTF8() {
        #expect(
            BasicCredential(user: "Aladdin", password: "open sesame").authorization
                == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        #expect(BasicCredential(user: "test", password: "123\u{A3}").authorization == "Basic dGVzdDoxMjPCow==")
        #expect(BasicCredential(user: "a", password: "b:c").problem == nil)
        #expect(BasicCredential(user: "a:b", password: "c").problem?.contains("':'") == true)
        // Base64 leaves no byte able to end the header line.
        let crlf = BasicCredential(user: "a", password: "b\r\nX-Evil: 1")
        #expect(crlf.problem == nil && !crlf.authorization.utf8.contains(0x0A))
        #expect(BasicCredential(user: [0x75], password: [0xE9, 0x74, 0xE9]).authorization == "Basic dTrpdOk=")
    }

    @Test func machinesDefaultAndFirstMatch() throws {
        let netrc = try parse(
            """
            # a comment line
            machine Example.COM login alice password "pa ss\\"word"
            machine example.com login second password nope
            machine other.test
                login bob # trailing comment
                password b0b
            default login anon password guest
            """)
        #expect(netrc.credential(forHost: "example.com") == BasicCredential(user: "alice", password: "pa ss\"word"))
        #expect(netrc.credential(forHost: "EXAMPLE.com")?.user == Array("alice".utf8))
        #expect(netrc.credential(forHost: "other.test") == BasicCredential(user: "bob", password: "b0b"))
        #expect(netrc.credential(forHost: "elsewhere") == BasicCredential(user: "anon", password: "guest"))
    }

    @Test func keywordsInAnyCaseBytesAsTheyAreCRLFAndDefaultAnywhere() throws {
        let netrc = try Netrc.parse(
            Array("DEFAULT LOGIN anon\r\nMachine h Login u Password \"".utf8) + [0xE9, 0x22, 0x0D, 0x0A], name: "t")
        #expect(netrc.credential(forHost: "h") == BasicCredential(user: [0x75], password: [0xE9]))
        #expect(netrc.credential(forHost: "other") == BasicCredential(user: "anon", password: ""))
    }

    @Test func theFirstEntryWithALoginAndTheURLsUser() throws {
        let netrc = try parse("machine h password p0\nmachine h login a password pa\nmachine h login b password pb")
        #expect(netrc.credential(forHost: "h") == BasicCredential(user: "a", password: "pa"))
        #expect(netrc.credential(forHost: "h", user: Array("b".utf8)) == BasicCredential(user: "b", password: "pb"))
        var headers = HTTPHeaders()
        netrc.authorize(&headers, for: URL(string: "http://b@h/x")!)
        #expect(headers["Authorization"] == BasicCredential(user: "b", password: "pb").authorization)
    }

    @Test func macdefBodiesAndAccountsAreSkipped() throws {
        let netrc = try parse(
            "macdef init\ncd /pub\nmachine evil.test login x password y\n\nmachine h login u account a password p\n")
        #expect(netrc.credential(forHost: "evil.test") == nil, "inside the macro")
        #expect(netrc.credential(forHost: "h") == BasicCredential(user: "u", password: "p"))
        #expect(try parse("machine h password only").credential(forHost: "h") == nil, "no login")
        #expect(try parse("").credential(forHost: "h") == nil)
    }

    @Test(arguments: [
        ("machine", "line 1: 'machine' has no value"),
        ("machine h\nlogin", "line 2: 'login' has no value"),
        ("machine h login\n\n", "line 1: 'login' has no value"),
        ("machine h login \"open", "line 1: a quoted word does not end"),
        ("login u", "line 1: 'login' before any 'machine'"),
        ("machine h login a\0b", "line 1: a NUL byte"),
    ])
    func malformedFilesNameTheLine(text: String, message: String) {
        do throws(HaulError) {
            _ = try Netrc.parse(Array(text.utf8), name: "test")
            Issue.record("parsed")
        } catch { #expect(error.message == "netrc file test, \(message)", "\(error.message)") }
    }

    @Test func authorizeAddsOnlyWhereTheRequestHasNone() throws {
        let netrc = try parse("machine h login u password p")
        var plain = HTTPHeaders()
        netrc.authorize(&plain, for: URL(string: "http://h:8080/x")!)
        #expect(
            plain["Authorization"] == BasicCredential(user: "u", password: "p").authorization,
            "the port is no part of it")
        var own = HTTPHeaders()
        own.add("Authorization", "Bearer t")
        netrc.authorize(&own, for: URL(string: "http://h/x")!)
        #expect(own["Authorization"] == "Bearer t")
        var inURL = HTTPHeaders()
        netrc.authorize(&inURL, for: URL(string: "http://me:pw@h/x")!)
        #expect(inURL["Authorization"] == nil)
        var otherUser = HTTPHeaders()
        netrc.authorize(&otherUser, for: URL(string: "http://me@h/x")!)
        #expect(otherUser["Authorization"] == nil, "no entry for that login")
    }

    /// A chain that has been on https sends no netrc password over plain http (the host's
    /// entry would go in the clear); one that starts on http sends it as asked.
    @Test func netrcIsNotSentInTheClearAfterHTTPS() throws {
        let netrc = try parse("machine h login u password p")
        var chain = RedirectChain(
            url: URL(string: "https://h/a")!, headers: HTTPHeaders(), maxRedirects: 5, netrc: netrc)
        #expect(chain.headers["Authorization"] != nil)
        try chain.follow(to: URL(string: "http://h/b")!)
        #expect(chain.headers["Authorization"] == nil)
        try chain.follow(to: URL(string: "https://h/c")!)
        #expect(chain.headers["Authorization"] != nil)
        let plain = RedirectChain(
            url: URL(string: "http://h/a")!, headers: HTTPHeaders(), maxRedirects: 5, netrc: netrc)
        #expect(plain.headers["Authorization"] != nil)
        // A chain that goes on from another's last hop (a segmented download's ranges from its
        // probe's) carries that it has been on https.
        #expect(chain.beenOnTLS)
        let ranges = RedirectChain(
            url: URL(string: "http://h/b")!, headers: HTTPHeaders(), maxRedirects: 5, netrc: netrc, beenOnTLS: true)
        #expect(ranges.headers["Authorization"] == nil)
    }
}
