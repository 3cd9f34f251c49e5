import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `haul serve` as a process, driven by `haul get --background`, `ls`, `pause`, `resume`,
/// `cancel` and `rm`; and killed with SIGKILL mid-download.
@Suite("haul serve and the commands that talk to it", .serialized, .fewAtOnce)
struct ServeCommandTests {
    /// A state directory (XDG_STATE_HOME) and a download root of a test's own.
    struct Place {
        let dir: TemporaryDirectory
        var environment: [String: String] { ["XDG_STATE_HOME": dir.path + "/state", "HOME": dir.path + "/home"] }
        var root: String { dir.path + "/root" }
        var address: String { dir.path + "/state/haul/serve/address" }

        init() throws { dir = try TemporaryDirectory() }

        /// `haul serve --port 0`, once it has written its address.
        func serve(_ extra: [String] = []) async throws -> ChildProcess {
            let daemon = try CLI.start(["serve", "--port", "0", "-d", root] + extra, environment: environment)
            let up = await eventually { FileManager.default.fileExists(atPath: address) || !daemon.isRunning }
            try #require(up && daemon.isRunning, "\(String(decoding: daemon.stderr, as: UTF8.self))")
            return daemon
        }

        func haul(_ args: [String]) async throws -> CLIRun { try await CLI.run(args, environment: environment) }

        /// `haul ls`'s line for download `id`.
        func line(_ id: Int) async -> String {
            let listed = try? await haul(["ls"])
            return listed?.stdout.split(separator: "\n").first { $0.hasPrefix("\(id) ") }.map(String.init) ?? ""
        }
    }

    @Test func backgroundDownloadsAreListedControlledAndRemoved() async throws {
        let server = try TestServer()
        let place = try Place()
        defer { cleanUp(server, place.dir) }
        let daemon = try await place.serve()
        defer { daemon.killGroup() }
        let url = server.url("/files/one.bin?size=200000&seed=3").absoluteString
        let added = try await place.haul(["get", "--background", url])
        #expect(added.status == 0 && added.stdout == "1 queued \(url)\n", "\(added)")
        let completed = await eventually { await place.line(1).contains("completed") }
        let line = await place.line(1)
        #expect(completed, "\(line)")
        #expect(line.contains("100% 195.3 KiB/195.3 KiB") && line.hasSuffix("one.bin"), "\(line)")
        expectFile(place.root + "/one.bin", equals: TestContent.bytes(seed: 3, count: 200_000))
        let json = try await place.haul(["ls", "--json", "--state", "completed"])
        #expect(json.stdout.contains(#""file":"one.bin""#) && json.stdout.contains(#""state":"completed""#), "\(json)")
        // An id that is not there, one that is not an id, and an ended download.
        let missing = try await place.haul(["pause", "7"])
        #expect(missing.status == 2 && missing.stderr == "haul: error: download 7: no download 7\n", "\(missing)")
        #expect(try await place.haul(["pause", "x"]).status == 2)
        let ended = try await place.haul(["cancel", "1"])
        #expect(ended.status == 2 && ended.stderr.contains("has ended (completed)"), "\(ended)")
        let removed = try await place.haul(["rm", "--files", "1"])
        #expect(removed.status == 0 && removed.stdout == "1 removed\n", "\(removed)")
        #expect(!FileManager.default.fileExists(atPath: place.root + "/one.bin"))
        #expect(try await place.haul(["ls"]).stdout == "no downloads\n")
        daemon.signal(SIGTERM)
        let stopped = await CLI.finish(daemon, timeout: 30)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(!FileManager.default.fileExists(atPath: place.address))
    }

    @Test func moveReordersTheQueueAndRefusesWhatIsNotQueued() async throws {
        let server = try TestServer()
        let place = try Place()
        defer { cleanUp(server, place.dir) }
        let daemon = try await place.serve(["-j", "1"])
        defer { daemon.killGroup() }
        let urls = ["/holder?size=100000&stall=1000&stalls=1", "/two?size=100", "/three?size=100"].map {
            server.url($0).absoluteString
        }
        #expect(try await place.haul(["get", "--background"] + urls).status == 0)
        #expect(await eventually { await place.line(1).contains("running") })
        let moved = try await place.haul(["move", "top", "3"])
        #expect(moved.status == 0 && moved.stdout == "3 moved\n", "\(moved)")
        let queued = try await place.haul(["ls", "--state", "queued"])
        #expect(queued.stdout.split(separator: "\n").map { $0.prefix(1) } == ["3", "2"], "\(queued)")
        let running = try await place.haul(["move", "up", "1"])
        #expect(running.status == 2 && running.stderr.contains("download 1: download 1 is not queued"), "\(running)")
        let sideways = try await place.haul(["move", "sideways", "2"])
        #expect(
            sideways.status == 2
                && sideways.stderr
                    == "haul: error: move takes where first: top, up, down, bottom (see haul help move)\n",
            "\(sideways)")
        #expect(try await place.haul(["move", "--help"]).stdout.hasPrefix("usage: haul move top|up|down|bottom ID..."))
    }

    /// The processes whose environment holds `XDG_STATE_HOME=state`: the daemons a test's
    /// `haul get --background` started (in a session of their own, not the test's children).
    static func daemons(of state: String) -> [pid_t] {
        let wanted = Array("XDG_STATE_HOME=\(state)".utf8)
        let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }
        return pids.filter { pid in
            guard let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ") else { return false }
            return environ.split(separator: 0).contains { Array($0) == wanted }
        }
    }

    @Test func getInTheBackgroundStartsTheDaemonWhenNoneRuns() async throws {
        let server = try TestServer()
        let place = try Place()
        let state = place.dir.path + "/state"
        defer {
            for pid in Self.daemons(of: state) { kill(pid, SIGKILL) }
            cleanUp(server, place.dir)
        }
        var environment = place.environment
        environment["XDG_DOWNLOAD_DIR"] = place.root
        environment["HAUL_SERVE_PORT"] = "0"
        let url = server.url("/files/auto.bin?size=50000&seed=5").absoluteString
        let added = try await CLI.run(["get", "--background", url], environment: environment)
        let log = state + "/haul/serve/serve.log"
        #expect(added.status == 0 && added.stdout == "1 queued \(url)\n", "\(added)")
        #expect(
            added.stderr
                == "haul: started haul serve in the background: downloads go to \(place.root); its log is \(log)\n")
        let completed = await eventually { await place.line(1).contains("completed") }
        let line = await place.line(1)
        #expect(completed, "\(line)")
        expectFile(place.root + "/auto.bin", equals: TestContent.bytes(seed: 5, count: 50_000))
        // Running now: the next one is handed to it, nothing more started.
        let again = try await CLI.run(["get", "--background", url + "&again"], environment: environment)
        #expect(again.status == 0 && again.stderr.isEmpty && again.stdout.hasPrefix("2 queued "), "\(again)")
        let daemons = Self.daemons(of: state)
        #expect(daemons.count == 1)
        let cwd = daemons.first.flatMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\($0)/cwd")
        }
        #expect(cwd == "/", "a daemon keeps no directory busy")
        // Its log has no token; it stops on SIGTERM, leaving no address behind.
        let written = try String(contentsOfFile: log, encoding: .utf8)
        let token = try String(contentsOfFile: state + "/haul/serve/token", encoding: .utf8)
        #expect(!written.isEmpty && !written.contains(token.trimmingCharacters(in: .whitespacesAndNewlines)))
        for pid in daemons { kill(pid, SIGTERM) }
        #expect(await eventually { Self.daemons(of: state).isEmpty })
        #expect(!FileManager.default.fileExists(atPath: place.address))
        // A daemon that cannot start says why, from its log.
        environment["HAUL_SERVE_PORT"] = "nope"
        let broken = try await CLI.run(["get", "--background", url], environment: environment)
        #expect(broken.status == 3 && broken.stderr.contains("haul serve did not start: "), "\(broken)")
        #expect(broken.stderr.contains("HAUL_SERVE_PORT expects 0-65535, got 'nope'"), "\(broken)")
    }

    @Test func watchPrintsEachChangeOfStateAndEndsWhenNothingIsLeftToDo() async throws {
        let server = try TestServer()
        let place = try Place()
        defer { cleanUp(server, place.dir) }
        let daemon = try await place.serve()
        defer { daemon.killGroup() }
        let held = server.url("/held.bin?size=100000&stall=1000&stalls=1").absoluteString
        #expect(try await place.haul(["get", "--background", held]).status == 0)
        #expect(await eventually { await place.line(1).contains("running") })
        let watch = try CLI.start(["watch", "--until-idle"], environment: place.environment)
        defer { watch.killGroup() }
        let connected = await eventually { String(decoding: watch.stderr, as: UTF8.self).contains("watching") }
        #expect(connected, "\(String(decoding: watch.stderr, as: UTF8.self))")
        let missing = server.url("/missing?status=404").absoluteString
        #expect(try await place.haul(["get", "--background", missing]).status == 0)
        #expect(await eventually { await place.line(2).contains("failed") })
        #expect(try await place.haul(["cancel", "1"]).status == 0)
        let ended = await CLI.finish(watch, timeout: 30)
        let lines = ended.stdout.split(separator: "\n").map(String.init)
        #expect(ended.status == 3, "a download failed while watching: \(ended)")
        #expect(lines.first == "2 queued \(missing)", "\(lines)")
        #expect(lines.contains { $0.hasPrefix("2 failed \(missing): HTTP 404") }, "\(lines)")
        #expect(lines.last == "1 cancelled held.bin", "\(lines)")
        #expect(ended.stderr.hasPrefix("haul: watching haul serve (1 download)\n"), "\(ended.stderr)")
        // Idle already: it ends at once, and without a daemon it says so.
        let idle = try await place.haul(["watch", "--until-idle"])
        #expect(idle.status == 0 && idle.stdout.isEmpty, "\(idle)")
        daemon.signal(SIGTERM)
        _ = await CLI.finish(daemon, timeout: 30)
        let none = try await place.haul(["watch"])
        #expect(none.status == 3 && none.stderr.contains("haul serve is not running"), "\(none)")
    }

    /// Examples/Background across three processes: one hands two downloads over and exits at
    /// once; the daemon finishes them alone; the next is told of both ends, then caught up; the
    /// one after that only caught up.
    @Test func aBackgroundSessionIsToldInALaterProcessWhatEndedAfterTheFirstExited() async throws {
        let server = try TestServer()
        let place = try Place()
        defer { cleanUp(server, place.dir) }
        let daemon = try await place.serve()
        defer { daemon.killGroup() }
        let example = CLI.program("BackgroundExample")
        func run(_ args: [String]) async throws -> CLIRun {
            try await CLI.run(args, environment: place.environment, executable: example)
        }
        // one.bin is paced over a second: the first process exits while the daemon fetches it.
        let urls = [
            server.url("/files/one.bin?size=200000&rate=200000&seed=1"), server.url("/files/gone.bin?status=404"),
        ]
        let added = try await run(["add", "com.example.sync"] + urls.map(\.absoluteString))
        #expect(added.status == 0 && added.stdout == "queued 1 one.bin\nqueued 2 gone.bin\n", "\(added)")
        #expect(server.requests(path: "/files/one.bin").count <= 1)
        let ended = await eventually {
            let (one, two) = (await place.line(1), await place.line(2))
            return one.contains("completed") && two.contains("failed")
        }
        #expect(ended)
        let attached = try await run(["attach", "com.example.sync"])
        let lines = attached.stdout.split(separator: "\n").map(String.init)
        #expect(
            attached.status == 0 && lines.first == "2 downloads, 0 unfinished" && lines.last == "caught up",
            "\(attached)")
        #expect(
            Set(lines.dropFirst().dropLast()) == [
                "completed 1 one.bin 200000 bytes",
                "failed 2 gone.bin: HTTP 404 Not Found from \(urls[1].absoluteString)",
            ], "\(lines)")
        expectFile(place.root + "/one.bin", equals: TestContent.bytes(seed: 1, count: 200_000))
        let again = try await run(["attach", "com.example.sync"])
        #expect(again.status == 0 && again.stdout == "2 downloads, 0 unfinished\ncaught up\n", "\(again)")
        // Another identifier has none; a wait with one running ends when it does.
        let waited = try await run([
            "add", "org.example.other", server.url("/files/two.bin?size=100000&rate=100000").absoluteString,
        ])
        #expect(waited.status == 0, "\(waited)")
        let waiting = try await run(["wait", "org.example.other"])
        #expect(waiting.status == 0 && waiting.stdout.hasSuffix("completed 3 two.bin 100000 bytes\n"), "\(waiting)")
        daemon.signal(SIGTERM)
        _ = await CLI.finish(daemon, timeout: 30)
        let none = try await run(["attach", "com.example.sync"])
        #expect(none.status == 1 && none.stdout.hasPrefix("error: haul serve is not running"), "\(none)")
    }

    @Test func badFlagsAreRefusedInOneLineBeforeAnythingStarts() async throws {
        let place = try Place()
        defer { place.dir.remove() }
        let rate = "--max-overall-rate expects 0 or a rate of at least 1K, like 500K or 2M, got"
        for (flags, said) in [
            (["--max-overall-rate", "5"], "\(rate) '5'"), (["--max-overall-rate", "fast"], "\(rate) 'fast'"),
            (["-j", "65"], "--max-concurrent expects 1-64, got 65"),
            (["--port", "70000"], "--port expects 0-65535, got 70000"),
        ] {
            let run = try await place.haul(["serve", "-d", place.root] + flags)
            #expect(run.status == 2 && run.stderr == "haul: error: \(said)\n", "\(flags): \(run)")
            #expect(!FileManager.default.fileExists(atPath: place.dir.path + "/state/haul/serve"), "\(flags)")
        }
    }

    @Test func theQueueSurvivesAKillOfTheDaemonAndEndsWithTheExactFile() async throws {
        let server = try TestServer()
        let place = try Place()
        defer { cleanUp(server, place.dir) }
        let path = "/files/big.bin"
        let url = server.url("\(path)?size=800000&rate=200000&seed=8").absoluteString
        let first = try await place.serve()
        #expect(try await place.haul(["get", "--background", url]).status == 0)
        // Killed once a checkpoint (one a second) has recorded bytes: those are what resume.
        #expect(await eventually { server.bytesSent(path: path) > 200_000 })
        #expect(await eventually { FileManager.default.fileExists(atPath: place.root + "/big.bin.haul") })
        #expect(await eventually { server.bytesSent(path: path) > 450_000 })
        first.killGroup()
        _ = await CLI.finish(first, timeout: 30)
        let sent = server.bytesSent(path: path)
        #expect(sent < 800_000)
        // Not running: the commands say so.
        let down = try await place.haul(["ls"])
        #expect(down.status == 3 && down.stderr.contains("haul serve is not running"), "\(down)")
        let second = try await place.serve()
        defer { second.killGroup() }
        let completed = await eventually { await place.line(1).contains("completed") }
        let line = await place.line(1)
        #expect(completed, "\(line)")
        expectFile(place.root + "/big.bin", equals: TestContent.bytes(seed: 8, count: 800_000))
        let resumed = try #require(server.requests(path: path).last)
        #expect(server.requests(path: path).count == 2 && (resumed.rangeStart ?? 0) > 0, "\(resumed.headers)")
        // A second daemon on the same state is refused.
        let twice = try await place.haul(["serve", "--port", "0", "-d", place.root])
        #expect(twice.status == 1 && twice.stderr.contains("another haul serve is running"), "\(twice)")
    }

    @Test func aProcessOnTheDeadDaemonsPortIsNeverSentTheToken() async throws {
        let place = try Place()
        defer { place.dir.remove() }
        let daemon = try await place.serve()
        let address = String(decoding: contents(place.address), as: UTF8.self)
        let port = try #require(
            Int(address.split(separator: ":").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""))
        daemon.killGroup()
        _ = await CLI.finish(daemon, timeout: 30)
        let squatter = try Squatter(port: port)
        defer { squatter.stop() }
        let token = String(decoding: contents(place.dir.path + "/state/haul/serve/token"), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        for args in [["ls"], ["pause", "1"], ["get", "--background", "http://127.0.0.1:9/x"]] {
            let r = try await place.haul(args)
            #expect(r.status == 3 && r.stderr.contains("cannot prove it has the token"), "\(args): \(r)")
        }
        let heard = squatter.heard
        #expect(heard.contains("GET /api/v1/proof?nonce="), "\(heard)")
        #expect(!heard.contains(token) && !heard.lowercased().contains("authorization"), "\(heard)")
    }

    @Test func pauseResumeAndCancelReachTheTransfer() async throws {
        let server = try TestServer()
        let place = try Place()
        defer { cleanUp(server, place.dir) }
        let daemon = try await place.serve()
        defer { daemon.killGroup() }
        let path = "/files/slow.bin"
        let url = server.url("\(path)?size=600000&rate=150000").absoluteString
        let other = server.url("/files/gone.bin?size=600000&rate=150000").absoluteString
        #expect(try await place.haul(["get", "--background", "-d", "sub", url, other]).status == 0)
        #expect(await eventually { server.bytesSent(path: path) > 50_000 })
        let paused = try await place.haul(["pause", "1"])
        #expect(paused.stdout == "1 paused\n", "\(paused)")
        #expect(try await place.haul(["cancel", "2"]).stdout == "2 cancelled\n")
        #expect(await eventually { server.openConnections == 0 })
        let (first, second) = (await place.line(1), await place.line(2))
        #expect(first.contains("paused") && second.contains("cancelled"), "\(first)\n\(second)")
        #expect(try await place.haul(["resume", "1"]).stdout == "1 resumed\n")
        let completed = await eventually { await place.line(1).contains("completed") }
        let line = await place.line(1)
        #expect(completed, "\(line)")
        expectFile(place.root + "/sub/slow.bin", equals: TestContent.bytes(seed: 1, count: 600_000))
        #expect(!FileManager.default.fileExists(atPath: place.root + "/sub/gone.bin.part"))
        // What --background does not take, and names the daemon refuses.
        let refused = try await place.haul(["get", "--background", "-N", url])
        #expect(refused.status == 2 && refused.stderr.contains("not --timestamping"), "\(refused)")
        let escape = try await place.haul(["get", "--background", "-d", "../up", url])
        #expect(escape.status == 2 && escape.stderr.hasPrefix("haul: error: "), "\(escape)")
    }
}
