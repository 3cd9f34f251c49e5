import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What one download says, the one place it is worded: its events and its outcome as notes on
/// stderr, the progress line, and `--json` lines. The same for `haul get URL` and for each
/// download of a `-j` run, which adds its number: the `id` of its JSON lines, and `#N name:`
/// in front of its notes (its progress is a line of the run's block, drawn by the run).
final class Reporter: Sendable {
    let output: Output
    let url: URL
    /// Its place among the URLs given (`-j`); nil for a download on its own.
    let number: Int?
    private let shown: String
    /// How the answer began (the file's name and where its bytes are kept, worked out only when
    /// a line needs them), and the bytes so far.
    private let state: Shared<(start: DownloadStart?, bytes: Int64)>

    init(output: Output, url: URL, number: Int? = nil) {
        self.output = output
        self.url = url
        self.number = number
        shown = HaulRequest.redacted(url)
        state = Shared((nil, 0))
    }

    /// `#N name: ` in a `-j` run (built only when a note is written), nothing on its own.
    private func prefix() -> String { number.map { "#\($0) \(url.lastPathComponent): " } ?? "" }

    func report(_ event: DownloadEvent) {
        switch event {
        case .started(let s):
            state.withLock { $0 = (s, s.offset) }
            output.json(
                "start",
                [
                    ("id", number), ("url", shown), ("destination", s.destination.path), ("status", s.status),
                    ("offset", s.offset), ("total", s.totalBytes),
                ])
            guard s.offset > 0 else { return }
            if number == nil {
                output.note("resuming \(s.destination.lastPathComponent) at \(Output.bytes(s.offset))")
            } else {
                output.note("\(prefix())resuming at \(Output.bytes(s.offset))")
            }
        case .progress(let p):
            let start = state.withLock { s -> DownloadStart? in
                s.bytes = p.completedBytes
                return s.start
            }
            if let number {
                output.json(
                    "progress",
                    [
                        ("id", number), ("bytes", p.completedBytes), ("total", p.totalBytes),
                        ("speed", p.bytesPerSecond), ("eta", p.estimatedTimeRemaining),
                    ])
            } else {
                output.progress(p, name: start?.destination.lastPathComponent ?? url.lastPathComponent)
            }
        case .retrying(let attempt, let error, let delay):
            output.json(
                "retry",
                [
                    ("id", number), ("attempt", attempt), ("delay", delay), ("code", error.code.description),
                    ("message", error.message),
                ])
            output.note("\(prefix())\(error.message); retry \(attempt) in \(Format.fixed(delay, 1)) s")
        case .restarted(let reason):
            output.json("restart", [("id", number), ("reason", reason)])
            output.note("\(prefix())starting over: \(reason)")
        case .suspended, .resumed, .completed, .failed:
            break  // the outcome is reported by ``finished(_:seconds:)``
        }
    }

    /// The outcome: "saved …" (with its size and time when `seconds` is given), "already
    /// complete", "interrupted; kept …" or the error. Returns the exit code it means.
    func finished(_ outcome: Result<DownloadResult, HaulError>, seconds: Double? = nil) -> ExitCode {
        switch outcome {
        case .success(let r):
            output.clearLine()
            output.json(
                "done",
                [
                    ("id", number), ("url", number.map { _ in shown }), ("path", r.fileURL.path), ("bytes", r.bytes),
                    ("alreadyComplete", r.alreadyComplete), ("notModified", r.notModified ? true : nil),
                ])
            if r.notModified {
                output.note("\(r.fileURL.path) is up to date (not modified on the server, \(Output.bytes(r.bytes)))")
            } else if r.alreadyComplete {
                output.note("\(r.fileURL.path) is already complete (\(Output.bytes(r.bytes)))")
            } else if let seconds {
                output.note(
                    "saved \(r.fileURL.path) (\(Output.bytes(r.bytes)) in \(Format.fixed(seconds, 1)) s)")
            } else {
                output.note("saved \(r.fileURL.path)")
            }
            return .success
        case .failure(let error):
            let code = ExitCode(error)
            output.json(
                "error",
                [
                    ("id", number), ("url", number.map { _ in shown }), ("code", error.code.description),
                    ("message", error.message), ("exit", code.rawValue),
                    ("status", number == nil ? error.httpStatus : nil),
                ])
            if error.code == .cancelled && number == nil {
                output.clearLine()
                let (bytes, partial) = state.withLock { ($0.bytes, $0.start?.partialFileURL.path) }
                if let part = error.path ?? partial {
                    output.note(
                        "interrupted; kept \(Output.bytes(bytes)) in \(part). Run the same command again to resume.")
                } else {
                    output.note("interrupted")
                }
            } else {
                output.error(error.message)
            }
            return code
        }
    }
}
