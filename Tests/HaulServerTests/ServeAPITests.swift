import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore
@testable import HaulServer

/// The API end to end over HTTP, with each door tested by what an attacker would send.
@Suite("haul serve's API: the doors on every route, and the queue", .serialized, .fewAtOnce)
struct ServeAPITests {
    final class Daemon: @unchecked Sendable {
        let dir: TemporaryDirectory
        let server: HTTPServer
        let port: Int
        let token: ServeToken
        let api: ServeAPI

        init() throws {
            dir = try TemporaryDirectory()
            let (fd, port) = try Sys.listenTCP(address: "127.0.0.1", port: 0)
            self.port = port
            token = try ServeToken.loadOrCreate(at: dir.path + "/state/token")
            let api = ServeAPI(
                store: try ServeStore(path: dir.path + "/state/serve.sqlite"), token: token,
                hosts: try HostPolicy(port: port), root: try DownloadRoot(dir.path + "/root", home: nil, state: nil),
                now: { 1000 })
            self.api = api
            server = try HTTPServer(sockets: [fd]) { request, exchange in api.handle(request, exchange) }
        }

        func stop() {
            server.stop()
            dir.remove()
        }

        /// Sends a request; the status and the body.
        func call(
            _ method: String, _ path: String, body: String? = nil, headers: [String: String] = [:],
            bearer: Bool = true, host: String? = nil
        ) throws -> (status: Int, body: String) {
            var lines = ["\(method) \(path) HTTP/1.1", "Host: \(host ?? "127.0.0.1:\(port)")", "Connection: close"]
            if bearer { lines.append("Authorization: Bearer \(token.text)") }
            for (name, value) in headers { lines.append("\(name): \(value)") }
            if let body {
                if headers["Content-Type"] == nil { lines.append("Content-Type: application/json") }
                lines.append("Content-Length: \(body.utf8.count)")
            }
            let answer = try RawClient.exchange(port: port, lines.joined(separator: "\r\n") + "\r\n\r\n" + (body ?? ""))
            let status = Int(answer.split(separator: " ").dropFirst().first ?? "") ?? 0
            let payload = answer.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
            return (status, payload)
        }
    }

    @Test func aDownloadIsAddedListedPausedAndRemoved() throws {
        let d = try Daemon()
        defer { d.stop() }
        let added = try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://h/a.iso","https://h/b"]}"#)
        #expect(added.status == 201, "\(added)")
        #expect(
            added.body.contains(#""url":"http:\/\/h\/a.iso""#) && added.body.contains(#""state":"queued""#), "\(added)")
        let listed = try d.call("GET", "/api/v1/downloads?state=queued&limit=1")
        #expect(listed.status == 200 && listed.body.contains("a.iso") && !listed.body.contains("h\\/b"), "\(listed)")
        let paused = try d.call("POST", "/api/v1/downloads/1/pause", body: "{}")
        #expect(paused.status == 200 && paused.body.contains(#""state":"paused""#), "\(paused)")
        #expect(try d.call("GET", "/api/v1/downloads/1").body.contains(#""state":"paused""#))
        #expect(try d.call("POST", "/api/v1/downloads/1/remove", body: "{}").status == 200)
        #expect(try d.call("GET", "/api/v1/downloads/1").status == 404)
        let events = try d.call("GET", "/api/v1/events?since=1")
        #expect(events.body.contains(#""kind":"state""#) && events.body.contains(#""kind":"removed""#), "\(events)")
        #expect(!events.body.contains(#""seq":1,"#), "\(events)")
        let version = try d.call("GET", "/api/v1/version")
        #expect(version.status == 200 && version.body.contains(#""api":"1""#), "\(version)")
    }

    @Test func theListSortsAndItsPollingFormGivesWhatChangedAfterAnEvent() throws {
        let d = try Daemon()
        defer { d.stop() }
        func list(_ query: String) throws -> (status: Int, ids: [Int], json: [String: Any]) {
            let answer = try d.call("GET", "/api/v1/downloads?" + query)
            let json = (try? JSONSerialization.jsonObject(with: Data(answer.body.utf8))) as? [String: Any] ?? [:]
            let ids = (json["downloads"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? Int }
            return (answer.status, ids, json)
        }
        #expect(
            try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://h/a"],"name":"zeta.iso"}"#).status == 201)
        #expect(try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://h/b"]}"#).status == 201)
        #expect(try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://h/c"],"priority":5}"#).status == 201)
        #expect(try list("").ids == [3, 1, 2])  // the queue: priority, then place
        #expect(try list("sort=-queue").ids == [2, 1, 3])
        #expect(try list("sort=-added").ids == [3, 2, 1])  // added at the same time: by id
        #expect(try list("sort=name").ids == [2, 3, 1])  // http://h/b, http://h/c, zeta.iso
        #expect(try list("sort=--added").status == 400)
        let start = try list("")
        #expect(start.json["latest"] as? Int == 3 && start.json["removed"] == nil)
        // Polling: what changed after event 3, then after the next.
        #expect(try d.call("POST", "/api/v1/downloads/2/pause", body: "{}").status == 200)
        let paused = try list("since=3")
        #expect(paused.ids == [2] && paused.json["removed"] as? [Int] == [] && paused.json["latest"] as? Int == 4)
        #expect(try d.call("POST", "/api/v1/downloads/1/remove", body: "{}").status == 200)
        let removed = try list("since=4")
        #expect(removed.ids == [] && removed.json["removed"] as? [Int] == [1], "\(removed.json)")
        let all = try list("since=0&sort=-added")
        #expect(all.ids == [3, 2] && all.json["removed"] as? [Int] == [1] && all.json["reset"] == nil)
        // A move shifts others too: each download whose place changed is in the poll.
        #expect(try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://h/d","http://h/e"]}"#).status == 201)
        let before = try list("").json["latest"] as? Int ?? 0
        #expect(try d.call("POST", "/api/v1/downloads/5/move", body: #"{"to":"up"}"#).status == 200)
        let moved = try list("since=\(before)")
        #expect(moved.ids.sorted() == [4, 5], "\(moved.json)")
        // Every change or none: no page, no state filter; a number ahead of the events is a reset.
        for bad in ["since=0&limit=1", "since=0&offset=1", "since=0&state=queued", "since=x", "sort=size"] {
            #expect(try list(bad).status == 400, "\(bad)")
        }
        let ahead = try list("since=999")
        #expect(ahead.status == 200 && ahead.json["reset"] as? Bool == true && ahead.ids.isEmpty, "\(ahead.json)")
    }

    @Test func thePageLoadsWithoutTheTokenUnderItsPolicyAndTakesNoChange() throws {
        let d = try Daemon()
        defer { d.stop() }
        for path in ["/", "/haul.js", "/haul.css", "/icon.svg"] {
            let page = try RawClient.exchange(
                port: d.port, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nConnection: close\r\n\r\n")
            #expect(page.hasPrefix("HTTP/1.1 200"), "\(path): \(page.prefix(200))")
            #expect(page.contains("Content-Security-Policy: default-src 'self'; frame-ancestors 'none'"), "\(path)")
            #expect(
                page.contains("X-Content-Type-Options: nosniff") && page.contains("X-Frame-Options: DENY"), "\(path)")
            #expect(!page.lowercased().contains("access-control-"), "\(path)")
        }
        // No inline script or style for the policy to allow, and no token in the page.
        let html = try d.call("GET", "/", bearer: false).body
        #expect(!html.contains("<script>") && !html.contains("style=") && !html.contains(d.token.text))
        #expect(try d.call("POST", "/", body: "{}", bearer: false).status == 405)
        #expect(try d.call("GET", "/", bearer: false, host: "rebound.example:\(d.port)").status == 421)
    }

    @Test func aWrongHostIsMisdirectedOnEveryRoute() throws {
        let d = try Daemon()
        defer { d.stop() }
        for path in ["/api/v1/version", "/api/v1/downloads", "/nothing", "/"] {
            #expect(try d.call("GET", path, host: "evil.example:\(d.port)").status == 421, "\(path)")
            #expect(try d.call("GET", path, host: "127.0.0.1:1").status == 421, "\(path)")
        }
    }

    @Test func aMissingOrWrongTokenIsUnauthorizedAndNoCookieIsTaken() throws {
        let d = try Daemon()
        defer { d.stop() }
        let none = try d.call("GET", "/api/v1/downloads", bearer: false)
        #expect(none.status == 401 && none.body.contains("no token"), "\(none)")
        let wrong = try d.call(
            "GET", "/api/v1/downloads", headers: ["Authorization": "Bearer " + String(repeating: "0", count: 64)],
            bearer: false)
        #expect(wrong.status == 401, "\(wrong)")
        // A cookie is not a way in: another localhost port's server would have been sent it.
        let cookie = try d.call(
            "GET", "/api/v1/downloads", headers: ["Cookie": "haul_\(d.port)=\(d.token.text)"], bearer: false)
        #expect(cookie.status == 401, "\(cookie)")
        let lower = try d.call(
            "GET", "/api/v1/version", headers: ["Authorization": "bearer \(d.token.text)"], bearer: false)
        #expect(lower.status == 200, "\(lower)")
        let query = try d.call("GET", "/api/v1/version?token=\(d.token.text)", bearer: false)
        #expect(query.status == 401, "\(query)")
    }

    @Test func wrongTokensPastTheHeldOnesAreTurnedAwayAtOnce() throws {
        let d = try Daemon()
        defer { d.stop() }
        d.api.throttle.free = 0
        d.api.throttle.base = 20  // the first wrong token's answer is held 20 s
        d.api.maxHeld = 1
        let first = try RawClient(port: d.port)
        first.send("GET /api/v1/version HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nAuthorization: Bearer x\r\n\r\n")
        // The next can only be answered at once, and is: 429 with a Retry-After.
        var second = ""
        for _ in 0..<50 where !second.contains(" 429 ") {  // until the first is held
            second = try RawClient.exchange(
                port: d.port,
                "GET /api/v1/version HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nAuthorization: Bearer y\r\n\r\n")
        }
        #expect(second.hasPrefix("HTTP/1.1 429") && second.contains("Retry-After: "), "\(second)")
        // A right token is never held back.
        #expect(try d.call("GET", "/api/v1/version").status == 200)
    }

    @Test func routesAnswerWithTheRightStatusAndAllow() throws {
        let d = try Daemon()
        defer { d.stop() }
        let post = try d.call("POST", "/api/v1/version", body: "{}")
        #expect(post.status == 405, "\(post)")
        let raw = try RawClient.exchange(
            port: d.port,
            "POST /api/v1/version HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nAuthorization: Bearer \(d.token.text)\r\n"
                + "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        #expect(raw.contains("Allow: GET, HEAD\r\n"), "\(raw)")
        // The proof (no token) and the page's files say what they take too.
        for (path, allowed) in [
            ("/api/v1/proof?nonce=" + String(repeating: "a", count: 32), "GET"), ("/", "GET, HEAD"),
        ] {
            let refused = try RawClient.exchange(
                port: d.port,
                "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            #expect(refused.hasPrefix("HTTP/1.1 405") && refused.contains("Allow: \(allowed)\r\n"), "\(refused)")
        }
        #expect(try d.call("GET", "/api/v1/downloads/1/a/b").status == 404)
        #expect(try d.call("GET", "/api/v1/nothing").status == 404)
        #expect(try d.call("HEAD", "/api/v1/events").status == 200)
        let twoHosts = try RawClient.exchange(
            port: d.port,
            "GET /api/v1/version HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nHost: evil.example\r\n"
                + "Authorization: Bearer \(d.token.text)\r\nConnection: close\r\n\r\n")
        #expect(twoHosts.hasPrefix("HTTP/1.1 400"), "\(twoHosts)")
    }

    @Test func aCrossSiteOrCrossOriginChangeIsForbidden() throws {
        let d = try Daemon()
        defer { d.stop() }
        let body = #"{"urls":["http://h/a"]}"#
        // A page elsewhere, even one that somehow had the token.
        #expect(
            try d.call("POST", "/api/v1/downloads", body: body, headers: ["Origin": "http://evil.example"]).status
                == 403)
        #expect(try d.call("POST", "/api/v1/downloads", body: body, headers: ["Origin": "null"]).status == 403)
        for site in ["cross-site", "same-site"] {  // same-site: another port of localhost
            #expect(try d.call("GET", "/api/v1/downloads", headers: ["Sec-Fetch-Site": site]).status == 403, "\(site)")
        }
        let ownPage = try d.call(
            "POST", "/api/v1/downloads", body: body,
            headers: ["Origin": "http://127.0.0.1:\(d.port)", "Sec-Fetch-Site": "same-origin"])
        #expect(ownPage.status == 201, "\(ownPage)")
        // A form post (no JSON): what a cross-site <form> could send.
        #expect(
            try d.call("POST", "/api/v1/downloads", body: "urls=x", headers: ["Content-Type": "text/plain"]).status
                == 415)
        // A change by GET is not a route.
        #expect(try d.call("GET", "/api/v1/downloads/1/cancel").status == 405)
        #expect(try d.call("GET", "/api/v1/downloads").body.contains(#""downloads":[{"#))
    }

    @Test(arguments: [
        #"{"urls":["http://h/a"],"name":"../../.ssh/authorized_keys"}"#,
        #"{"urls":["http://h/a"],"name":"/etc/passwd"}"#,
        #"{"urls":["http://h/a"],"subfolder":"../x"}"#, #"{"urls":["http://h/a"],"subfolder":".ssh","name":"k"}"#,
        #"{"urls":["http://h/a"],"name":"a.iso.part"}"#, #"{"urls":["file:///etc/passwd"]}"#, #"{"urls":[]}"#,
        #"{"urls":["http://h/a","http://h/b"],"name":"one"}"#, #"not json"#, #"{"urls":["javascript:alert(1)"]}"#,
        #"{"urls":["http://h/a"],"priority":9223372036854775807}"#,
        #"{"urls":["http://127.0.0.1:PORT/api/v1/downloads"]}"#,
        #"{"urls":["http://[::1]:PORT/x"]}"#, #"{"urls":["http://LOCALHOST:PORT/x"]}"#,
    ])
    func anEscapeOrABadAddIsRefusedAndNothingIsStored(body: String) throws {
        let d = try Daemon()
        defer { d.stop() }
        let answer = try d.call(
            "POST", "/api/v1/downloads", body: body.replacingOccurrences(of: "PORT", with: "\(d.port)"))
        #expect([400, 403].contains(answer.status), "\(answer)")
        #expect(try d.api.store.list().isEmpty)
    }

    @Test func anOversizedRequestIsRefused() throws {
        let d = try Daemon()
        defer { d.stop() }
        let answer = try RawClient.exchange(
            port: d.port,
            "POST /api/v1/downloads HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nContent-Type: application/json\r\n"
                + "Content-Length: 2000000\r\n\r\n")
        #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer.prefix(100))")
    }

    @Test func everyAnswerHasTheSecurityHeadersAndNoCORS() throws {
        let d = try Daemon()
        defer { d.stop() }
        for path in ["/api/v1/version", "/nothing"] {
            for bearer in [true, false] {
                let answer = try RawClient.exchange(
                    port: d.port,
                    "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(d.port)\r\nOrigin: http://evil.example\r\n"
                        + (bearer ? "Authorization: Bearer \(d.token.text)\r\n" : "") + "Connection: close\r\n\r\n")
                #expect(answer.contains("X-Content-Type-Options: nosniff\r\n"), "\(answer)")
                #expect(answer.contains("Referrer-Policy: same-origin\r\n"), "\(answer)")
                #expect(!answer.lowercased().contains("access-control-"), "\(answer)")
            }
        }
    }

    @Test func aURLsPasswordIsNeitherStoredNorEchoed() throws {
        let d = try Daemon()
        defer { d.stop() }
        let bad = try d.call(
            "POST", "/api/v1/downloads", body: #"{"urls":["http://u:s3cret@h/a", "ftp://u:s3cret@h/b"]}"#)
        #expect(bad.status == 400 && !bad.body.contains("s3cret"), "\(bad)")
        // Refused, not stored without them (the download would run without its credentials).
        let alone = try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://u:s3cret@h/a"]}"#)
        #expect(alone.status == 400 && !alone.body.contains("s3cret") && alone.body.contains("password"), "\(alone)")
        #expect(try d.api.store.count() == 0)
        #expect(try !d.call("GET", "/api/v1/events").body.contains("s3cret"))
    }
}
