import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

/// The helper every process-starting test relies on: whatever the child does, a wait ends.
@Suite("ChildProcess: bounded waits for the programs tests start", .fewAtOnce)
struct ChildProcessTests {
    @Test func exitCodeAndBothStreamsAreCollected() async throws {
        let p = try ChildProcess("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"])
        #expect(await p.finish(timeout: 20) == 3)
        #expect(String(decoding: p.stdout, as: UTF8.self) == "out\n")
        #expect(String(decoding: p.stderr, as: UTF8.self) == "err\n")
    }

    @Test func theChildInheritsNoDescriptorButItsThreeStreams() async throws {
        // Open descriptors of this process (servers' sockets, other children's pipes) must not
        // leak: a leaked write end of another test's pipe kept that test reading until this
        // child ended.
        let server = try TestServer()
        defer { server.shutdown() }
        let p = try ChildProcess("/bin/sh", ["-c", "ls /proc/$$/fd"])
        #expect(await p.finish(timeout: 20) == 0)
        let fds = String(decoding: p.stdout, as: UTF8.self).split(separator: "\n").compactMap { Int($0) }
        #expect(fds.sorted() == [0, 1, 2], "\(fds)")
    }

    @Test func aChildThatOutlivesItsTimeoutIsKilledWithWhatItStarted() async throws {
        // A grandchild holds the output pipe open: killing the child alone would leave the read
        // waiting for the grandchild.
        let p = try ChildProcess("/bin/sh", ["-c", "sleep 30 & echo started; sleep 30"])
        let began = Date()
        #expect(await p.finish(timeout: 0.5) == SIGKILL)
        #expect(Date().timeIntervalSince(began) < 10)
        #expect(String(decoding: p.stdout, as: UTF8.self) == "started\n")
        #expect(!p.isRunning)
    }

    @Test func anExitedChildKeepsItsPidUntilItsOutputIsReadSoAKillReachesOnlyItsGroup() async throws {
        // The child exits at once; a grandchild in its group holds the pipe and would write later
        // (read for as long as it runs: no giving up after 2 s on a loaded machine).
        let p = try ChildProcess("/bin/sh", ["-c", "(sleep 30; echo late) & exit 4"], outputGrace: 60)
        #expect(await eventually(timeout: 20) { p.status != nil })
        // Not reaped yet: still a zombie, so its pid (the group's id) is nobody else's.
        let stat = (try? String(contentsOfFile: "/proc/\(p.pid)/stat", encoding: .utf8)) ?? ""
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        #expect(fields.first == "Z", "\(stat)")
        // A kill now reaches the grandchild, through the group the zombie holds.
        p.killGroup()
        #expect(await p.finish(timeout: 20) == 4)
        #expect(String(decoding: p.stdout, as: UTF8.self).isEmpty)
    }

    @Test func aMissingProgramIsAnErrorNotAHang() {
        #expect(throws: (any Error).self) { try ChildProcess("/nonexistent/program", []) }
    }
}
