import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore
@testable import HaulServer

/// The evhttp server: what it hands a handler, what it refuses before one sees it, replies
/// given later from another thread, streams, and a caller that leaves.
@Suite("haul serve's HTTP server (evhttp)", .serialized, .fewAtOnce)
struct HTTPServerTests {
    /// A server on 127.0.0.1:0 with `handler`; its port.
    static func start(
        limits: HTTPServer.Limits = HTTPServer.Limits(), _ handler: @escaping HTTPServer.Handler
    ) throws -> (HTTPServer, Int) {
        let (fd, port) = try Sys.listenTCP(address: "127.0.0.1", port: 0)
        return (try HTTPServer(sockets: [fd], limits: limits, handler: handler), port)
    }

    /// Echoes what it got, as lines.
    static let echo: HTTPServer.Handler = { request, exchange in
        let lines = [
            "method \(request.method)", "path \(request.path)", "query \(request.query)",
            "host \(request.header("host") ?? "-")", "body \(String(decoding: request.body, as: UTF8.self))",
            "peer \(request.peer)",
        ]
        exchange.reply(.text(200, lines.joined(separator: "\n")))
    }

    @Test func aHandlerGetsTheRequestAndItsReplyGoesOut() throws {
        let (server, port) = try Self.start(Self.echo)
        defer { server.stop() }
        let answer = try RawClient.exchange(
            port: port, "GET /api/v1/x?since=3&a=%20 HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n")
        #expect(answer.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(answer)")
        #expect(answer.contains("Content-Type: text/plain; charset=utf-8\r\n"), "\(answer)")
        #expect(!answer.contains("ISO-8859-1"), "\(answer)")
        for line in ["method GET", "path /api/v1/x", "query since=3&a=%20", "host 127.0.0.1:\(port)", "peer 127.0.0.1"]
        {
            #expect(answer.contains(line), "\(line) in \(answer)")
        }
        let posted = try RawClient.exchange(
            port: port,
            "POST /p HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{\"a\":1}"
        )
        #expect(posted.contains("method POST") && posted.contains("body {\"a\":1}"), "\(posted)")
    }

    @Test func oversizedHeadersBodiesAndOtherMethodsAreRefusedBeforeTheHandler() throws {
        let seen = Locked(0)
        var limits = HTTPServer.Limits()
        limits.bodyBytes = 1000
        limits.headerBytes = 2000
        let (server, port) = try Self.start(limits: limits) { request, exchange in
            seen.withLock { $0 += 1 }
            exchange.reply(.text(200, "ok"))
        }
        defer { server.stop() }
        let big = try RawClient.exchange(
            port: port,
            "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n" + String(repeating: "x", count: 5000))
        #expect(big.hasPrefix("HTTP/1.1 413"), "\(big.prefix(200))")
        let headers = try RawClient.exchange(
            port: port, "GET / HTTP/1.1\r\nHost: h\r\nX-Big: \(String(repeating: "y", count: 4000))\r\n\r\n")
        #expect(headers.hasPrefix("HTTP/1.1 4") || headers.isEmpty, "\(headers.prefix(200))")
        let put = try RawClient.exchange(port: port, "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
        #expect(put.hasPrefix("HTTP/1.1 501"), "\(put.prefix(200))")  // evhttp's answer to other methods
        let garbage = try RawClient.exchange(port: port, "\u{1}\u{2}garbage\r\n\r\n")
        #expect(!garbage.contains(" 200 "), "\(garbage.prefix(200))")
        #expect(seen.withLock { $0 } == 0)
    }

    @Test func aReplyCanComeLaterFromAnotherThread() throws {
        let (server, port) = try Self.start { request, exchange in
            Thread.detachNewThread {
                usleep(50_000)
                exchange.reply(.text(202, "later"))
            }
        }
        defer { server.stop() }
        let answer = try RawClient.exchange(port: port, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        #expect(
            answer.hasPrefix("HTTP/1.1 202 Accepted\r\n") && answer.hasSuffix("later"), "\(answer.debugDescription)")
    }

    @Test func aStreamSendsChunksAndTheCallersLeavingIsHeard() async throws {
        let opened = Locked<HTTPExchange?>(nil)
        let left = Locked(false)
        let (server, port) = try Self.start { request, exchange in
            exchange.onClose { left.withLock { $0 = true } }
            exchange.start(HTTPReply(status: 200, headers: [("Content-Type", "text/event-stream")]))
            exchange.send(Array("id: 1\ndata: first\n\n".utf8))
            opened.withLock { $0 = exchange }
        }
        defer { server.stop() }
        var client: RawClient? = try RawClient(port: port)
        client!.send("GET /events HTTP/1.1\r\nHost: h\r\n\r\n")
        let head = client!.read(until: "data: first")
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n") && head.contains("Transfer-Encoding: chunked"), "\(head)")
        let exchange = try #require(opened.withLock { $0 })
        exchange.send(Array("id: 2\ndata: second\n\n".utf8))
        #expect(client!.read(until: "data: second").contains("data: second"))
        #expect(exchange.isOpen)
        client = nil  // the reader leaves
        #expect(await eventually(timeout: 10) { left.withLock { $0 } })
        #expect(!exchange.isOpen)
        exchange.send(Array("data: nobody\n\n".utf8))  // dropped, not a crash
        exchange.end()
    }

    @Test func stoppingWithAnOpenStreamReturnsAndClosesTheDoor() throws {
        let (server, port) = try Self.start { _, exchange in
            exchange.start(HTTPReply(status: 200, headers: [("Content-Type", "text/event-stream")]))
        }
        let client = try RawClient(port: port)
        client.send("GET /events HTTP/1.1\r\nHost: h\r\n\r\n")
        _ = client.read(until: "\r\n\r\n")
        server.stop()
        #expect(throws: (any Error).self) { try RawClient.exchange(port: port, "GET / HTTP/1.1\r\n\r\n") }
    }

    @Test(arguments: [
        "GET http://evil.example/ HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ])
    func whatEvhttpLetsThroughButADoorShouldNotIsRefused(request: String) throws {
        let seen = Locked(0)
        let (server, port) = try Self.start { _, exchange in
            seen.withLock { $0 += 1 }
            exchange.reply(.text(200, "ok"))
        }
        defer { server.stop() }
        let answer = try RawClient.exchange(port: port, request)
        #expect(answer.hasPrefix("HTTP/1.1 400") || answer.isEmpty, "\(answer.prefix(200).debugDescription)")
        #expect(seen.withLock { $0 } == 0)
    }

    @Test func aHeadReplyHasTheLengthAndNoBody() throws {
        let (server, port) = try Self.start { _, exchange in exchange.reply(.text(200, "twelve bytes")) }
        defer { server.stop() }
        let client = try RawClient(port: port)
        // Two on one connection: a body after the first head would be read as the second's.
        client.send("HEAD / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        let answer = client.read()
        let replies = answer.components(separatedBy: "HTTP/1.1 200 OK\r\n")
        #expect(replies.count == 3, "\(answer.debugDescription)")
        #expect(
            replies[1].contains("Content-Length: 12\r\n") && replies[1].hasSuffix("\r\n\r\n"),
            "\(answer.debugDescription)")
        #expect(replies[2].hasSuffix("twelve bytes"), "\(answer.debugDescription)")
    }

    @Test func aRequestNobodyAnswersGetsA503AndNothingIsLeftBehind() async throws {
        var limits = HTTPServer.Limits()
        limits.replySeconds = 1
        let before = HTTPExchange.alive.withLock { $0 }
        let (server, port) = try Self.start(limits: limits) { _, _ in }  // never replies
        let answer = try RawClient.exchange(port: port, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        #expect(answer.hasPrefix("HTTP/1.1 503"), "\(answer.debugDescription)")
        // A caller that leaves before any reply: its exchange is given back too.
        let (quiet, quietPort) = try Self.start { _, _ in }
        do {
            let client = try RawClient(port: quietPort)
            client.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        }
        #expect(await eventually(timeout: 10) { HTTPExchange.alive.withLock { $0 } <= before + 1 })
        quiet.stop()
        server.stop()
        #expect(await eventually(timeout: 10) { HTTPExchange.alive.withLock { $0 } <= before })
    }

    @Test func aReplyAfterStopIsDroppedAndStopFromAHandlerReturns() async throws {
        let held = Locked<HTTPExchange?>(nil)
        let box = Locked<HTTPServer?>(nil)
        let (server, port) = try Self.start { request, exchange in
            if request.path == "/stop" {
                held.withLock { $0 = exchange }
                box.withLock { $0 }?.stop()  // on the loop's thread: returns at once
            }
        }
        box.withLock { $0 = server }
        let client = try RawClient(port: port)
        client.send("GET /stop HTTP/1.1\r\nHost: h\r\n\r\n")
        #expect(await eventually(timeout: 10) { held.withLock { $0 } != nil })
        server.stop()  // from here: waits for the loop's end
        held.withLock { $0 }?.reply(.text(200, "too late"))  // nothing to write to
        #expect(throws: (any Error).self) { try RawClient.exchange(port: port, "GET / HTTP/1.1\r\n\r\n") }
    }
}
