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
        #expect(BasicCredential(user: "a", password: "b\r\nX-Evil: 1").problem?.contains("control") == true)
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
        #expect(netrc.credential(forHost: "EXAMPLE.com")?.user == "alice")
        #expect(netrc.credential(forHost: "other.test") == BasicCredential(user: "bob", password: "b0b"))
        #expect(netrc.credential(forHost: "elsewhere") == BasicCredential(user: "anon", password: "guest"))
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
    }
}
