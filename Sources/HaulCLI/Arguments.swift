import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A small option parser in the style of curl, wget and aria2 (getopt's rules): `-o FILE`,
/// `-oFILE`, `--output FILE`, `--output=FILE`, repeated `-H`, flags, and short options run
/// together (`-qx16` is `-q -x 16`).
enum Arguments {
    /// Parses against a table of option names; returns values by canonical name.
    static func parse(
        _ args: [String], options: [Option]
    ) throws(UsageError) -> (values: [String: [String]], positionals: [String]) {
        var values: [String: [String]] = [:]
        var positionals: [String] = []
        var i = 0
        var onlyPositionals = false
        while i < args.count {
            let arg = args[i]
            i += 1
            if onlyPositionals || !arg.hasPrefix("-") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" {
                onlyPositionals = true
                continue
            }
            if !arg.hasPrefix("--") && arg.count > 2 {
                try parseShortCluster(arg, options: options, values: &values, args: args, next: &i)
                continue
            }
            var name = arg
            var inline: String?
            if arg.hasPrefix("--"), let eq = arg.firstIndex(of: "=") {
                name = String(arg[..<eq])
                inline = String(arg[arg.index(after: eq)...])
            }
            guard let option = options.first(where: { $0.names.contains(name) }) else {
                throw UsageError("unknown option \(name) (see haul help)")
            }
            if option.takesValue {
                if let inline {
                    values[option.key, default: []].append(inline)
                } else {
                    guard i < args.count else { throw UsageError("\(name) needs a value") }
                    values[option.key, default: []].append(args[i])
                    i += 1
                }
            } else {
                if inline != nil { throw UsageError("\(name) takes no value") }
                values[option.key, default: []].append("")
            }
        }
        return (values, positionals)
    }

    /// `-qx16`, `-x16`, `-qo FILE`: flags one letter each, until an option that takes a value,
    /// which takes the rest of the word or, when nothing is left, the next argument.
    private static func parseShortCluster(
        _ arg: String, options: [Option], values: inout [String: [String]], args: [String], next i: inout Int
    ) throws(UsageError) {
        var rest = arg.dropFirst()
        while let letter = rest.first {
            rest = rest.dropFirst()
            let name = "-\(letter)"
            guard let option = options.first(where: { $0.names.contains(name) }) else {
                throw UsageError("unknown option \(name) in \(arg) (see haul help)")
            }
            guard option.takesValue else {
                values[option.key, default: []].append("")
                continue
            }
            if !rest.isEmpty {
                values[option.key, default: []].append(String(rest))
            } else {
                guard i < args.count else { throw UsageError("\(name) needs a value") }
                values[option.key, default: []].append(args[i])
                i += 1
            }
            return
        }
    }

    struct Option {
        var names: [String]
        var takesValue: Bool
        var key: String { names.last! }
        init(_ names: String..., value: Bool = false) {
            self.names = names
            self.takesValue = value
        }
    }
}

extension Dictionary where Key == String, Value == [String] {
    func flag(_ key: String) -> Bool { self[key] != nil }
    func last(_ key: String) -> String? { self[key]?.last }

    func number(_ key: String, min: Double = 0) throws(UsageError) -> Double? {
        guard let raw = last(key) else { return nil }
        guard let v = Double(raw), v.isFinite, v >= min else {
            throw UsageError(
                "\(key) expects a number ≥ \(min == min.rounded() ? String(Int(min)) : String(min)), got '\(raw)'")
        }
        return v
    }

    func integer(_ key: String, min: Int = 0) throws(UsageError) -> Int? {
        guard let raw = last(key) else { return nil }
        guard let v = Int(raw), v >= min else {
            throw UsageError("\(key) expects a whole number ≥ \(min), got '\(raw)'")
        }
        return v
    }
}

/// A `-H 'Name: value'` argument, for `get` and `upload` alike: the name an RFC 9110 token, the
/// value without line breaks or NUL (which would smuggle another header or request). Spaces,
/// tabs and line breaks around the name and the value are dropped (a header read from a file
/// with CRLF line ends is taken).
func parseHeader(_ raw: String) throws(UsageError) -> (name: String, value: String) {
    guard let colon = raw.firstIndex(of: ":") else { throw UsageError("header '\(raw)' is not 'Name: value'") }
    let name = raw[..<colon].trimmingASCIIWhitespace()
    let value = raw[raw.index(after: colon)...].trimmingASCIIWhitespace()
    do throws(HaulError) { try HaulRequest.checkHeader(name: name, value: value) } catch {
        throw UsageError(error.message)
    }
    return (name, value)
}

/// A command-line URL: http:// or https:// with a host. A URL typed without a scheme
/// (`example.com/file.iso`) is refused with the https:// spelling to use, rather than guessed as
/// plain http the way curl and wget guess it.
func parseURL(_ raw: String) throws(UsageError) -> URL {
    if let url = URL(string: raw), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
        url.host?.isEmpty == false
    {
        return url
    }
    var hint = ""
    if !raw.contains("://"), let first = raw.split(separator: "/").first, first.contains("."),
        URL(string: "https://" + raw)?.host?.isEmpty == false
    {
        hint = "; did you mean https://\(raw)?"
    }
    throw UsageError("invalid URL '\(raw)' (only http:// and https:// URLs\(hint))")
}
