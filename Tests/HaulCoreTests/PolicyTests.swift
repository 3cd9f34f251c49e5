import Foundation
import HaulTestTraits
import Testing

@testable import HaulCore

/// `RedirectChain`: where a redirect goes, when it stops, and what the next host is sent.
@Suite("Redirect chains (no I/O)", .fewAtOnce)
struct RedirectChainTests {
    func answer(_ status: Int, location: String?) -> TransportResponse {
        TransportResponse(
            status: status, headers: HTTPHeaders(location.map { [("Location", $0)] } ?? []),
            url: URL(string: "http://a.test/dir/file")!)
    }

    @Test func onlyRedirectStatusesWithALocationRedirectAndRelativeOnesResolveAgainstTheURL() {
        let asked = URL(string: "http://a.test/dir/file")!
        for status in [301, 302, 303, 307, 308] {
            #expect(
                RedirectChain.target(of: answer(status, location: "other"), askedFor: asked)?.absoluteString
                    == "http://a.test/dir/other")
        }
        #expect(
            RedirectChain.target(of: answer(302, location: "/top"), askedFor: asked)?.absoluteString
                == "http://a.test/top")
        #expect(
            RedirectChain.target(of: answer(302, location: "https://b.test/x"), askedFor: asked)?.absoluteString
                == "https://b.test/x")
        for status in [200, 300, 304, 305, 404] {
            #expect(RedirectChain.target(of: answer(status, location: "other"), askedFor: asked) == nil, "\(status)")
        }
        #expect(RedirectChain.target(of: answer(302, location: nil), askedFor: asked) == nil)
    }

    @Test func moreRedirectsThanAllowedAreAnError() throws {
        var chain = RedirectChain(url: URL(string: "http://a.test/0")!, headers: HTTPHeaders(), maxRedirects: 2)
        try chain.follow(to: URL(string: "http://a.test/1")!)
        try chain.follow(to: URL(string: "http://a.test/2")!)
        #expect(chain.current.absoluteString == "http://a.test/2")
        #expect(throws: HaulError.self) { try chain.follow(to: URL(string: "http://a.test/3")!) }
        do { try chain.follow(to: URL(string: "http://a.test/4")!) } catch {
            #expect(error.code == .tooManyRedirects && error.message.contains("more than 2 redirects"), "\(error)")
        }
    }

    @Test func aLoopIsCaughtAtTheFirstURLSeenTwice() throws {
        var chain = RedirectChain(url: URL(string: "http://a.test/a")!, headers: HTTPHeaders(), maxRedirects: 20)
        try chain.follow(to: URL(string: "http://a.test/b")!)
        do {
            try chain.follow(to: URL(string: "http://a.test/a")!)
            Issue.record("the loop was followed")
        } catch {
            #expect(error.code == .tooManyRedirects && error.message.contains("redirect loop"), "\(error)")
        }
    }

    @Test(arguments: ["file:///etc/passwd", "ftp://a.test/x", "data:text/plain,hi", "javascript:alert(1)"])
    func aRedirectToAnotherSchemeIsRefused(target: String) throws {
        var chain = RedirectChain(url: URL(string: "http://a.test/a")!, headers: HTTPHeaders(), maxRedirects: 20)
        let next = try #require(URL(string: target))
        do {
            try chain.follow(to: next)
            Issue.record("followed to \(target)")
        } catch {
            #expect(error.code == .invalidURL, "\(error)")
        }
        #expect(chain.current.absoluteString == "http://a.test/a")
    }

    @Test func credentialsStayWithTheOriginTheUserNamed() throws {
        let headers = HTTPHeaders([
            ("Authorization", "Bearer t"), ("Proxy-Authorization", "Basic p"), ("Cookie", "c=1"), ("X-Custom", "1"),
        ])
        // Same scheme, host and port (80 spelled or not): everything is kept, URL credentials too.
        var same = RedirectChain(url: URL(string: "http://u:p@a.test/a")!, headers: headers, maxRedirects: 20)
        try same.follow(to: URL(string: "http://A.TEST:80/b")!)
        #expect(same.headers["Authorization"] == "Bearer t" && same.headers["Cookie"] == "c=1")
        #expect(same.current.user == "u" && same.current.password == "p")
        // Another host, another port, or http to https: credentials go; other headers stay (as in curl).
        for target in ["http://b.test/b", "http://a.test:8080/b", "https://a.test/b"] {
            var chain = RedirectChain(url: URL(string: "http://u:p@a.test/a")!, headers: headers, maxRedirects: 20)
            try chain.follow(to: URL(string: target)!)
            #expect(chain.headers["Authorization"] == nil, "\(target)")
            #expect(chain.headers["Proxy-Authorization"] == nil && chain.headers["Cookie"] == nil, "\(target)")
            #expect(chain.headers["X-Custom"] == "1", "\(target)")
            #expect(chain.current.user == nil, "\(target)")
            // Back to the first host later: what was dropped is not sent again.
            try chain.follow(to: URL(string: "http://a.test/c")!)
            #expect(chain.headers["Authorization"] == nil && chain.current.user == nil, "\(target)")
        }
    }
}

/// `RetryPolicy.delay(after:failures:)`: the wait before a retry, or the error to give up with.
@Suite("Retry delays (no I/O)", .fewAtOnce)
struct RetryDelayTests {
    @Test func theServersRetryAfterIsTheDelay() throws {
        let error = HaulError(.httpStatus, "HTTP 503", httpStatus: 503, retryAfter: 7)
        #expect(try RetryPolicy(maxRetries: 3).delay(after: error, failures: 1) == 7)
    }

    @Test func pastTheBudgetTheErrorItselfIsThrown() {
        let error = HaulError(.network, "connection reset")
        do {
            _ = try RetryPolicy(maxRetries: 2).delay(after: error, failures: 3)
            Issue.record("retried a third time")
        } catch {
            #expect(error.code == .network && error.message == "connection reset")
        }
    }

    @Test func aRetryAfterLongerThanAllowedGivesUpAndSaysWhy() {
        var error = HaulError(.httpStatus, "HTTP 503 Service Unavailable", httpStatus: 503, retryAfter: 400)
        error.isTransient = true
        do {
            _ = try RetryPolicy(maxRetries: 5, maxRetryAfter: 300).delay(after: error, failures: 1)
            Issue.record("waited 400 s")
        } catch {
            #expect(error.message.hasPrefix("HTTP 503 Service Unavailable; the server asks to wait 400"), "\(error)")
            #expect(error.message.contains("longer than the 300"), "\(error)")
            #expect(error.httpStatus == 503 && error.retryAfter == 400 && error.isTransient)
        }
    }

    @Test func aLongRunOfFailuresWaitsTheLongestDelayWithoutOverflow() throws {
        let policy = RetryPolicy(maxRetries: 10_000, baseDelay: 1, maxDelay: 30)
        for failures in [31, 64, 65, 10_000] {
            let delay = try policy.delay(after: HaulError(.network, "reset"), failures: failures)
            #expect(delay >= 15 && delay <= 30, "after \(failures) failures: \(delay) s")
        }
    }
}
