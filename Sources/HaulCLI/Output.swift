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

/// Everything `haul` prints goes through here: human lines to stderr (a live progress line on a
/// terminal), or JSON event lines to stdout with `--json`.
final class Output: Sendable {
    enum Mode: Sendable { case human, quiet, json }
    let mode: Mode
    let isTerminal: Bool
    private let state = Shared<(lineShown: Bool, lastPlain: Double, spinner: Int, last: (TransferProgress, String)?)>(
        (false, 0, 0, nil))
    /// Lines of the multi-download display on screen. Held while anything is written to the
    /// terminal, so a note and a redraw (on different threads) never interleave.
    private let block = Shared(0)
    /// Where text goes: `(text, fd)`; tests capture it.
    private let write: @Sendable (String, Int32) -> Void

    init(
        mode: Mode, isTerminal: Bool = isatty(2) == 1,
        write: @escaping @Sendable (String, Int32) -> Void = { Output.emit($0, to: $1) }
    ) {
        self.mode = mode
        self.isTerminal = isTerminal
        self.write = write
    }

    /// Writes `text` to `fd`; a failed write (a closed terminal) is ignored.
    static func emit(_ text: String, to fd: Int32) { emit(bytes: Array(text.utf8), to: fd) }

    /// Writes `data` to `fd`, all of it unless a write fails: then the rest is dropped and the
    /// failure's errno returned (EPIPE when SIGPIPE is ignored, ENOSPC). A descriptor left
    /// non-blocking by the parent that is full (EAGAIN) is waited for, as a blocking one would be.
    @discardableResult
    static func emit<Bytes: Collection<UInt8>>(bytes data: Bytes, to fd: Int32) -> Int32? {
        var bytes = Array(data)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { writeBytes(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                var ready = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&ready, 1, -1)
                continue
            }
            guard n > 0 else { return n < 0 ? errno : EIO }
            bytes = bytes.dropFirst(n)
        }
        return nil
    }

    /// Everything `fd` gives until its end (standard input's list); nil when a read fails.
    static func readAll(_ fd: Int32) -> Data? {
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return data }
            data.append(contentsOf: chunk[..<n])
        }
    }

    /// A one-line message on stderr (takes the progress line or block off first). The text is
    /// built only when it is written: `-q` and `--json` runs of many files make none.
    func note(_ text: @autoclosure () -> String) {
        guard mode == .human else { return }
        message("haul: \(Output.printable(text()))\n")
    }

    /// A one-line warning on stderr, in every mode (`-q` and `--json` too), and a `warning`
    /// event with `--json`: for what must not go unnoticed, such as a connection that is not
    /// verified.
    func warning(_ text: String) {
        json("warning", [("message", text)])
        message("haul: warning: \(Output.printable(text))\n")
    }

    func error(_ text: String) {
        if mode == .json {
            clearLine()
            return
        }
        message("haul: error: \(Output.printable(text))\n")
    }

    /// Writes a message line where the progress display was: a `-j` block is erased (the next
    /// redraw starts below the message instead of climbing into it), a progress line cleared.
    private func message(_ line: String) {
        let lineShown = state.withLock { s -> Bool in
            defer { s.lineShown = false }
            return s.lineShown
        }
        block.withLock { b in
            var text = ""
            if isTerminal && b > 0 { text += "\u{1B}[\(b)A\u{1B}[J" }
            b = 0
            if isTerminal && lineShown { text += "\r\u{1B}[2K" }
            write(text + line, 2)
        }
    }

    /// `text` with control characters (C0, DEL, C1) written as `\x1B` and bidi controls
    /// (U+202A-202E, U+2066-2069, U+200E/F, U+061C) as `\u{202E}`: a message or a progress line
    /// quotes what a list file, an argument, a URL or a server sent, and an escape sequence in it
    /// must not reach the terminal (or break the one line into several), nor a right-to-left
    /// override show `evil\u{202E}fdp.exe` as `evilexe.pdf`.
    static func printable(_ text: String) -> String {
        func isControl(_ u: Unicode.Scalar) -> Bool { u.value < 0x20 || (0x7F...0x9F).contains(u.value) }
        // No bidi control lies below U+061C: plain ASCII and Latin text skip the property look-up.
        func needsEscape(_ u: Unicode.Scalar) -> Bool {
            isControl(u) || (u.value >= 0x61C && u.properties.isBidiControl)
        }
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        for u in text.unicodeScalars {
            if isControl(u) {
                out += "\\x" + Format.hex(u.value, 2, uppercase: true)
            } else if needsEscape(u) {
                out += "\\u{" + Format.hex(u.value, 4, uppercase: true) + "}"
            } else {
                out.unicodeScalars.append(u)
            }
        }
        return out
    }

    /// One JSON event line on stdout with `--json`; the fields are built only then.
    func json(_ event: String, _ fields: @autoclosure () -> [(String, Any?)]) {
        guard mode == .json else { return }
        var parts = ["\"event\":\(Output.quote(event))"]
        for (k, v) in fields() {
            guard let v else { continue }
            let value: String
            switch v {
            case let s as String: value = Output.quote(s)
            case let b as Bool: value = b ? "true" : "false"
            case let d as Double: value = d.isFinite ? Format.fixed(d, 3) : "null"
            case let i as Int64: value = String(i)
            case let i as Int: value = String(i)
            case let i as Int32: value = String(i)
            default: value = Output.quote("\(v)")
            }
            parts.append("\(Output.quote(k)):\(value)")
        }
        write("{" + parts.joined(separator: ",") + "}\n", 1)
    }

    static func quote(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 { out += "\\u" + Format.hex(u.value, 4) } else { out.unicodeScalars.append(u) }
            }
        }
        return out + "\""
    }

    /// Renders progress: redrawn in place on a terminal, a plain line every 5 s otherwise.
    /// `name` is worked out only for a line that shows it.
    func progress(_ p: TransferProgress, name nameOfFile: @autoclosure () -> String) {
        switch mode {
        case .quiet: return
        case .json:
            json(
                "progress",
                [
                    ("bytes", p.completedBytes), ("total", p.totalBytes), ("speed", p.bytesPerSecond),
                    ("eta", p.estimatedTimeRemaining),
                ])
        case .human:
            let now = Date().timeIntervalSince1970
            if isTerminal {
                let name = Output.printable(nameOfFile())
                let frame = state.withLock { s -> Int in
                    s.lineShown = true
                    s.last = (p, name)
                    return s.spinner
                }
                let line = Output.terminalLine(p, name: name, spinner: frame, width: Output.columns())
                write("\r\u{1B}[2K" + line, 2)
            } else {
                let due = state.withLock { s -> Bool in
                    guard now - s.lastPlain >= 5 else { return false }
                    s.lastPlain = now
                    return true
                }
                if due { write(Output.progressLine(p, name: Output.printable(nameOfFile()), spinner: nil) + "\n", 2) }
            }
        }
    }

    /// The activity indicator of a single download on a terminal: called a few times a second,
    /// it turns the spinner of the progress line while transfers are on the wire (and leaves it
    /// still while the download waits: a retry's backoff, no network).
    func tick(active: Bool) {
        guard mode == .human, isTerminal, active else { return }
        let redraw = state.withLock { s -> (TransferProgress, String, Int)? in
            guard s.lineShown, let (p, name) = s.last else { return nil }
            s.spinner += 1
            return (p, name, s.spinner)
        }
        if let (p, name, frame) = redraw {
            let line = Output.terminalLine(p, name: name, spinner: frame, width: Output.columns())
            write("\r\u{1B}[2K" + line, 2)
        }
    }

    /// A progress line with the spinner in front (unknown sizes carry it already), fitted to
    /// `width` columns; with a known size, a bar after the percentage (as wget draws one) when
    /// the terminal has room for one of ``minimumBar`` columns beside the figures and at least
    /// ``nameRoom`` columns of the name.
    static func terminalLine(_ p: TransferProgress, name: String, spinner: Int, width: Int) -> String {
        let front = p.totalBytes == nil ? "" : spinnerFrames[spinner % 4] + " "
        let plain = front + progressLine(p, name: name, spinner: spinner)
        guard let fraction = p.fraction else { return fitted(plain, width: width) }
        let spare = (width - 1) - (displayWidth(plain) - displayWidth(name) + min(displayWidth(name), nameRoom))
        let barWidth = min(maximumBar, spare - 1)
        guard barWidth >= minimumBar else { return fitted(plain, width: width) }
        return fitted(
            front + progressLine(p, name: name, spinner: spinner, bar: bar(fraction, width: barWidth)), width: width)
    }

    /// The narrowest and widest bar drawn, brackets included, and the columns of the name a bar
    /// may not take.
    static let minimumBar = 12
    static let maximumBar = 42
    static let nameRoom = 24

    /// `[=====>    ]` in `width` columns: `=` for what is done, `>` at its edge.
    static func bar(_ fraction: Double, width: Int) -> String {
        let inner = max(0, width - 2)
        let fraction = fraction.isFinite ? min(1, max(0, fraction)) : 0
        let done = min(inner, max(0, Int((fraction * Double(inner)).rounded(.down))))
        let body: String
        if done == inner {
            body = String(repeating: "=", count: inner)
        } else if done == 0 {
            body = String(repeating: " ", count: inner)
        } else {
            body = String(repeating: "=", count: done - 1) + ">" + String(repeating: " ", count: inner - done)
        }
        return "[" + body + "]"
    }

    func clearLine() {
        let shown = state.withLock { s -> Bool in
            defer { s.lineShown = false }
            return s.lineShown
        }
        if shown { write("\r\u{1B}[2K", 2) }
    }

    /// Several progress lines (one per download and a total): redrawn in place on a terminal,
    /// the total as a plain line every 5 s otherwise, nothing when quiet or in JSON mode. The
    /// lines name downloads (``printable(_:)`` is applied here).
    func progressBlock(_ lines: [String]) {
        guard mode == .human, !lines.isEmpty else { return }
        let lines = lines.map(Output.printable)
        if isTerminal {
            let (width, height) = Output.terminalSize()
            let lines = Output.fittedBlock(lines, rows: height)
            block.withLock { previous in
                var text = previous > 0 ? "\u{1B}[\(previous)A" : ""
                for line in lines { text += "\r\u{1B}[2K" + Output.fitted(line, width: width) + "\n" }
                text += "\u{1B}[J"
                previous = lines.count
                write(text, 2)
            }
        } else {
            let now = Date().timeIntervalSince1970
            let due = state.withLock { s -> Bool in
                guard now - s.lastPlain >= 5 else { return false }
                s.lastPlain = now
                return true
            }
            if due { write(lines.last! + "\n", 2) }
        }
    }

    /// Removes the multi-download display.
    func clearBlock() {
        block.withLock { b in
            if isTerminal && b > 0 { write("\u{1B}[\(b)A\u{1B}[J", 2) }
            b = 0
        }
    }

    static let spinnerFrames = ["|", "/", "-", "\\"]

    /// The terminal's width in columns (stderr's window size, else `$COLUMNS`, else 80).
    static func columns() -> Int { terminalSize().columns }

    /// The terminal's columns and rows (stderr's window size, else `$COLUMNS` and `$LINES`,
    /// else 80 × 24).
    static func terminalSize() -> (columns: Int, rows: Int) {
        var size = winsize()
        if ioctl(2, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 {
            return (Int(size.ws_col), Int(size.ws_row))
        }
        let environment = ProcessInfo.processInfo.environment
        func number(_ name: String, _ otherwise: Int) -> Int {
            environment[name].flatMap { Int($0) }.flatMap { $0 > 0 ? $0 : nil } ?? otherwise
        }
        return (number("COLUMNS", 80), number("LINES", 24))
    }

    /// A `-j` block (a line per download, the total last) that fits in `rows` less one: the
    /// cursor cannot go up past the top of the screen, so a taller block would scroll and be
    /// drawn again lower each time. The downloads that do not fit are counted on one line.
    static func fittedBlock(_ lines: [String], rows: Int) -> [String] {
        let room = max(2, rows - 1)
        guard lines.count > room else { return lines }
        let shown = room - 2
        return Array(lines.prefix(shown)) + ["… and \(lines.count - 1 - shown) more", lines.last!]
    }

    /// Where the text after the last two spaces in a row starts.
    private static func lastDoubleSpace(in line: String) -> String.Index? {
        var index = line.endIndex
        var spaces = 0
        while index > line.startIndex {
            let before = line.index(before: index)
            if line[before] == " " {
                spaces += 1
                if spaces == 2 { return line.index(before, offsetBy: 2) }
            } else {
                spaces = 0
            }
            index = before
        }
        return nil
    }

    /// A progress line that fits in `width` columns less one (a line that wraps is not redrawn in
    /// place: each update would leave a line behind, and `-j`'s block would climb the screen).
    /// The name, after the last double space, loses its middle first (`long…name.iso`); a
    /// terminal too narrow for the figures gets them cut.
    static func fitted(_ line: String, width: Int) -> String {
        let room = max(1, width - 1)
        guard displayWidth(line) > room else { return line }
        if let gap = lastDoubleSpace(in: line) {
            let head = String(line[..<gap])
            let name = line[gap...]
            let left = room - displayWidth(head)
            if left >= 5 {
                // Keep the name's start and end (its extension), one column for the ellipsis.
                var front = ""
                var back = ""
                var frontWidth = 0
                var backWidth = 0
                let budget = left - 1
                var chars = Array(name)
                while !chars.isEmpty {
                    let takeBack = backWidth < frontWidth
                    let c = takeBack ? chars.removeLast() : chars.removeFirst()
                    let w = displayWidth(c)
                    if frontWidth + backWidth + w > budget { break }
                    if takeBack {
                        back = String(c) + back
                        backWidth += w
                    } else {
                        front.append(c)
                        frontWidth += w
                    }
                }
                return head + front + "…" + back
            }
        }
        var cut = ""
        var used = 0
        for c in line {
            let w = displayWidth(c)
            if used + w > room { break }
            cut.append(c)
            used += w
        }
        return cut
    }

    /// Columns a string takes: two for East Asian wide characters and most emoji, else one per
    /// character (names hold no control characters).
    static func displayWidth(_ s: some StringProtocol) -> Int { s.reduce(0) { $0 + displayWidth($1) } }

    static func displayWidth(_ c: Character) -> Int {
        guard let v = c.unicodeScalars.first?.value, v >= 0x1100 else { return 1 }
        let wide: [ClosedRange<UInt32>] = [
            0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F,
            0x1F900...0x1F9FF, 0x20000...0x3FFFD,
        ]
        return wide.contains { $0.contains(v) } ? 2 : 1
    }

    /// `spinner`: the frame shown in front of a line of unknown size (nil: none, for plain lines).
    /// `bar`: drawn after the percentage (``bar(_:width:)``).
    static func progressLine(_ p: TransferProgress, name: String, spinner: Int?, bar: String? = nil) -> String {
        let speed = "\(bytes(Int64(p.smoothedBytesPerSecond)))/s"
        if let total = p.totalBytes, let fraction = p.fraction {
            let percent = Format.rightAligned(String(Int(fraction * 100)), 3) + "%" + (bar.map { " " + $0 } ?? "")
            let eta = p.estimatedTimeRemaining.map { "ETA " + duration($0) } ?? "ETA --:--"
            return "\(percent) \(bytes(p.completedBytes))/\(bytes(total))  \(speed)  \(eta)  \(name)"
        }
        let front = spinner.map { spinnerFrames[$0 % 4] + " " } ?? ""
        return "\(front)\(bytes(p.completedBytes))  \(speed)  \(name)"
    }

    static func bytes(_ n: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = Double(n)
        var u = 0
        while v >= 1024 && u < units.count - 1 {
            v /= 1024
            u += 1
        }
        return u == 0 ? "\(n) B" : Format.fixed(v, 1) + " " + units[u]
    }

    static func duration(_ s: Double) -> String {
        guard s.isFinite, s < 360_000 else { return "--:--" }
        let t = Int(s.rounded())
        return t >= 3600
            ? "\(t / 3600):\(Format.zeroPadded(t / 60 % 60, 2)):\(Format.zeroPadded(t % 60, 2))"
            : "\(t / 60):\(Format.zeroPadded(t % 60, 2))"
    }
}

/// write(2), under a name that `Output.write` does not shadow.
private func writeBytes(_ fd: Int32, _ bytes: UnsafeRawPointer?, _ count: Int) -> Int {
    #if canImport(Glibc)
        Glibc.write(fd, bytes, count)
    #else
        Darwin.write(fd, bytes, count)
    #endif
}
