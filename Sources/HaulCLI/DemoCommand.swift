import Haul
import HaulTestServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `haul demo`: the main job, for real, with no internet: a large download from a built-in
/// local server that drops the connection twice, a pause and resume, and a SHA-256 check.
struct DemoCommand {
    static let help = """
        usage: haul demo [file|data|stream|task|manager] [--size MIB] [--dir DIR] [--keep]

        One mode per way to use the library (default: file):
          file     the main job, below
          data     one-shot into memory, with the size cap
          stream   a slow consumer and back-pressure (the server is held back)
          task     suspend (no bytes arrive), resume, cancel with resume data, resume from it
          manager  eight files through a queue with two downloads at a time

        file: starts a local test server on 127.0.0.1 and downloads a file from it (default 256 MiB,
        throttled to 32 MiB/s so you can watch). The server drops the connection twice; haul
        retries and resumes from the bytes on disk. Halfway through, the demo pauses (cancels,
        keeping the partial file and its resume record) and resumes with a Range request. At the
        end it compares the file's SHA-256 with the server's.

          --size MIB   file size in MiB (default 256)
          --dir DIR    where to download (default: a new temporary directory, removed afterwards)
          --keep       keep the downloaded file
        """

    static let options: [Arguments.Option] = [
        .init("--size", value: true), .init("--dir", value: true), .init("--keep"),
    ]

    let way: DemoWay
    let size: Int
    let dir: String?
    let keep: Bool

    init(_ args: [String]) throws(UsageError) {
        let (v, positionals) = try Arguments.parse(args, options: Self.options)
        guard positionals.count <= 1, let way = DemoWay(rawValue: positionals.first ?? "file") else {
            throw UsageError("demo modes are file, data, stream, task and manager (see haul help demo)")
        }
        self.way = way
        let mib = try v.integer("--size", min: 1) ?? way.defaultMiB
        // A size in MiB past 2^43 would trap multiplying to bytes.
        guard mib <= 65536 else { throw UsageError("--size is at most 65536 (MiB), got \(mib)") }
        size = mib * 1_048_576
        dir = v.last("--dir")
        keep = v.flag("--keep")
    }

    func run(interrupts: Interrupts) async -> ExitCode {
        let output = Output(mode: .human)
        let server: TestServer
        do { server = try TestServer() } catch {
            output.error("cannot start the local server: \(error)")
            return .internalError
        }
        defer { server.shutdown() }
        let workDir =
            dir
            ?? (FileManager.default.temporaryDirectory.path + "/haul-demo-\(ProcessInfo.processInfo.processIdentifier)")
        try? FileManager.default.createDirectory(atPath: workDir, withIntermediateDirectories: true)
        // A directory of its own goes afterwards, unless it holds the file `--keep` keeps.
        defer { if dir == nil && !(keep && way == .file) { try? FileManager.default.removeItem(atPath: workDir) } }
        if way != .file {
            return await DemoWays(server: server, directory: workDir, size: size, output: output).run(way)
        }
        let drop = max(1, size * 27 / 100)
        let url = server.url("/haul-demo.bin?size=\(size)&seed=7&rate=\(32 * 1_048_576)&drop=\(drop)&drops=3")
        let dest = URL(fileURLWithPath: workDir + "/haul-demo.bin")
        print("haul demo: \(Output.bytes(Int64(size))) from \(server.baseURL.absoluteString) → \(dest.path)")
        print(
            "the server drops the connection after every \(Output.bytes(Int64(drop))) (3 times); haul pauses at 50%\n")
        let size = self.size
        let expected = Task.detached { TestContent.sha256(seed: 7, count: size) }
        var configuration = HaulConfiguration()
        configuration.retry.initialDelay = 0.3
        let session = HaulSession(configuration: configuration)
        let started = Date()
        let result: DownloadResult
        do throws(HaulError) {
            result = try await download(url, to: dest, session: session, output: output, interrupts: interrupts)
        } catch {
            output.error(error.message)
            return ExitCode(error)
        }
        output.clearLine()
        let seconds = Date().timeIntervalSince(started)
        print("✔  downloaded \(Output.bytes(result.bytes)) in \(Format.fixed(seconds, 1)) s")
        print("\nrequests the server saw:")
        for r in server.requests(path: "/haul-demo.bin") {
            print(
                "  GET \(r.range.map { "Range: \($0)" } ?? "(whole file)")\(r.ifRange.map { "  If-Range: \($0)" } ?? "")"
            )
        }
        defer { if !keep { try? FileManager.default.removeItem(atPath: dest.path) } }
        return compare(dest, with: await expected.value, output: output)
    }

    /// The download, paused at 50% (cancelled, keeping its partial) and resumed a second later.
    private func download(
        _ url: URL, to dest: URL, session: HaulSession, output: Output, interrupts: Interrupts
    ) async throws(HaulError) -> DownloadResult {
        var options = DownloadOptions()
        options.overwrite = true
        let pauseAt = Int64(size / 2)
        let paused = Shared(false)
        let first = Task { () async throws(HaulError) -> DownloadResult in
            try await session.download(from: url, to: .file(dest), options: options) { event in
                report(event, output)
                if case .progress(let p) = event, p.completedBytes >= pauseAt, !paused.get() {
                    paused.set(true)
                    withUnsafeCurrentTask { $0?.cancel() }
                }
            }
        }
        let token = interrupts.onInterrupt { first.cancel() }
        let pauser = Task {
            while !paused.get() && !Task.isCancelled { try? await Task.sleep(nanoseconds: 20_000_000) }
            first.cancel()
        }
        defer { pauser.cancel() }
        do {
            let result = try await first.value
            interrupts.remove(token)
            return result
        } catch let error as HaulError where error.code == .cancelled && paused.get() {
            interrupts.remove(token)
            output.clearLine()
            let partial = HaulSession.partialFileURL(for: dest)
            let onDisk = (try? FileManager.default.attributesOfItem(atPath: partial.path)[.size] as? Int64) ?? 0
            print("⏸  paused: \(Output.bytes(onDisk)) kept in \(partial.lastPathComponent) (+ its resume record)")
            try? await Task.sleep(nanoseconds: 1_000_000_000)
            print("▶  resuming")
        } catch {
            interrupts.remove(token)
            throw HaulError.from(error)
        }
        let second = Task { () async throws(HaulError) -> DownloadResult in
            try await session.download(from: url, to: .file(dest)) { report($0, output) }
        }
        let resumeToken = interrupts.onInterrupt { second.cancel() }
        defer { interrupts.remove(resumeToken) }
        do { return try await second.value } catch { throw HaulError.from(error) }
    }

    /// The SHA-256 on disk against the server's.
    private func compare(_ dest: URL, with want: String, output: Output) -> ExitCode {
        let got: String
        do { got = try TestContent.sha256(ofFile: dest.path) } catch {
            output.error("cannot read \(dest.path): \(error)")
            return .fileSystem
        }
        print("\nSHA-256 expected \(want)")
        print("SHA-256 on disk  \(got)")
        if want == got {
            print("✔  identical: no byte lost or duplicated across 2 drops and a pause")
            return .success
        }
        print("✘  MISMATCH")
        return .integrity
    }
}

private func report(_ event: DownloadEvent, _ output: Output) {
    switch event {
    case .progress(let p): output.progress(p, name: "haul-demo.bin")
    case .retrying(let attempt, let error, let delay):
        output.clearLine()
        print(
            "↻  \(error.message); retry \(attempt) in \(Format.fixed(delay, 1)) s, resuming from the bytes on disk"
        )
    case .started(let s) where s.offset > 0:
        output.clearLine()
        print("→  HTTP \(s.status): continuing at \(Output.bytes(s.offset))")
    case .restarted(let reason):
        output.clearLine()
        print("!  starting over: \(reason)")
    default: break
    }
}
