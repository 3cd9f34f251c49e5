import Haul

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where `haul get` writes a body as it arrives instead of into a file of its own: standard
/// output (`-o -`), or an existing device or FIFO named by `-o` (`-o /dev/null`, `-o fifo`),
/// which a partial file and a rename into place would replace with a regular file.
enum StreamTarget: Equatable {
    case standardOutput
    case special(path: String)

    /// `-o`'s argument when it names a stream: `-`, or a path that exists (following links)
    /// and is neither a regular file nor a directory.
    init?(_ argument: String) {
        if argument == "-" {
            self = .standardOutput
            return
        }
        var status = stat()
        let kind = stat(argument, &status) == 0 ? status.st_mode & S_IFMT : 0
        guard kind != 0, kind != S_IFREG, kind != S_IFDIR else { return nil }
        self = .special(path: argument)
    }

    /// As the user gave it to `-o`.
    var argument: String {
        switch self {
        case .standardOutput: "-"
        case .special(let path): path
        }
    }

    /// For messages: "standard output", or "a device or FIFO".
    var kind: String {
        switch self {
        case .standardOutput: "standard output"
        case .special: "a device or FIFO"
        }
    }

    /// Opens it for writing (a FIFO waits for its reader, as with curl and shells): a file
    /// descriptor that the caller closes unless it is standard output's.
    func open() throws(HaulError) -> Int32 {
        switch self {
        case .standardOutput: return 1
        case .special(let path):
            #if canImport(Glibc)
                let fd = Glibc.open(path, O_WRONLY | O_CLOEXEC)
            #else
                let fd = Darwin.open(path, O_WRONLY | O_CLOEXEC)
            #endif
            guard fd >= 0 else {
                let failure = errno
                throw HaulError(
                    .fileSystem, "cannot open \(path) for writing: \(String(cString: strerror(failure)))",
                    errno: failure, path: path)
            }
            return fd
        }
    }

    /// Names it in messages: "standard output", or the path.
    var shown: String {
        switch self {
        case .standardOutput: "standard output"
        case .special(let path): path
        }
    }
}

extension GetCommand {
    /// Options that `-o -` cannot honour: standard output is written in order, over one
    /// connection, with no partial file (and `--json` would share it with the body).
    static let notForStandardOutput = ["--json", "--min-split-size", "--lowest-speed-limit", "--timestamping"]

    /// `-o -` (or `-o DEVICE`): the body goes to standard output (or the device or FIFO) as it
    /// arrives (a dropped connection is continued with `Range` + `If-Range`, never spliced);
    /// progress and messages go to stderr.
    func runStreaming(to target: StreamTarget, interrupts: Interrupts) async -> ExitCode {
        guard let url = urls.first else { return .usage }
        let output = self.output
        let shown = HaulRequest.redacted(url)
        let name = url.lastPathComponent
        let session = HaulSession(configuration: configuration)
        var request = HaulRequest(url: url, headers: options.headers)
        request.decodesContent = false  // the bytes as stored, as a download to a file gets them
        let options = self.options
        let started = Date()
        let work = Task { () async throws(HaulError) -> Int64 in
            let fd = try target.open()
            defer { if target != .standardOutput { close(fd) } }
            return try await session.download(request, toFileDescriptor: fd, named: target.shown, options: options) {
                event in
                if case .progress(let p) = event { output.progress(p, name: name) }
            }
        }
        let token = interrupts.onInterrupt { work.cancel() }
        defer { interrupts.remove(token) }
        let outcome = await work.result
        output.clearLine()
        switch outcome {
        case .success(let bytes):
            let seconds = Date().timeIntervalSince(started)
            output.note(
                "wrote \(Output.bytes(bytes)) from \(shown) to \(target.shown) in \(Format.fixed(seconds, 1)) s")
            return .success
        case .failure(let failure):
            let error = HaulError.from(failure)
            if error.code == .cancelled {
                output.note("interrupted")
            } else {
                output.error(error.message)
            }
            return ExitCode(error)
        }
    }
}
