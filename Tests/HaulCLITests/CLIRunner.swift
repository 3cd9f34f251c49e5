import Foundation
import HaulTestSupport
import Testing

/// Runs the built `haul` binary, as users do.
struct CLIRun {
    var status: Int32
    /// Standard output as bytes (binary bodies written with `-o -`).
    var stdoutBytes: [UInt8]
    var stderr: String
    /// Standard output as text, decoded when asked for: repairing megabytes of binary output
    /// as UTF-8 takes seconds (2.3 s for 2.5 MB here), which hid a rate limit once.
    var stdout: String { String(decoding: stdoutBytes, as: UTF8.self) }
}

enum CLI {
    /// The `haul` executable next to the test bundle (SwiftPM puts both in the build directory).
    static let binary: URL = {
        let here = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        var candidates = [here.appendingPathComponent("haul")]
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        candidates.append(root.appendingPathComponent(".build/debug/haul"))
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[0]
    }()

    /// Another executable of the package (an example program), next to `haul`.
    static func program(_ name: String) -> URL { binary.deletingLastPathComponent().appendingPathComponent(name) }

    /// Starts `haul args...` in `directory`; the caller waits or signals it.
    static func start(
        _ args: [String], in directory: String? = nil, environment: [String: String] = [:], executable: URL = binary
    ) throws -> ChildProcess {
        try ChildProcess(executable.path, args, environment: environment, directory: directory)
    }

    /// Runs to completion, killing the process after `timeout` seconds.
    static func run(
        _ args: [String], in directory: String? = nil, environment: [String: String] = [:], timeout: Double = 60,
        executable: URL = binary
    ) async throws -> CLIRun {
        await finish(try start(args, in: directory, environment: environment, executable: executable), timeout: timeout)
    }

    /// Waits for the process (polling, so no cooperative thread is blocked), killing it after
    /// `timeout` seconds. A process that not even SIGKILL ended within 10 s gives status -1.
    static func finish(_ p: ChildProcess, timeout: Double = 60) async -> CLIRun {
        let status = await p.finish(timeout: timeout)
        var stderr = String(decoding: p.stderr, as: UTF8.self)
        if status == nil {
            stderr += "\n[test: pid \(p.pid) did not end within \(timeout) s and a SIGKILL]"
        } else if p.timedOut {
            stderr += "\n[test: pid \(p.pid) did not end within \(timeout) s: killed]"
        }
        return CLIRun(status: status ?? -1, stdoutBytes: Array(p.stdout), stderr: stderr)
    }
}

func contents(_ path: String) -> [UInt8] { FileManager.default.contents(atPath: path).map { Array($0) } ?? [] }

/// Records an issue unless the file holds exactly `expected` (without printing megabytes).
func expectFile(_ path: String, equals expected: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    if let difference = TestContent.difference(file: path, expected: expected) {
        Issue.record(Comment(rawValue: difference), sourceLocation: sourceLocation)
    }
}
