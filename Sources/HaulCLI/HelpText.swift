/// A command's `--help` text read back as parts: the one source of the man page and of the
/// completions' descriptions (`haul help --man`, `haul completions SHELL`), so that neither can
/// say what `--help` does not.
///
/// The help texts are written in one layout: blocks separated by blank lines; a block that starts
/// with `usage:` is the synopsis; an option line is indented 2 or 6 spaces and starts with `-`,
/// its names and value, then (after two spaces or more) the first line of its description,
/// whose next lines are indented 10 spaces or more; a block of lines that all start with two
/// spaces is a table, kept as laid out; any other block is prose.
struct HelpText {
    /// One option line and its description.
    struct Entry: Equatable {
        /// Names and values as written (`-o, --output FILE`).
        var spec: String
        /// The option names in it (`-o`, `--output`).
        var names: [String]
        /// The value after the last name (`FILE`), nil for a flag.
        var value: String?
        /// The description, its lines joined.
        var text: String
    }

    enum Block: Equatable {
        case usage([String])
        case prose(String)
        case table([String])
        case options([Entry])
    }

    let blocks: [Block]

    init(_ help: String) {
        var blocks: [Block] = []
        var lines: [Substring] = []
        func flush() {
            if !lines.isEmpty { blocks += Self.blocks(lines) }
            lines = []
        }
        for line in help.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.allSatisfy({ $0 == " " }) { flush() } else { lines.append(line) }
        }
        flush()
        self.blocks = blocks
    }

    /// Every option entry, in order.
    var entries: [Entry] {
        blocks.flatMap { block -> [Entry] in if case .options(let e) = block { e } else { [] } }
    }
    /// The usage lines, without `usage: `.
    var usage: [String] {
        blocks.flatMap { block -> [String] in if case .usage(let u) = block { u } else { [] } }
    }

    private static func indent(_ line: Substring) -> Int { line.prefix { $0 == " " }.count }

    private static func isOptionLine(_ line: Substring) -> Bool {
        indent(line) <= 6 && line.drop { $0 == " " }.hasPrefix("-")
    }

    /// One block's lines as parts: runs of unindented lines are prose, runs of indented ones a
    /// table (`commands:` and the commands under it).
    private static func blocks(_ lines: [Substring]) -> [Block] {
        if lines[0].hasPrefix("usage: ") {
            return [.usage(lines.map { String($0.dropFirst($0.hasPrefix("usage: ") ? 7 : 0).drop { $0 == " " }) })]
        }
        if isOptionLine(lines[0]) { return [.options(entries(lines))] }
        var out: [Block] = []
        var run: [Substring] = []
        func close() {
            guard let first = run.first else { return }
            out.append(
                indent(first) >= 2
                    ? .table(run.map { String($0.dropFirst(2)) }) : .prose(run.joined(separator: " ")))
            run = []
        }
        for line in lines {
            if let last = run.last, (indent(last) >= 2) != (indent(line) >= 2) { close() }
            run.append(line)
        }
        close()
        return out
    }

    private static func entries(_ lines: [Substring]) -> [Entry] {
        var out: [Entry] = []
        for line in lines {
            let body = line.drop { $0 == " " }
            if isOptionLine(line) {
                let (spec, text) = split(line)
                out.append(entry(spec, text))
            } else if !out.isEmpty {
                let more = String(body)
                out[out.count - 1].text += out[out.count - 1].text.isEmpty ? more : " " + more
            }
        }
        return out
    }

    /// Where descriptions start when the spec leaves room (`  -o, --output FILE       save`).
    static let column = 26

    /// An option line's spec and the first line of its description: split at the first run of
    /// two spaces after the spec, or at ``column`` when the spec fills it up to one space
    /// (`      --connect-timeout S connection timeout`).
    private static func split(_ line: Substring) -> (String, String) {
        let chars = Array(line)
        let start = chars.firstIndex { $0 != " " } ?? 0
        var gap: Int?
        for i in start..<max(start, chars.count - 1) where chars[i] == " " && chars[i + 1] == " " {
            gap = i
            break
        }
        if gap.map({ $0 >= column }) ?? true, chars.count > column, chars[column - 1] == " ",
            chars[column] != " "
        {
            gap = column - 1
        }
        guard let gap else { return (String(chars[start...]), "") }
        let text = chars[gap...].drop { $0 == " " }
        return (String(chars[start..<gap]), String(text))
    }

    private static func entry(_ spec: String, _ text: String) -> Entry {
        var names: [String] = []
        var value: String?
        for part in spec.split(separator: ", ") {
            let words = part.split(separator: " ", maxSplits: 1)
            guard let name = words.first, name.hasPrefix("-") else { continue }
            names.append(String(name))
            value = words.count > 1 ? String(words[1]) : nil
        }
        return Entry(spec: spec, names: names, value: value, text: text)
    }
}
