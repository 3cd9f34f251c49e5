import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import Haul
@testable import HaulCore
@testable import HaulServer

/// `BackgroundSession` against a running daemon: downloads handed over by one session object
/// go on without it, and a later one with the same identifier is told of each end once.
@Suite("Background sessions: downloads in haul serve, told once to whoever reattaches", .serialized, .fewAtOnce)
struct BackgroundSessionTests {
    typealias Running = ServeDaemonTests.Running
    static let identifier = "com.example.sync"

    static func attach(_ d: Running, _ identifier: String = identifier) async throws -> BackgroundSession {
        try await BackgroundSession(configuration: .background(identifier: identifier), stateDirectory: d.state)
    }

    /// An iteration of `session.events` in a task of its own, collecting what it is told.
    final class Reader: Sendable {
        let seen = Locked<[BackgroundEvent]>([])
        let task: Task<Void, any Error>

        init(_ session: BackgroundSession) {
            let seen = self.seen
            task = Task { for try await event in session.events { seen.withLock { $0.append(event) } } }
        }

        var events: [BackgroundEvent] { seen.get() }

        /// Waits (at most 30 s) until `done` holds for what was told; then stops reading.
        func read(until done: ([BackgroundEvent]) -> Bool) async -> [BackgroundEvent] {
            _ = await eventually(timeout: 30) { done(events) }
            task.cancel()
            return events
        }
    }

    /// Reads `session`'s events until `done` holds for the ones read (at most 30 s); those read.
    static func read(_ session: BackgroundSession, until done: ([BackgroundEvent]) -> Bool) async -> [BackgroundEvent] {
        await Reader(session).read(until: done)
    }

    /// Writes the daemon's address file as it does (0600) with another port: what a client
    /// finds after a `kill -9`, or with something in front of the daemon.
    static func pointAddress(of state: String, to port: Int) -> Bool {
        FileManager.default.createFile(
            atPath: state + "/address", contents: Data("http://127.0.0.1:\(port)\n".utf8),
            attributes: [.posixPermissions: 0o600])
    }

    static func finished(_ events: [BackgroundEvent]) -> [BackgroundDownload] {
        events.compactMap { if case .finished(let d) = $0 { d } else { nil } }
    }

    /// A file name from the daemon that would leave the root is not shown, judged on bytes: a
    /// "/" followed by a combining mark is one Character and still a "/".
    @Test func aFileNameLeavingTheRootIsNotShown() {
        let root = URL(fileURLWithPath: "/srv/haul")
        func shown(_ file: String) -> URL? {
            let wire = BackgroundDownload.Wire(
                id: 1, url: "http://127.0.0.1:1/a", state: "completed", priority: nil, added: nil, finished: nil,
                error: nil, file: file, done: nil, total: nil, speed: nil, told: nil)
            return BackgroundDownload(wire, root: root)?.fileURL
        }
        #expect(shown("a.bin")?.path == "/srv/haul/a.bin")
        #expect(shown("sub/\u{301}a.bin")?.path == "/srv/haul/sub/\u{301}a.bin")
        for file in ["../a.bin", "/etc/passwd", "a//b", "./a", "../\u{301}/../\u{301}x", "/\u{301}x", ""] {
            #expect(shown(file) == nil, "\(file)")
        }
    }

    @Test func endsWhileAwayAreToldOnceThenCaughtUpAndSessionsAreKeptApart() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        do {
            let first = try await Self.attach(d)
            #expect(first.downloadDirectory?.path == root)
            let a = try await first.download(from: server.url("/files/a.bin?size=100000&seed=1"))
            #expect(a.id == 1 && a.state == .queued)
            _ = try await first.download(from: server.url("/missing?status=404"), named: "missing.bin")
            let other = try await Self.attach(d, "org.example.other")
            _ = try await other.download(from: server.url("/files/b.bin?size=1000&seed=2"))
        }
        // No session object is left: the daemon goes on alone.
        #expect(await eventually { d.state(1) == "completed" && d.state(2) == "failed" && d.state(3) == "completed" })
        let again = try await Self.attach(d)
        #expect(try await again.downloads().map(\.id) == [1, 2])
        let events = await Self.read(again) { $0.contains(.caughtUp) }
        #expect(events.last == .caughtUp && events.count == 3, "\(events)")
        let ends = Dictionary(uniqueKeysWithValues: Self.finished(events).map { ($0.id, $0) })
        #expect(ends[1]?.state == .completed && ends[1]?.fileURL?.path == root + "/a.bin", "\(events)")
        #expect(ends[1]?.progress.completedBytes == 100_000)
        #expect(ends[2]?.state == .failed && ends[2]?.failureReason?.contains("404") == true, "\(events)")
        #expect(
            TestContent.difference(file: root + "/a.bin", expected: TestContent.bytes(seed: 1, count: 100_000)) == nil)
        // Told once: the next attach has nothing to catch up on, and the list still shows both.
        let third = try await Self.attach(d)
        #expect(await Self.read(third) { $0.contains(.caughtUp) } == [.caughtUp])
        #expect(try await third.downloads().map(\.state) == [.completed, .failed])
        // The other session is told of its own download only, and the whole list has all three.
        let other = try await Self.attach(d, "org.example.other")
        let theirs = await Self.read(other) { $0.contains(.caughtUp) }
        #expect(Self.finished(theirs).map(\.id) == [3] && theirs.last == .caughtUp, "\(theirs)")
        #expect((try d.call("GET", "/api/v1/downloads").json["downloads"] as? [Any])?.count == 3)
        await d.daemon.stop()
    }

    @Test func liveChangesFollowCaughtUpAndEachEndGoesToOneIterationOnly() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let session = try await Self.attach(d)
        let twin = try await Self.attach(d)
        let one = Reader(session)
        let two = Reader(twin)
        #expect(await eventually { one.events.contains(.caughtUp) && two.events.contains(.caughtUp) })
        // Paced over two seconds: progress is sent twice a second.
        let path = "/files/live.bin"
        _ = try await session.download(from: server.url("\(path)?size=200000&rate=100000&seed=3"))
        #expect(await eventually(timeout: 30) { d.state(1) == "completed" })
        _ = try await session.download(from: server.url("/files/tiny.bin?size=10"))
        // Both read until they have seen download 2 added, which comes after download 1's end.
        let seesSecond: ([BackgroundEvent]) -> Bool = { events in
            events.contains { if case .updated(let d) = $0 { d.id == 2 } else { false } }
        }
        let first = await one.read(until: seesSecond)
        let second = await two.read(until: seesSecond)
        for events in [first, second] {
            #expect(events.first == .caughtUp, "\(events)")
            let states = events.compactMap { if case .updated(let d) = $0, d.id == 1 { d.state } else { nil } }
            #expect(states.contains(.running), "\(events)")
        }
        let progressed = (first + second).contains { if case .progress(id: 1, _) = $0 { true } else { false } }
        #expect(progressed, "\(first) \(second)")
        // Download 2 may have ended too by the time the reading stopped: download 1's end only.
        let told = (Self.finished(first) + Self.finished(second)).filter { $0.id == 1 }
        #expect(told.count == 1 && told.first?.state == .completed, "\(first) \(second)")
        // The other one hears of the end as an update.
        let loser = Self.finished(first).contains { $0.id == 1 } ? second : first
        let heard = loser.contains {
            if case .updated(let d) = $0 { d.id == 1 && d.state == .completed } else { false }
        }
        #expect(heard, "\(loser)")
        await d.daemon.stop()
    }

    @Test func aDownloadResumedThatEndsAgainIsToldAgainToTheSameIteration() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let session = try await Self.attach(d)
        let reader = Reader(session)
        defer { reader.task.cancel() }
        let missing = try await session.download(from: server.url("/missing?status=404"), named: "m.bin")
        #expect(await eventually { Self.finished(reader.events).count == 1 }, "\(reader.events)")
        #expect(try await session.resume(missing.id).state == .queued)
        #expect(await eventually { Self.finished(reader.events).count == 2 }, "\(reader.events)")
        let ends = Self.finished(reader.events)
        #expect(ends.map(\.id) == [missing.id, missing.id] && ends.allSatisfy { $0.state == .failed })
        #expect(server.requests(path: "/missing").count == 2)
        await d.daemon.stop()
    }

    @Test func moreEndsThanASnapshotHoldsAreAllToldOnceBeforeCaughtUp() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root) { $0.snapshotLimit = 2 }
        defer { cleanUp(server, dir) }
        let session = try await Self.attach(d)
        for i in 1...5 { _ = try await session.download(from: server.url("/gone\(i)?status=404")) }
        #expect(await eventually { (1...5).allSatisfy { d.state($0) == "failed" } })
        let events = await Self.read(try await Self.attach(d)) { $0.contains(.caughtUp) }
        #expect(Self.finished(events).map(\.id).sorted() == [1, 2, 3, 4, 5] && events.last == .caughtUp, "\(events)")
        #expect(await Self.read(try await Self.attach(d)) { $0.contains(.caughtUp) } == [.caughtUp])
        await d.daemon.stop()
    }

    @Test func anEndWhoseToldAnswerWasLostIsStillHandedOutOnceAndBeforeCaughtUp() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let session = try await Self.attach(d)
        _ = try await session.download(from: server.url("/gone?status=404"))
        _ = try await session.download(from: server.url("/files/kept.bin?size=1000"))
        #expect(await eventually { d.state(1) == "failed" && d.state(2) == "completed" })
        // The first tell reaches the daemon, which records it; its answer never comes back.
        let relay = try LossyRelay(to: d.daemon.port, losing: 1, of: "/told ")
        defer { relay.stop() }
        #expect(Self.pointAddress(of: state, to: relay.port))
        let events = await Self.read(try await Self.attach(d)) { $0.contains(.caughtUp) }
        #expect(relay.lost.get() == 1)
        #expect(Self.finished(events).map(\.id).sorted() == [1, 2] && events.last == .caughtUp, "\(events)")
        #expect(events.count == 3, "\(events)")
        #expect(await Self.read(try await Self.attach(d)) { $0.contains(.caughtUp) } == [.caughtUp])
        await d.daemon.stop()
    }

    @Test func aProcessOnTheDeadDaemonsPortIsNeverSentTheToken() async throws {
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root)
        defer { dir.remove() }
        let session = try await Self.attach(d)
        await d.daemon.stop()
        // As after a kill -9: the address file stays, and another process takes the port.
        let squatter = try Squatter(port: d.daemon.port)
        defer { squatter.stop() }
        #expect(Self.pointAddress(of: state, to: d.daemon.port))
        do {
            _ = try await session.downloads()
            Issue.record("a call went through to what holds a dead daemon's port")
        } catch { #expect(error.code == .network && error.message.contains("cannot prove"), "\(error)") }
        var events = session.events
        events.reconnectWindow = 1
        do {
            for try await event in events { Issue.record("told \(event) by what holds a dead daemon's port") }
        } catch { #expect(error.code == .network, "\(error)") }
        #expect(squatter.heard.contains("GET /api/v1/proof?nonce="), "\(squatter.heard)")
        #expect(!squatter.heard.contains(d.daemon.token.text) && !squatter.heard.lowercased().contains("authorization"))
    }

    @Test func anIterationOutlivesARestartOfTheDaemonAndIsToldWhatEndedMeanwhile() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let before = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let session = try await Self.attach(before)
        let path = "/files/restart.bin"
        let download = try await session.download(from: server.url("\(path)?size=300000&rate=100000&seed=4"))
        let reader = Reader(session)
        defer { reader.task.cancel() }
        #expect(await eventually { server.bytesSent(path: path) > 50_000 && reader.events.contains(.caughtUp) })
        await before.daemon.stop()
        // Another daemon on the same state, at another port: the iteration finds it.
        let after = try Running(state: state, root: root)
        let ended = await eventually(timeout: 30) { !Self.finished(reader.events).isEmpty }
        #expect(ended, "\(reader.events)")
        let told = Self.finished(reader.events)
        #expect(told.map(\.id) == [download.id] && told.first?.state == .completed, "\(told)")
        #expect(reader.events.filter { $0 == .caughtUp }.count == 1)
        #expect(
            TestContent.difference(file: root + "/restart.bin", expected: TestContent.bytes(seed: 4, count: 300_000))
                == nil)
        #expect(server.requests(path: path).count == 2 && (server.requests(path: path).last?.rangeStart ?? 0) > 0)
        // The session's calls go to the new daemon too.
        #expect(try await session.downloads().map(\.state) == [.completed])
        await after.daemon.stop()
    }

    @Test func aSessionControlsItsOwnDownloadsOnly() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        let d = try Running(state: state, root: root)
        defer { cleanUp(server, dir) }
        let session = try await Self.attach(d)
        let path = "/files/held.bin"
        let held = try await session.download(from: server.url("\(path)?size=400000&rate=100000&seed=5"))
        #expect(await eventually { server.bytesSent(path: path) > 50_000 })
        #expect(try await session.pause(held.id).state == .paused)
        #expect(await eventually { server.openConnections == 0 })
        // Another session cannot touch it: it stays paused.
        let stranger = try await Self.attach(d, "org.example.stranger")
        for act in ["resume", "cancel", "remove"] {
            do {
                switch act {
                case "resume": _ = try await stranger.resume(held.id)
                case "cancel": _ = try await stranger.cancel(held.id)
                default: try await stranger.remove(held.id)
                }
                Issue.record("\(act) of another session's download went through")
            } catch {
                #expect(error.code == .usage && error.message.contains("not one of background session"), "\(error)")
            }
        }
        #expect(d.state(Int(held.id)) == "paused")
        #expect(try await session.resume(held.id).state == .queued)
        #expect(await eventually { server.requests(path: path).count == 2 })
        #expect(try await session.cancel(held.id).state == .cancelled)
        #expect(await eventually { !FileManager.default.fileExists(atPath: root + "/held.bin.part") })
        try await session.remove(held.id)
        #expect(try await session.downloads().isEmpty)
        // A download added outside any session is no session's.
        let plain = try d.add(server.url("/files/plain.bin?size=10"))
        do {
            _ = try await session.pause(Int64(plain))
            Issue.record("paused a download of no session's")
        } catch { #expect(error.code == .usage) }
        await d.daemon.stop()
    }

    @Test func whatASessionCannotDoIsRefusedInOneLineAndNothingIsAdded() async throws {
        let server = try TestServer()
        let (dir, state, root) = try ServeDaemonTests.directories()
        defer { cleanUp(server, dir) }
        func refusal(_ body: () async throws -> Void) async -> HaulError? {
            do {
                try await body()
                return nil
            } catch { return error as? HaulError }
        }
        // No daemon yet.
        let none = await refusal {
            _ = try await BackgroundSession(configuration: .background(identifier: "a.b"), stateDirectory: state)
        }
        #expect(none?.code == .daemonNotRunning, "\(String(describing: none))")
        let d = try Running(state: state, root: root)
        let plain = await refusal { _ = try await BackgroundSession(configuration: .default, stateDirectory: state) }
        #expect(plain?.code == .usage && plain?.message.contains("background(identifier:)") == true)
        for bad in ["", "has space", "slash/y", "ümlaut", String(repeating: "a", count: 129)] {
            let wrong = await refusal {
                _ = try await BackgroundSession(configuration: .background(identifier: bad), stateDirectory: state)
            }
            #expect(wrong?.code == .usage, "\(bad)")
        }
        // A HaulSession does not run a background configuration's transfers by itself.
        let foreground = await refusal {
            _ = try await HaulSession(configuration: .background(identifier: "a.b")).data(
                from: server.url("/x?size=10"))
        }
        #expect(foreground?.code == .usage && foreground?.message.contains("BackgroundSession") == true)
        let session = try await Self.attach(d)
        var options = DownloadOptions()
        options.headers = ["Authorization": "Bearer secret"]
        let headers = await refusal { _ = try await session.download(from: server.url("/h?size=10"), options: options) }
        #expect(headers?.code == .usage && headers?.message.contains("DownloadOptions.headers") == true)
        let credentials = await refusal {
            _ = try await session.download(from: URL(string: "http://u:p@127.0.0.1:9/x")!)
        }
        #expect(credentials?.code == .usage && credentials?.message.contains("user name or password") == true)
        let escape = await refusal { _ = try await session.download(from: server.url("/e?size=10"), named: "../x") }
        #expect(escape?.code == .usage, "\(String(describing: escape))")
        let listed = try await session.downloads()
        #expect(server.requests.isEmpty && listed.isEmpty)
        // The API's own checks of a session's name and of a tell.
        #expect(try d.call("GET", "/api/v1/downloads?session=bad%20name").status == 400)
        #expect(try d.call("GET", "/api/v1/events?session=bad%2Fname").status == 400)
        let added = try d.call("POST", "/api/v1/downloads", body: #"{"urls":["http://h/a"],"session":"x y"}"#)
        #expect(added.status == 400, "\(added)")
        let queued = try d.add(server.url("/held?size=100000&stall=1000&stalls=1"), extra: #","session":"a.b""#)
        #expect(try d.call("POST", "/api/v1/downloads/\(queued)/told", body: "{}").status == 400)
        await d.daemon.stop()
    }
}
