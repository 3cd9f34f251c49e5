import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Cookie jar: RFC 6265 rules and the Netscape file", .fewAtOnce)
struct CookieJarTests {
    static let now: Int64 = 1_800_000_000
    let http = URL(string: "http://www.example.com/docs/a.html")!
    let https = URL(string: "https://www.example.com/docs/a.html")!

    func jar(_ setCookies: [String], from url: URL) -> CookieJar {
        let jar = CookieJar()
        jar.store(from: HTTPHeaders(setCookies.map { ("Set-Cookie", $0) }), for: url, now: Self.now)
        return jar
    }

    @Test func defaultsAndAttributes() throws {
        let j = jar(["a=1", "b = 2 ; Path=/; HttpOnly", "c=3; Domain=.Example.COM; Secure"], from: https)
        let all = j.all(now: Self.now)
        #expect(all.map(\.name) == ["a", "b", "c"])
        #expect(
            all[0].domain == "www.example.com" && all[0].hostOnly && all[0].path == "/docs" && all[0].expires == nil)
        #expect(all[1].value == "2" && all[1].path == "/" && all[1].httpOnly)
        #expect(all[2].domain == "example.com" && !all[2].hostOnly && all[2].secure)
    }

    @Test(arguments: [
        "noequals", "=novalue", "a=1; Domain=other.com", "a=1; Domain=com", "a=1; Domain=ww.example.com",
        "a=1; Secure", "a=\u{1}b", "sp ace=1", "a=b\tc", "a=" + String(repeating: "x", count: 5000),
    ])
    func ignored(setCookie: String) {
        #expect(jar([setCookie], from: http).all(now: Self.now).isEmpty, "\(setCookie)")
    }

    @Test func expiryMaxAgeWinsAndZeroOrPastDeletes() {
        let j = jar(
            [
                "a=1; Max-Age=60; Expires=Wed, 21-Oct-2015 07:28:00 GMT", "b=1; Expires=Wed, 21-Oct-2015 07:28:00 GMT",
                "c=1; Max-Age=0", "d=1; Max-Age=-5", "e=1; Max-Age=abc", "f=1; Expires=Tue, 01 Jan 2030 00:00:00 GMT",
            ], from: http)
        let all = j.all(now: Self.now)
        #expect(all.map(\.name) == ["a", "e", "f"])
        #expect(all[0].expires == Self.now + 60)
        #expect(all[1].expires == nil)
        #expect(all[2].expires == 1_893_456_000)
        // Set again expired: gone.
        j.store(from: HTTPHeaders([("Set-Cookie", "e=x; Max-Age=0")]), for: http, now: Self.now)
        #expect(j.all(now: Self.now).map(\.name) == ["a", "f"])
        #expect(j.all(now: Self.now + 61).map(\.name) == ["f"])
    }

    @Test func cookieDates() {
        #expect(HTTPDate.parseCookieDate("Wed, 21-Oct-2015 07:28:00 GMT") == 1_445_412_480)
        #expect(HTTPDate.parseCookieDate("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parseCookieDate("Sunday, 06-Nov-94 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parseCookieDate("Sun Nov  6 08:49:37 1994") == 784_111_777)
        #expect(HTTPDate.parseCookieDate("6 november 1994 8:49:37") == 784_111_777)
        #expect(HTTPDate.parseCookieDate("Sun, 06 Nov 1994") == nil)
        #expect(HTTPDate.parseCookieDate("31 Feb 2020 00:00:00") == nil)
        #expect(HTTPDate.parseCookieDate("1 Jan 1600 00:00:00") == nil)
    }

    @Test func sentToTheirHostsPathsAndSchemesInOrder() {
        let j = CookieJar()
        j.store(from: HTTPHeaders([("Set-Cookie", "host=1")]), for: URL(string: "http://example.com/")!, now: Self.now)
        j.store(
            from: HTTPHeaders([("Set-Cookie", "dom=1; Domain=example.com"), ("Set-Cookie", "deep=1; Path=/a/b")]),
            for: URL(string: "http://example.com/")!, now: Self.now)
        j.store(
            from: HTTPHeaders([("Set-Cookie", "sec=1; Secure")]), for: URL(string: "https://example.com/")!,
            now: Self.now)
        func header(_ url: String) -> String? { j.cookieHeader(for: URL(string: url)!, now: Self.now) }
        #expect(header("http://example.com/a/b/c") == "deep=1; host=1; dom=1")
        #expect(header("https://example.com/") == "host=1; dom=1; sec=1")
        #expect(header("http://sub.example.com/a/bc") == "dom=1", "host-only stays; /a/bc is not under /a/b")
        #expect(header("http://notexample.com/") == nil)
        #expect(header("http://example.com.evil.test/") == nil)
    }

    @Test func anAddressKeepsItsCookiesToItself() {
        let j = jar(["a=1; Domain=127.0.0.1"], from: URL(string: "http://127.0.0.1:8080/")!)
        #expect(j.all(now: Self.now).first?.hostOnly == true)
        #expect(j.cookieHeader(for: URL(string: "http://127.0.0.1:9/")!, now: Self.now) == "a=1", "ports share cookies")
        #expect(jar(["a=1; Domain=0.0.1"], from: URL(string: "http://127.0.0.1/")!).all(now: Self.now).isEmpty)
    }

    @Test func boundedPerDomainAndInAll() {
        let j = CookieJar()
        for i in 0..<60 {
            j.store(from: HTTPHeaders([("Set-Cookie", "c\(i)=\(i)")]), for: http, now: Self.now)
        }
        let names = j.all(now: Self.now).map(\.name)
        #expect(names.count == j.maxPerDomain)
        #expect(names.first == "c10" && names.last == "c59")
        j.store(from: HTTPHeaders([("Set-Cookie", "c30=new")]), for: http, now: Self.now)
        #expect(j.all(now: Self.now).map(\.name) == names, "a replaced cookie keeps its place")
    }

    /// One host cannot push out what others set, nor cookies loaded from a file: past the total
    /// the oldest of the host that set the most go.
    @Test func theTotalBoundTakesFromTheHostThatSetTheMost() {
        let j = CookieJar(maxPerDomain: 5, maxPerSource: 8, maxCookies: 20)
        j.load(netscape: Array("bank.test\tFALSE\t/\tTRUE\t0\tsession\tkeep\n".utf8), now: Self.now)
        for host in 0..<4 {
            let url = URL(string: "http://x.y.h\(host).test/")!
            for i in 0..<10 {
                let domain = ["x.y.h\(host).test", "y.h\(host).test"][i % 2]
                j.store(from: HTTPHeaders([("Set-Cookie", "c\(i)=1; Domain=\(domain)")]), for: url, now: Self.now)
            }
        }
        let all = j.all(now: Self.now)
        #expect(all.count == 20)
        #expect(all.contains { $0.name == "session" && $0.domain == "bank.test" })
        let shares = (0..<4).map { host in all.count { $0.source == "x.y.h\(host).test" } }
        #expect(shares.allSatisfy { (4...5).contains($0) }, "\(shares): shared out, none pushed out")
    }

    /// curl's bounds on one request's header: 150 cookies, 8190 bytes.
    @Test func whatOneRequestSendsIsBounded() {
        let j = CookieJar()
        let big = String(repeating: "v", count: 4000)
        for i in 0..<5 {
            j.store(
                from: HTTPHeaders([("Set-Cookie", "b\(i)=\(big); Domain=site.test")]),
                for: URL(string: "http://evil.site.test/")!, now: Self.now)
        }
        let header = j.cookieHeader(for: URL(string: "http://victim.site.test/")!, now: Self.now) ?? ""
        #expect(header.utf8.count <= CookieJar.maxSentBytes && header.hasPrefix("b0="))
        #expect(header.split(separator: ";").count == 2)
    }

    /// RFC 6265bis 5.7: plain http neither replaces nor deletes a Secure cookie.
    @Test func plainHTTPCannotShadowASecureCookie() {
        let j = CookieJar()
        j.store(from: HTTPHeaders([("Set-Cookie", "sid=secret; Secure")]), for: https, now: Self.now)
        j.store(
            from: HTTPHeaders([("Set-Cookie", "sid=evil"), ("Set-Cookie", "sid=x; Max-Age=0")]), for: http,
            now: Self.now)
        j.store(from: HTTPHeaders([("Set-Cookie", "sid=evil2; Domain=example.com")]), for: http, now: Self.now)
        #expect(j.cookieHeader(for: https, now: Self.now) == "sid=secret")
        #expect(j.all(now: Self.now).map(\.value) == ["secret"])
        // Nor pushes it out by setting many.
        for i in 0..<60 { j.store(from: HTTPHeaders([("Set-Cookie", "n\(i)=1")]), for: http, now: Self.now) }
        j.store(from: HTTPHeaders([("Set-Cookie", "sid=evil3")]), for: http, now: Self.now)
        #expect(j.all(now: Self.now).contains { $0.name == "sid" && $0.value == "secret" })
    }

    @Test func tabsAndTopLevelDomainsWithATrailingDot() {
        #expect(jar(["a=1; Path=/x\tTRUE\t/"], from: http).all(now: Self.now).isEmpty)
        #expect(jar(["a=1; Domain=com."], from: URL(string: "http://example.com./")!).all(now: Self.now).isEmpty)
        #expect(
            jar(["a=1; Domain=example.com."], from: URL(string: "http://www.example.com./")!).all(now: Self.now).count
                == 1)
    }

    @Test func netscapeFileRoundTripsAndSkipsWhatIsNoCookie() {
        let j = jar(
            [
                "a=1; Max-Age=600", "b=2; Domain=example.com; Path=/p; Secure; HttpOnly", "s=session",
            ], from: https)
        let text = j.netscapeFile(now: Self.now)
        #expect(text.hasPrefix("# Netscape HTTP Cookie File\n"))
        #expect(text.contains("#HttpOnly_.example.com\tTRUE\t/p\tTRUE\t0\tb\t2\n"))
        #expect(text.contains("www.example.com\tFALSE\t/docs\tFALSE\t\(Self.now + 600)\ta\t1\n"))
        let back = CookieJar()
        let extra =
            "\r\n# comment\r\nbad line\r\n.old.test\tTRUE\t/\tFALSE\t1000\told\t1\r\nx.test\tFALSE\t/\tFALSE\t0\tempty\r\n"
        #expect(back.load(netscape: Array((text + extra).utf8), now: Self.now) == 4)
        let names = back.all(now: Self.now).map(\.name)
        #expect(names == ["a", "b", "s", "empty"], "the expired one and the non-cookies skipped")
        #expect(back.all(now: Self.now).prefix(3).map(\.domain) == j.all(now: Self.now).map(\.domain))
        #expect(back.cookieHeader(for: URL(string: "https://www.example.com/p/x")!, now: Self.now) == "b=2")
    }
}
