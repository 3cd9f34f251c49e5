import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore
@testable import HaulServer

/// The daemon running real transfers against the test server: the states the API shows come
/// from the transfers, and what the server saw says a pause stopped one.
@Suite("haul serve's daemon: downloads that run, pause, resume, cancel and outlive a restart", .serialized, .fewAtOnce)
struct ServeDaemonTests {
    final class Running: @unchecked Sendable {
        let state: String
        let root: String
        let daemon: ServeDaemon

        init(
            state: String, root: String, restarting: Bool = false,
            _ adjust: (inout ServeDaemon.Configuration) -> Void = { _ in }
        ) throws {
            self.state = state
            self.root = root
            var configuration = ServeDaemon.Configuration(state: state, root: root)
            configuration.port = 0
            configuration.addresses = ["127.0.0.1"]
            configuration.home = nil
            adjust(&configuration)
            daemon = restarting ? try Self.restart(configuration) : try ServeDaemon(configuration)
        }

        /// The daemon, started again after a stopped one, while the state directory's lock may
        /// still be held by a copy of the stopped one's descriptor: a child another test of this process spawns holds one from
        /// its fork to its exec (close-on-exec closes it there), which a loaded machine can make
        /// last. Bounded: 5 s.
        private static func restart(_ configuration: ServeDaemon.Configuration) throws -> ServeDaemon {
            for _ in 0..<50 {
                do {
                    return try ServeDaemon(configuration)
                } catch {
                    guard error.message.hasPrefix("another haul serve") else { throw error }
                    Thread.sleep(forTimeInterval: 0.1)
                }
            }
            return try ServeDaemon(configuration)
        }

        /// Sends a request with the token; the status and the body as JSON.
        func call(_ method: String, _ path: String, body: String? = nil) throws -> (status: Int, json: [String: Any]) {
            var lines = [
                "\(method) \(path) HTTP/1.1", "Host: 127.0.0.1:\(daemon.port)", "Connection: close",
                "Authorization: Bearer \(daemon.token.text)",
            ]
            if let body { lines += ["Content-Type: application/json", "Content-Length: \(body.utf8.count)"] }
            let answer = try RawClient.exchange(
                port: daemon.port, lines.joined(separator: "\r\n") + "\r\n\r\n" + (body ?? ""))
            let status = Int(answer.split(separator: " ").dropFirst().first ?? "") ?? 0
            let payload = answer.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
            let json = (try? JSONSerialization.jsonObject(with: Data(payload.utf8))) as? [String: Any] ?? [:]
            return (status, json)
        }

        /// Download `id` as the API shows it.
        func download(_ id: Int) -> [String: Any] { (try? call("GET", "/api/v1/downloads/\(id)").json) ?? [:] }

        func state(_ id: Int) -> String? { download(id)["state"] as? String }

        func add(_ url: URL, extra: String = "") throws -> Int {
            let added = try call("POST", "/api/v1/downloads", body: #"{"urls":["\#(url.absoluteString)"]\#(extra)}"#)
            let first = (added.json["downloads"] as? [[String: Any]])?.first
            return try #require(first?["id"] as? Int, "\(added)")
        }

        /// The kinds and states of download `id`'s events, in order.
        func states(_ id: Int) throws -> [String] {
            let events = try call("GET", "/api/v1/events?since=0").json["events"] as? [[String: Any]] ?? []
            return events.filter { $0["download"] as? Int == id }.compactMap { event in
                guard let body = event["body"] as? String,
                    let json = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
                else { return nil }
                return json["state"] as? String
            }
        }
    }

    static func directories() throws -> (TemporaryDirectory, String, String) {
        let dir = try TemporaryDirectory()
        return (dir, dir.path + "/state", dir.path + "/root")
    }

    @Test func aDownloadRunsToTheExactFileAndItsStatesAreTheTransfers() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer {
            cleanUp(server, dir)
        }
        // Paced over a second: the list the states come from is read ten times a second.
        let id = try d.add(server.url("/files/a.bin?size=300000&seed=4&rate=300000"))
        #expect(await eventually { d.state(id) == "completed" }, "\(d.download(id))")
        #expect(
            TestContent.difference(file: root + "/a.bin", expected: TestContent.bytes(seed: 4, count: 300_000)) == nil)
        let shown = d.download(id)
        #expect(shown["file"] as? String == "a.bin" && shown["done"] as? Int == 300_000, "\(shown)")
        #expect(shown["total"] as? Int == 300_000 && shown["finished"] != nil, "\(shown)")
        #expect(try d.states(id) == ["queued", "running", "completed"])
        await d.daemon.stop()
        #expect(!FileManager.default.fileExists(atPath: state + "/address"))
    }

    @Test func aPauseStopsTheServersTransferAndAResumeFinishesFromItsBytes() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let path = "/files/slow.bin"
        let id = try d.add(server.url("\(path)?size=400000&rate=100000&seed=5"))
        #expect(await eventually { server.bytesSent(path: path) > 50_000 })
        #expect(try d.call("POST", "/api/v1/downloads/\(id)/pause", body: "{}").json["state"] as? String == "paused")
        // The server's answer ends: its connection was closed, not left to drip.
        #expect(await eventually { server.openConnections == 0 })
        let sent = server.bytesSent(path: path)
        #expect(sent < 400_000 && d.state(id) == "paused")
        #expect(server.requests(path: path).count == 1)
        #expect(try d.call("POST", "/api/v1/downloads/\(id)/resume", body: "{}").status == 200)
        #expect(await eventually { d.state(id) == "completed" }, "\(d.download(id))")
        let second = try #require(server.requests(path: path).last)
        #expect(server.requests(path: path).count == 2 && (second.rangeStart ?? 0) > 0, "\(second.headers)")
        #expect(
            TestContent.difference(file: root + "/slow.bin", expected: TestContent.bytes(seed: 5, count: 400_000))
                == nil)
        await d.daemon.stop()
    }

    @Test func aCancelEndsTheTransferAndRemovesThePartial() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let path = "/files/gone.bin"
        let id = try d.add(server.url("\(path)?size=400000&rate=100000"))
        #expect(await eventually { server.bytesSent(path: path) > 20_000 })
        #expect(
            try d.call("POST", "/api/v1/downloads/\(id)/cancel", body: "{}").json["state"] as? String == "cancelled")
        #expect(await eventually { (try? FileManager.default.contentsOfDirectory(atPath: root)) == [] })
        // Ended: it stays cancelled, and cannot be resumed.
        #expect(try d.call("POST", "/api/v1/downloads/\(id)/resume", body: "{}").status == 400)
        #expect(d.state(id) == "cancelled")
        await d.daemon.stop()
    }

    @Test func aRestartedDaemonContinuesWhatWasRunningFromItsBytes() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        defer { cleanUp(server, dir) }
        let path = "/files/long.bin"
        let first = try Running(state: state, root: root)
        let id = try first.add(server.url("\(path)?size=600000&rate=150000&seed=6"))
        #expect(await eventually { server.bytesSent(path: path) > 100_000 })
        #expect(throws: ServeError.self) { try Running(state: state, root: root) }
        await first.daemon.stop()
        #expect(server.requests(path: path).count == 1)
        let second = try Running(state: state, root: root, restarting: true)
        #expect(await eventually { second.state(id) == "completed" }, "\(second.download(id))")
        let resumed = try #require(server.requests(path: path).last)
        #expect(server.requests(path: path).count == 2 && (resumed.rangeStart ?? 0) > 0, "\(resumed.headers)")
        #expect(
            TestContent.difference(file: root + "/long.bin", expected: TestContent.bytes(seed: 6, count: 600_000))
                == nil)
        await second.daemon.stop()
    }

    @Test func theEventStreamSendsASnapshotThenNumberedChangesAndProgressAndResumesFromAnID() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        func open(_ extra: String = "") throws -> RawClient {
            let client = try RawClient(port: d.daemon.port)
            client.send(
                "GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:\(d.daemon.port)\r\n"
                    + "Authorization: Bearer \(d.daemon.token.text)\r\nAccept: text/event-stream\r\n\(extra)\r\n")
            return client
        }
        let stream = try open()
        let head = stream.read(until: "event: snapshot")
        #expect(head.hasPrefix("HTTP/1.1 200") && head.contains("text/event-stream"), "\(head)")
        #expect(head.contains("nosniff") && head.contains(#""downloads":[]"#), "\(head)")
        let id = try d.add(server.url("/files/seen.bin?size=300000&rate=150000"))
        let seen = stream.read(until: #""state":"completed""#)
        #expect(seen.contains("event: added") && seen.contains(#""state":"running""#), "\(seen)")
        #expect(seen.contains("event: progress\ndata: {\"done\":"), "\(seen)")
        // Resumed from the number of the "added" event: no snapshot, only what came after it.
        let added = try #require(seen.firstMatch(of: #/id: (\d+)\nevent: added/#)?.output.1)
        let again = try open("Last-Event-ID: \(added)\r\n")
        let rest = again.read(until: #""state":"completed""#)
        #expect(!rest.contains("event: snapshot") && !rest.contains("event: added"), "\(rest)")
        #expect(rest.contains("event: state") && rest.contains(#""state":"completed""#), "\(rest)")
        // An id the daemon never gave: a snapshot, with the download in it.
        let unknown = try open("Last-Event-ID: 999999\r\n").read(until: "event: snapshot")
        #expect(unknown.contains(#""id":\#(id)"#), "\(unknown)")
        await d.daemon.stop()
    }

    @Test func aDownloadPausedBeforeARestartIsCancelledWithItsPartial() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        defer { cleanUp(server, dir) }
        let path = "/files/kept.bin"
        let first = try Running(state: state, root: root)
        let id = try first.add(server.url("\(path)?size=600000&rate=150000"))
        #expect(await eventually { FileManager.default.fileExists(atPath: root + "/kept.bin.haul") })
        #expect(try first.call("POST", "/api/v1/downloads/\(id)/pause", body: "{}").status == 200)
        #expect(await eventually { first.download(id)["file"] as? String == "kept.bin" })
        await first.daemon.stop()
        let second = try Running(state: state, root: root, restarting: true)
        #expect(second.state(id) == "paused" && FileManager.default.fileExists(atPath: root + "/kept.bin.part"))
        #expect(try second.call("POST", "/api/v1/downloads/\(id)/cancel", body: "{}").status == 200)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: root)) == [])
        #expect(server.requests(path: path).count == 1)
        await second.daemon.stop()
    }

    @Test func theConcurrencySettingHoldsDownloadsBackAndLetsThemGoAndOutlivesARestart() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        defer { cleanUp(server, dir) }
        let d = try Running(state: state, root: root)
        #expect(try d.call("GET", "/api/v1/settings").json["maxConcurrentDownloads"] as? Int == 3)
        for bad in [0, 65] {
            #expect(try d.call("POST", "/api/v1/settings", body: #"{"maxConcurrentDownloads":\#(bad)}"#).status == 400)
        }
        #expect(try d.call("POST", "/api/v1/settings", body: #"{"maxConcurrentDownloads":1}"#).status == 200)
        let first = try d.add(server.url("/files/one.bin?size=300000&rate=150000"))
        let second = try d.add(server.url("/files/two.bin?size=300000&rate=150000"))
        #expect(await eventually { d.state(first) == "running" })
        #expect(d.state(second) == "queued" && server.requests(path: "/files/two.bin").isEmpty)
        #expect(try d.call("POST", "/api/v1/settings", body: #"{"maxConcurrentDownloads":2}"#).status == 200)
        #expect(await eventually { server.requests(path: "/files/two.bin").count == 1 })
        #expect(server.maxConcurrentRequests() == 2)
        await d.daemon.stop()
        let again = try Running(state: state, root: root, restarting: true)
        #expect(try again.call("GET", "/api/v1/settings").json["maxConcurrentDownloads"] as? Int == 2)
        await again.daemon.stop()
    }

    /// The shared speed limit paces a running download (the bytes it wrote stay under the rate
    /// times the time passed, plus the bucket and one chunk: a bound a slow machine only stays
    /// further under), and lifting it lets the same transfer finish at once.
    @Test func theSpeedLimitPacesARunningDownloadAndLiftingItLetsItFinish() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        defer { cleanUp(server, dir) }
        let d = try Running(state: state, root: root)
        #expect(try d.call("GET", "/api/v1/settings").json["maxOverallBytesPerSecond"] as? Int == 0)
        // Refused whole: a good concurrency beside a bad rate is not kept either.
        for bad in [-1, 1, 1023] {
            let body = #"{"maxConcurrentDownloads":5,"maxOverallBytesPerSecond":\#(bad)}"#
            #expect(try d.call("POST", "/api/v1/settings", body: body).status == 400)
        }
        #expect(try d.call("GET", "/api/v1/settings").json["maxConcurrentDownloads"] as? Int == 3)
        let rate = 256 * 1024
        #expect(try d.call("POST", "/api/v1/settings", body: #"{"maxOverallBytesPerSecond":\#(rate)}"#).status == 200)
        let size = 8_000_000
        let start = monotonicSeconds()
        let id = try d.add(server.url("/files/paced.bin?size=\(size)&seed=9"))
        #expect(await eventually { (d.download(id)["done"] as? Int ?? 0) > 0 }, "\(d.download(id))")
        try await Task.sleep(nanoseconds: 1_500_000_000)
        let done = try #require(d.download(id)["done"] as? Int)
        let bound = Double(rate) * (monotonicSeconds() - start) + Double(rate / 4 + CurlTransport.bufferSize)
        #expect(Double(done) <= bound && d.state(id) == "running", "\(done) bytes, at most \(bound)")
        // At this rate the rest would take half a minute: lifted, it comes within the wait.
        #expect(try d.call("POST", "/api/v1/settings", body: #"{"maxOverallBytesPerSecond":0}"#).status == 200)
        #expect(await eventually { d.state(id) == "completed" }, "\(d.download(id))")
        #expect(
            TestContent.difference(file: root + "/paced.bin", expected: TestContent.bytes(seed: 9, count: size)) == nil)
        #expect(server.requests(path: "/files/paced.bin").count == 1, "one transfer, paced then not")
        let events = try d.call("GET", "/api/v1/events?since=0").json["events"] as? [[String: Any]] ?? []
        #expect(events.filter { $0["kind"] as? String == "settings" }.count == 2, "\(events.map { $0["kind"] ?? "" })")
        // Kept: a restarted daemon starts with it, and `--max-overall-rate` replaces it.
        _ = try d.call("POST", "/api/v1/settings", body: #"{"maxOverallBytesPerSecond":4096}"#)
        await d.daemon.stop()
        let again = try Running(state: state, root: root, restarting: true)
        #expect(try again.call("GET", "/api/v1/settings").json["maxOverallBytesPerSecond"] as? Int == 4096)
        await again.daemon.stop()
        let flagged = try Running(state: state, root: root, restarting: true) { $0.maxOverallBytesPerSecond = 8192 }
        #expect(try flagged.call("GET", "/api/v1/settings").json["maxOverallBytesPerSecond"] as? Int == 8192)
        await flagged.daemon.stop()
    }

    /// Moves and a resume reorder the queue behind a download that holds the only slot: the
    /// list shows the store's order and the server sees the manager's, and they are the same.
    @Test func queuedDownloadsMoveAndStartInTheOrderTheListShows() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        defer { cleanUp(server, dir) }
        let d = try Running(state: state, root: root) { $0.maxConcurrentDownloads = 1 }
        let holder = try d.add(server.url("/holder?size=100000&stall=1000&stalls=1"))
        #expect(await eventually { d.state(holder) == "running" })
        var ids: [String: Int] = [:]
        for name in ["a", "b", "c", "d"] { ids[name] = try d.add(server.url("/\(name)?size=1000")) }
        func move(_ name: String, _ to: String) throws -> Int {
            try d.call("POST", "/api/v1/downloads/\(ids[name]!)/move", body: #"{"to":"\#(to)"}"#).status
        }
        func queued() throws -> [String] {
            let listed = try d.call("GET", "/api/v1/downloads?state=queued").json["downloads"] as? [[String: Any]] ?? []
            return listed.compactMap { item in ids.first { $0.value == item["id"] as? Int }?.key }
        }
        #expect(try move("c", "top") == 200 && move("a", "bottom") == 200 && move("d", "up") == 200)
        #expect(try queued() == ["c", "d", "b", "a"])
        // Resumed, a download goes to the back (the manager's place for it).
        #expect(try d.call("POST", "/api/v1/downloads/\(ids["d"]!)/pause", body: "{}").status == 200)
        #expect(try d.call("POST", "/api/v1/downloads/\(ids["d"]!)/resume", body: "{}").status == 200)
        #expect(try queued() == ["c", "b", "a", "d"])
        for (body, on) in [(#"{"to":"sideways"}"#, ids["a"]!), ("{}", ids["a"]!), (#"{"to":"top"}"#, holder)] {
            let refused = try d.call("POST", "/api/v1/downloads/\(on)/move", body: body)
            #expect(refused.status == 400, "\(body): \(refused)")
        }
        let events = try d.call("GET", "/api/v1/events?since=0").json["events"] as? [[String: Any]] ?? []
        #expect(events.filter { $0["kind"] as? String == "moved" }.count == 3)
        #expect(try d.call("POST", "/api/v1/downloads/\(holder)/cancel", body: "{}").status == 200)
        #expect(await eventually { ids.values.allSatisfy { d.state($0) == "completed" } })
        #expect(server.requests.map(\.path).filter { $0 != "/holder" } == ["/c", "/b", "/a", "/d"])
        await d.daemon.stop()
    }

    @Test func removeWithFilesDeletesOnlyAFileTheDownloadWrote() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        // The user's own file, of the size a server then offers under its name: found complete.
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data(TestContent.bytes(seed: 7, count: 5000)).write(to: URL(fileURLWithPath: root + "/notes.txt"))
        let found = try d.add(server.url("/n?size=5000&seed=7"), extra: #","name":"notes.txt""#)
        #expect(await eventually { d.state(found) == "completed" }, "\(d.download(found))")
        let refused = try d.call("POST", "/api/v1/downloads/\(found)/remove", body: #"{"files":true}"#)
        #expect(refused.status == 400 && FileManager.default.fileExists(atPath: root + "/notes.txt"), "\(refused)")
        // Another download named like a completed one (it fails: the name is taken) removes its
        // own partial, not the completed one's file.
        let written = try d.add(server.url("/w?size=3000"), extra: #","name":"w.bin""#)
        #expect(await eventually { d.state(written) == "completed" })
        let other = try d.add(server.url("/w2?size=900000&rate=100000"), extra: #","name":"w.bin""#)
        #expect(await eventually { d.state(other) == "failed" }, "\(d.download(other))")
        #expect(try d.call("POST", "/api/v1/downloads/\(other)/remove", body: #"{"files":true}"#).status == 200)
        #expect(FileManager.default.fileExists(atPath: root + "/w.bin"))
        // Its own file goes; a resume of a running download is refused and changes nothing.
        #expect(try d.call("POST", "/api/v1/downloads/\(written)/remove", body: #"{"files":true}"#).status == 200)
        #expect(!FileManager.default.fileExists(atPath: root + "/w.bin"))
        let running = try d.add(server.url("/r?size=600000&rate=150000"))
        #expect(await eventually { d.state(running) == "running" })
        #expect(try d.call("POST", "/api/v1/downloads/\(running)/resume", body: "{}").status == 400)
        #expect(d.state(running) == "running")
        // Credentials in a URL are refused, not dropped.
        #expect(try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://u:p@h/x"]}"#).status == 400)
        await d.daemon.stop()
    }

    @Test func anEventStreamOfLongURLsIsWrittenAsItsReaderReads() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        _ = try d.call("POST", "/api/v1/settings", body: #"{"maxConcurrentDownloads":1}"#)
        let long = String(repeating: "q", count: 7000)
        let urls = (1...300).map { n in
            "\"" + server.url("/slow\(n)?size=9000000&rate=1000&pad=\(long)").absoluteString + "\""
        }
        // In four adds: one body is at most 1 MiB.
        for part in stride(from: 0, to: 300, by: 75) {
            let body = #"{"urls":["# + urls[part..<part + 75].joined(separator: ",") + "]}"
            #expect(try d.call("POST", "/api/v1/downloads", body: body).status == 201)
        }
        let client = try RawClient(port: d.daemon.port)
        client.send(
            "GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:\(d.daemon.port)\r\n"
                + "Authorization: Bearer \(d.daemon.token.text)\r\nAccept: text/event-stream\r\n\r\n")
        // 2 MiB of snapshot, then the stream stays open for what comes next.
        let snapshot = client.read(until: #""id":300,"#)
        #expect(snapshot.contains(#""id":300,"#) && snapshot.contains(#""count":300"#), "\(snapshot.suffix(300))")
        _ = try d.add(server.url("/after?size=10"))
        #expect(client.read(until: "event: added").contains("event: added"))
        await d.daemon.stop()
    }

    @Test func aDownloadNamedIntoASubfolderLandsThereAndOptionsAreChecked() async throws {
        let server = try TestServer()
        let (dir, state, root) = try Self.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let id = try d.add(server.url("/x?size=5000"), extra: #","name":"b.dat","subfolder":"iso/new","connections":2"#)
        #expect(await eventually { d.state(id) == "completed" }, "\(d.download(id))")
        #expect(FileManager.default.fileExists(atPath: root + "/iso/new/b.dat"))
        #expect(d.download(id)["file"] as? String == "iso/new/b.dat")
        for bad in [#","connections":99"#, #","maxBytesPerSecond":10"#, #","checksums":["sha-256=zz"]"#] {
            let refused = try d.call(
                "POST", "/api/v1/downloads", body: #"{"urls":["\#(server.url("/y").absoluteString)"]\#(bad)}"#)
            #expect(refused.status == 400, "\(bad): \(refused)")
        }
        await d.daemon.stop()
    }
}
