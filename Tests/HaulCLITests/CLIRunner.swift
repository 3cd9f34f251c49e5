import Foundation
import HaulTestSupport
import Testing

/// Runs the built `haul` binary, as users do.
struct CLIRun {
    var status: Int32
    var stdout: String
    var stderr: String
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
    ) throws -> (Process, Pipe, Pipe) {
        let p = Process()
        p.executableURL = executable
        p.arguments = args
        if let directory { p.currentDirectoryURL = URL(fileURLWithPath: directory) }
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        p.environment = env
        let out = Pipe()
        let err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return (p, out, err)
    }

    /// Runs to completion, killing the process after `timeout` seconds.
    static func run(
        _ args: [String], in directory: String? = nil, environment: [String: String] = [:], timeout: Double = 60,
        executable: URL = binary
    ) async throws -> CLIRun {
        let (p, out, err) = try start(args, in: directory, environment: environment, executable: executable)
        return await finish(p, out, err, timeout: timeout)
    }

    /// Waits for the process by polling with `Task.sleep`: blocking calls (`waitUntilExit`,
    /// `usleep`) would hold one of the few cooperative threads that every test shares.
    static func finish(_ p: Process, _ out: Pipe, _ err: Pipe, timeout: Double = 60) async -> CLIRun {
        // Drain the pipes while waiting, so a chatty child never blocks.
        let outData = LockedData()
        let errData = LockedData()
        let group = DispatchGroup()
        for (pipe, sink) in [(out, outData), (err, errData)] {
            group.enter()
            DispatchQueue.global().async {
                sink.set(pipe.fileHandleForReading.readDataToEndOfFile())
                group.leave()
            }
        }
        let deadline = Date().addingTimeInterval(timeout)
        while p.isRunning && Date() < deadline { try? await Task.sleep(nanoseconds: 20_000_000) }
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        while p.isRunning { try? await Task.sleep(nanoseconds: 10_000_000) }
        await withCheckedContinuation { c in group.notify(queue: .global()) { c.resume() } }
        return CLIRun(
            status: p.terminationStatus, stdout: String(decoding: outData.get(), as: UTF8.self),
            stderr: String(decoding: errData.get(), as: UTF8.self))
    }
}

final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ d: Data) { lock.withLock { data = d } }
    func get() -> Data { lock.withLock { data } }
}

func contents(_ path: String) -> [UInt8] { FileManager.default.contents(atPath: path).map { Array($0) } ?? [] }

/// Records an issue unless the file holds exactly `expected` (without printing megabytes).
func expectFile(_ path: String, equals expected: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    if let difference = TestContent.difference(file: path, expected: expected) {
        Issue.record(Comment(rawValue: difference), sourceLocation: sourceLocation)
    }
}
