import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCLI

/// The man page and the completions come from the `--help` texts and the option tables: these
/// tests hold the three together, and load the scripts in the shells that are installed.
@Suite("haul help --man and haul completions", .fewAtOnce)
struct DocsTests {
    @Test(arguments: Commands.all.map(\.name))
    func everyOptionIsInItsHelpAndNothingElse(command name: String) throws {
        let command = try #require(Commands.named(name))
        let table = Set(command.options.flatMap(\.names))
        let help = Set(HelpText(command.help).entries.flatMap(\.names))
        #expect(table.subtracting(help).isEmpty, "parsed but not in --help: \(table.subtracting(help).sorted())")
        #expect(help.subtracting(table).isEmpty, "in --help but not parsed: \(help.subtracting(table).sorted())")
    }

    @Test func optionLinesAreReadBackAsWritten() {
        let help = HelpText(
            """
            usage: haul x URL

            Prose that goes on
            over two lines.

              -o, --output FILE       save to FILE; a long description
                                      that goes on
                  --connect-timeout S connection timeout
                  --pin sha256//A[;sha256//B]   the key must match
            """)
        #expect(help.usage == ["haul x URL"])
        #expect(help.blocks[1] == .prose("Prose that goes on over two lines."))
        #expect(
            help.entries == [
                .init(
                    spec: "-o, --output FILE", names: ["-o", "--output"], value: "FILE",
                    text: "save to FILE; a long description that goes on"),
                .init(
                    spec: "--connect-timeout S", names: ["--connect-timeout"], value: "S", text: "connection timeout"),
                .init(
                    spec: "--pin sha256//A[;sha256//B]", names: ["--pin"], value: "sha256//A[;sha256//B]",
                    text: "the key must match"),
            ])
    }

    @Test func theManPageHasEveryFlagOfHaulHelpGetAndRendersWithoutWarnings() async throws {
        let r = try await CLI.run(["help", "--man"])
        #expect(r.status == 0)
        let page = r.stdout
        #expect(page.hasPrefix(".TH HAUL 1 "))
        for section in [
            "NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "FILES", "ENVIRONMENT", "EXAMPLES",
        ] {
            #expect(page.contains("\n.SH \(section)\n"), "\(section)")
        }
        let help = try await CLI.run(["help", "get"])
        for entry in HelpText(help.stdout).entries {
            for name in entry.names {
                #expect(page.contains("\\fB" + ManPage.escaped(name)), "\(name) not in the man page")
            }
        }
        for command in Commands.all { #expect(page.contains("\n.SS haul \(command.name)\n"), "\(command.name)") }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/groff") else { return }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Data(page.utf8).write(to: URL(fileURLWithPath: dir.file("haul.1")))
        let groff = try ChildProcess(
            "/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", dir.file("haul.1")], mergingStderr: true)
        #expect(await groff.finish(timeout: 30) == 0)
        #expect(groff.stdout.isEmpty, "\(String(decoding: groff.stdout, as: UTF8.self))")
    }

    @Test func anUnknownShellIsAUsageError() async throws {
        let r = try await CLI.run(["completions", "tcsh"])
        #expect(r.status == 2)
        #expect(r.stderr == "haul: error: completions takes one of bash, zsh, fish\n")
    }

    /// Runs `script` in `shell` with the completion script for it in `file`; its standard output.
    static func run(
        _ shell: String, _ arguments: [String], script: String, into dir: TemporaryDirectory
    )
        async throws -> String
    {
        let r = try await CLI.run(["completions", URL(fileURLWithPath: shell).lastPathComponent])
        #expect(r.status == 0)
        try Data(r.stdout.utf8).write(to: URL(fileURLWithPath: dir.file("completion")))
        try Data(script.utf8).write(to: URL(fileURLWithPath: dir.file("test")))
        let p = try ChildProcess(shell, arguments + [dir.file("test")], mergingStderr: true)
        #expect(await p.finish(timeout: 60) == 0)
        return String(decoding: p.stdout, as: UTF8.self)
    }

    @Test func bashCompletesCommandsFlagsAndTheirValues() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let out = try await Self.run(
            "/bin/bash", ["--norc"],
            script: """
                source \(dir.file("completion"))
                complete -p haul
                ask() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _haul; echo "${COMPREPLY[*]}"; }
                ask haul get --con
                ask haul d
                ask haul get --transport ""
                ask haul get --checksum s
                ask haul doctor --max-c
                ask haul completions ""
                """, into: dir)
        #expect(
            out.split(separator: "\n").map(String.init) == [
                "complete -F _haul haul", "--continue --connect-timeout --connections", "doctor demo", "curl",
                "sha-256= sha-512= sha-1=", "--max-connections", "bash zsh fish",
            ], "\(out)")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/fish"), "needs fish"))
    func fishCompletesFlagsWithTheirHelp() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let out = try await Self.run(
            "/usr/bin/fish", ["--no-config"],
            script: """
                source \(dir.file("completion"))
                complete -C 'haul get --con'
                complete -C 'haul get --transport '
                """, into: dir)
        let lines = out.split(separator: "\n").map(String.init)
        #expect(lines.contains("--connections\tconnections per file, 1-16"), "\(out)")
        #expect(lines.contains { $0.hasPrefix("--connect-timeout\t") }, "\(out)")
        #expect(lines.contains { $0.hasPrefix("curl\t") }, "\(out)")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh"), "needs zsh"))
    func zshCompletesFlagsInAnInteractiveShell() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // An interactive zsh on a pseudo-terminal (zpty), sent `haul get --con` and a Tab.
        let out = try await Self.run(
            "/usr/bin/zsh", ["-f"],
            script: """
                zmodload zsh/zpty
                zpty z 'zsh -f -i'
                zpty -w z 'PS1="> "; autoload -U compinit; compinit -u -D; source \(dir.file("completion"))'
                sleep 1
                zpty -w -n z $'haul get --con\\t'
                all="" chunk=""
                for i in {1..100}; do
                    sleep 0.1
                    while zpty -r -t z chunk; do all+=$chunk; done
                    [[ $all == *--connections*--connect-timeout* || $all == *--connect-timeout*--connections* ]] && break
                done
                zpty -d z
                print -r -- "$all" | tr -d '\\r' | sed 's/\\x1b\\[[0-9;?]*[a-zA-Z]//g' | grep -- '^--conne'
                """, into: dir)
        #expect(out.contains("--connections      -- connections per file, 1-16"), "\(out)")
        #expect(out.contains("--connect-timeout  -- connection timeout in seconds"), "\(out)")
    }
}
