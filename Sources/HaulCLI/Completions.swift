import HaulCore

/// `haul completions bash|zsh|fish`: a completion script made from ``Commands`` (the option
/// tables the parser uses) and the `--help` texts (values and descriptions).
enum Completions {
    static let shells = ["bash", "zsh", "fish"]

    static func script(for shell: String) -> String? {
        switch shell {
        case "bash": bash()
        case "zsh": zsh()
        case "fish": fish()
        default: nil
        }
    }

    /// Each command's options with what their values are (nil: a flag).
    private static func options(
        of command: Commands.Command
    ) -> [(names: [String], value: Commands.Value?, text: String)] {
        let entries = HelpText(command.help).entries
        return command.options.map { option in
            let entry = entries.first { !Set($0.names).isDisjoint(with: option.names) }
            let value: Commands.Value? =
                option.takesValue ? entry.flatMap(Commands.value(of:)) ?? .free : nil
            return (option.names, value, entry.map { firstSentence($0.text) } ?? "")
        }
    }

    /// The description up to its first `;`, `(` or `:` (and without a last `.`), for the short
    /// lines shells show.
    private static func firstSentence(_ text: String) -> String {
        let cut = text.prefix { $0 != ";" && $0 != "(" && $0 != ":" }
        return (cut.hasSuffix(".") ? cut.dropLast() : cut).trimmingASCIIWhitespace()
    }

    private static var commandNames: [String] { Commands.all.map(\.name) + Commands.others }

    private static func bash() -> String {
        var cases: [String] = []
        for command in Commands.all {
            let opts = options(of: command)
            var values: [String] = []
            for (names, value, _) in opts {
                let pattern = names.joined(separator: "|")
                switch value {
                case .file?: values.append("            \(pattern)) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;")
                case .directory?:
                    values.append("            \(pattern)) COMPREPLY=($(compgen -d -- \"$cur\")); return ;;")
                case .oneOf(let set)?:
                    values.append(
                        "            \(pattern)) COMPREPLY=($(compgen -W \"\(set.joined(separator: " "))\" -- \"$cur\")); return ;;"
                    )
                case .free?: values.append("            \(pattern)) return ;;")
                case nil: break
                }
            }
            let words = opts.flatMap(\.names).joined(separator: " ")
            cases.append(
                """
                    \(command.name))
                        case "$prev" in
                \(values.joined(separator: "\n"))
                        esac
                        opts="\(words)" ;;
                """)
        }
        return """
            # bash completion for haul (haul completions bash)
            _haul() {
                local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" opts=""
                COMPREPLY=()
                if [ "$COMP_CWORD" -eq 1 ]; then
                    COMPREPLY=($(compgen -W "\(commandNames.joined(separator: " "))" -- "$cur"))
                    return
                fi
                case "${COMP_WORDS[1]}" in
            \(cases.joined(separator: "\n"))
                help) COMPREPLY=($(compgen -W "\(Commands.all.map(\.name).joined(separator: " ")) --man" -- "$cur")); return ;;
                completions) COMPREPLY=($(compgen -W "\(shells.joined(separator: " "))" -- "$cur")); return ;;
                esac
                if [[ "$cur" == -* ]]; then
                    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
                else
                    COMPREPLY=($(compgen -f -- "$cur"))
                fi
            }
            complete -F _haul haul

            """
    }

    private static func zsh() -> String {
        var cases: [String] = []
        for command in Commands.all {
            let opts = options(of: command)
            var specs: [String] = []
            for (names, value, text) in opts {
                let action: String =
                    switch value {
                    case .file?: ":value:_files"
                    case .directory?: ":directory:_files -/"
                    case .oneOf(let set)?: ":value:(\(set.joined(separator: " ")))"
                    case .free?: ":value: "
                    case nil: ""
                    }
                let help = zshQuoted(text)
                for name in names {
                    specs.append("'\(name)[\(help)]\(action)'")
                }
            }
            cases.append(
                "        \(command.name)) _arguments -S \\\n            "
                    + specs.joined(separator: " \\\n            ") + " \\\n            '*:URL or file:_files' ;;")
        }
        return """
            #compdef haul
            # zsh completion for haul (haul completions zsh)
            _haul() {
                if (( CURRENT == 2 )); then
                    compadd -- \(commandNames.joined(separator: " "))
                    return
                fi
                local command=$words[2]
                shift words
                (( CURRENT-- ))
                case $command in
            \(cases.joined(separator: "\n"))
                    help) compadd -- \(Commands.all.map(\.name).joined(separator: " ")) --man ;;
                    completions) compadd -- \(shells.joined(separator: " ")) ;;
                esac
            }
            if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
                _haul "$@"
            else
                compdef _haul haul
            fi

            """
    }

    /// `text` inside a zsh `_arguments` description in single quotes.
    private static func zshQuoted(_ text: String) -> String {
        text.replacing("'", with: "'\\''").replacing("[", with: "\\[").replacing("]", with: "\\]")
            .replacing(":", with: "\\:")
    }

    private static func fish() -> String {
        var lines = [
            "# fish completion for haul (haul completions fish)",
            "complete -c haul -f",
            "complete -c haul -n __fish_use_subcommand -a '\(commandNames.joined(separator: " "))'",
            "complete -c haul -n '__fish_seen_subcommand_from help' -a '\(Commands.all.map(\.name).joined(separator: " ")) --man'",
            "complete -c haul -n '__fish_seen_subcommand_from completions' -a '\(shells.joined(separator: " "))'",
        ]
        for command in Commands.all {
            let condition = "-n '__fish_seen_subcommand_from \(command.name)'"
            for (names, value, text) in options(of: command) {
                var flags = names.map { $0.hasPrefix("--") ? "-l \($0.dropFirst(2))" : "-s \($0.dropFirst())" }
                switch value {
                case .file?: flags.append("-r -F")
                case .directory?: flags.append("-r -a '(__fish_complete_directories)'")
                case .oneOf(let set)?: flags.append("-x -a '\(set.joined(separator: " "))'")
                case .free?: flags.append("-x")
                case nil: break
                }
                let description = text.replacing("\\", with: "\\\\").replacing("'", with: "\\'")
                lines.append("complete -c haul \(condition) \(flags.joined(separator: " ")) -d '\(description)'")
            }
            // URLs and files as arguments.
            lines.append("complete -c haul \(condition) -F")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
