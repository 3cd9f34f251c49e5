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

    @Test func aWrongHostIsMisdirectedOnEveryRoute() throws {
        let d = try Daemon()
        defer { d.stop() }
        for path in ["/api/v1/version", "/api/v1/downloads", "/nothing", "/"] {
            #expect(try d.call("GET", path, host: "evil.example:\(d.port)").status == 421, "\(path)")
            #expect(try d.call("GET", path, host: "127.0.0.1:1").status == 421, "\(path)")
        }
    }

    @Test func aMissingOrWrongTokenIsUnauthorized() throws {
        let d = try Daemon()
        defer { d.stop() }
        let none = try d.call("GET", "/api/v1/downloads", bearer: false)
        #expect(none.status == 401 && none.body.contains("no token"), "\(none)")
        let wrong = try d.call(
            "GET", "/api/v1/downloads", headers: ["Authorization": "Bearer " + String(repeating: "0", count: 64)],
            bearer: false)
        #expect(wrong.status == 401, "\(wrong)")
        let cookie = try d.call(
            "GET", "/api/v1/downloads", headers: ["Cookie": "x=1; haul_\(d.port)=\(d.token.text)"], bearer: false)
        #expect(cookie.status == 200, "\(cookie)")
        let otherPort = try d.call(
            "GET", "/api/v1/downloads", headers: ["Cookie": "haul_1=\(d.token.text)"], bearer: false)
        #expect(otherPort.status == 401, "\(otherPort)")
    }

    @Test func aCrossSiteOrCrossOriginChangeIsForbidden() throws {
        let d = try Daemon()
        defer { d.stop() }
        let body = #"{"urls":["http://h/a"]}"#
        // A page elsewhere, even one that somehow had the token.
        #expect(
            try d.call("POST", "/api/v1/downloads", body: body, headers: ["Origin": "http://evil.example"]).status
                == 403)
        #expect(try d.call("GET", "/api/v1/downloads", headers: ["Sec-Fetch-Site": "cross-site"]).status == 403)
        // The page's cookie without an Origin is not enough for a change.
        let cookieOnly = try d.call(
            "POST", "/api/v1/downloads", body: body, headers: ["Cookie": "haul_\(d.port)=\(d.token.text)"],
            bearer: false)
        #expect(cookieOnly.status == 403, "\(cookieOnly)")
        let ownPage = try d.call(
            "POST", "/api/v1/downloads", body: body,
            headers: ["Cookie": "haul_\(d.port)=\(d.token.text)", "Origin": "http://127.0.0.1:\(d.port)"], bearer: false
        )
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
    ])
    func anEscapeOrABadAddIsRefusedAndNothingIsStored(body: String) throws {
        let d = try Daemon()
        defer { d.stop() }
        let answer = try d.call("POST", "/api/v1/downloads", body: body)
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
}
