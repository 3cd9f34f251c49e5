/// `haul help --man`: haul(1) in roff, made from the `--help` texts (``HelpText``), with the
/// sections a man page has beyond them (exit status, files, environment, examples).
enum ManPage {
    static func render(version: String) -> String {
        var out = [
            ".TH HAUL 1 \"\" \"haul \(version)\" \"User Commands\"", ".SH NAME", "haul \\- resumable downloads",
            ".SH SYNOPSIS", ".nf",
        ]
        for command in Commands.all {
            for line in HelpText(command.help).usage { out.append(escaped(line)) }
        }
        out += ["haul help [command | \\-\\-man]", "haul completions bash|zsh|fish", "haul version", ".fi"]
        out.append(".SH DESCRIPTION")
        // The overview's blocks but its title line and its usage line.
        out += HelpText(HaulCLI.help).blocks.dropFirst().filter { block in
            if case .usage = block { false } else { true }
        }.flatMap(render)
        out.append(".SH COMMANDS")
        for command in Commands.all {
            out.append(".SS haul \(command.name)")
            out += HelpText(command.help).blocks.flatMap(render)
        }
        out += sections.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        return out.joined(separator: "\n") + "\n"
    }

    private static func render(_ block: HelpText.Block) -> [String] {
        switch block {
        case .usage(let lines): return [".PP", ".nf"] + lines.map { escaped("usage: " + $0) } + [".fi"]
        case .prose(let text): return [".PP", escaped(text)]
        case .table(let lines): return [".PP", ".nf"] + lines.map(escaped) + [".fi"]
        case .options(let entries):
            return entries.flatMap { e in [".TP", spec(e.spec)] + (e.text.isEmpty ? [] : [escaped(e.text)]) }
        }
    }

    /// `-o, --output FILE`: names bold, values italic.
    private static func spec(_ spec: String) -> String {
        spec.split(separator: " ").map { word in
            let w = escaped(String(word))
            return word.hasPrefix("-") ? "\\fB\(w)\\fR" : "\\fI\(w)\\fR"
        }.joined(separator: " ")
    }

    /// `text` as roff text: backslashes and hyphens escaped, a leading `.` or `'` (a request)
    /// made text.
    static func escaped(_ text: String) -> String {
        let t = text.replacing("\\", with: "\\e").replacing("-", with: "\\-")
        return t.hasPrefix(".") || t.hasPrefix("'") ? "\\&" + t : t
    }

    private static let sections = #"""
        .SH EXIT STATUS
        .TP
        .B 0
        success (for doctor: the URL answered 2xx)
        .TP
        .B 1
        internal error
        .TP
        .B 2
        usage: a bad flag, value or URL
        .TP
        .B 3
        network: no answer, a timeout, too many redirects, no network path
        .TP
        .B 4
        the server answered an HTTP error status
        .TP
        .B 5
        file system: a file exists, cannot be written, or the disk is full
        .TP
        .B 6
        integrity: a checksum mismatch, or the file changed on the server
        .TP
        .B 7
        TLS: the certificate or a pinned key did not verify
        .TP
        .B 130
        interrupted (Ctrl\-C, SIGTERM, SIGHUP); the partial file is kept, rerun to resume
        .SH FILES
        .TP
        .I FILE.part
        the bytes of a download that has not finished
        .TP
        .I FILE.haul
        its resume record (URL without credentials, validators, ranges done); removed with the
        partial when the file is complete
        .TP
        .I $XDG_STATE_HOME/haul/validators
        the ETag and Last\-Modified of files saved with \-N (default ~/.local/state)
        .TP
        .I $XDG_CACHE_HOME/haul/http
        the library's HTTP cache (default ~/.cache)
        .SH ENVIRONMENT
        .TP
        .B http_proxy, https_proxy, all_proxy, no_proxy
        proxies, read as curl reads them (upper case too, but HTTP_PROXY); \-\-proxy and
        \-\-noproxy take precedence
        .TP
        .B XDG_STATE_HOME, XDG_CACHE_HOME, HOME
        where the validators, the HTTP cache and haul serve's state are kept
        .TP
        .B XDG_DOWNLOAD_DIR
        haul serve's download root without \-d (default ~/Downloads)
        .TP
        .B HAUL_SERVE_PORT
        haul serve's port without \-\-port (default 6800), also for the one get \-\-background starts
        .SH EXAMPLES
        .TP
        haul get https://example.com/big.iso
        download into the current directory; rerun the same command to resume
        .TP
        haul get \-x 8 \-o big.iso https://example.com/big.iso
        eight connections, one byte range each
        .TP
        haul get \-i urls.txt \-j 4 \-d downloads
        a list, four files at a time
        .TP
        haul get \-N https://example.com/data.csv
        download again only when the server has a newer version
        .TP
        haul doctor https://example.com/big.iso
        why a download of it is slow or does not resume
        .SH SEE ALSO
        curl(1), wget(1), aria2c(1)
        """#
}
