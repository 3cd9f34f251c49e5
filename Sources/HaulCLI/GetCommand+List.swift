import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Sizes, checksums and aria2-style input lists, as `haul get` reads them.
extension GetCommand {
    /// `1500`, `64K`, `2M`, `1G` (binary multiples, like curl and aria2); nil for anything else,
    /// a count of 2^63 bytes or more included (`1e300G` would trap converting to Int64).
    static func byteCount(_ raw: String) -> Int64? {
        let multipliers: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        let upper = raw.uppercased()
        if let last = upper.last, let m = multipliers[last] {
            guard let n = Double(upper.dropLast()), n > 0, n * Double(m) < 0x1p63 else { return nil }
            return Int64(n * Double(m))
        }
        return Int64(upper)
    }

    /// `ALGORITHM=HEX[,ALGORITHM=HEX...]` as checksums (`sha-256`, `sha-512`, `sha-1`, `md5`,
    /// also written `sha256`; hex in any case).
    static func checksums(_ raw: String) throws(UsageError) -> [Checksum] {
        var out: [Checksum] = []
        for part in raw.split(separator: ",", omittingEmptySubsequences: false) {
            do throws(HaulError) { out.append(try Checksum(String(part))) } catch { throw UsageError(error.message) }
        }
        return try merged(out)
    }

    /// `checksums` once each; two different digests of one algorithm are a usage error.
    static func merged(_ checksums: [Checksum]) throws(UsageError) -> [Checksum] {
        do throws(HaulError) { return try [Checksum].merging(checksums) } catch { throw UsageError(error.message) }
    }

    /// Options an input list gives one URL.
    struct ListOptions: Hashable {
        var out: String?
        var dir: String?
        var checksums: [Checksum] = []
    }

    /// What makes two listed downloads the same one.
    struct ListKey: Hashable {
        var url: String
        var options: ListOptions
    }

    /// One URL of the command line or of an input list.
    struct ListEntry {
        var raw: String
        var options = ListOptions()
    }

    /// The lines of `text`, split where `Character.isNewline` splits it (LF, CR, CR LF, VT, FF,
    /// NEL, LS, PS; not only "\n", or a list saved on Windows would be one long line), by
    /// scalars: a newline is always a Character of its own (CR LF one), so the lines are the
    /// same, without breaking the whole list into Characters (about 15 000 instructions a line).
    static func lines(_ text: String) -> [Substring] {
        var lines: [Substring] = []
        let scalars = text.unicodeScalars
        var start = scalars.startIndex
        var i = start
        while i < scalars.endIndex {
            let value = scalars[i].value
            switch value {
            case 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x2028, 0x2029: break
            default:
                i = scalars.index(after: i)
                continue
            }
            lines.append(text[start..<i])
            i = scalars.index(after: i)
            if value == 0x0D, i < scalars.endIndex, scalars[i].value == 0x0A { i = scalars.index(after: i) }
            start = i
        }
        lines.append(text[start...])
        return lines
    }

    /// `haul get`'s arguments parsed (or refused) now, when they name a list (`-i`) that is a
    /// regular file of at most 64 MiB: nil for another command, `--background`, help, or a list
    /// that a read could wait on (standard input, a pipe: told on the descriptor read, opened
    /// without waiting), which the command's task reads instead.
    static func parsedEarly(_ args: [String]) -> Result<GetCommand, UsageError>? {
        guard args.first == "get" else { return nil }
        let rest = Array(args.dropFirst())
        if rest.contains("--background") || rest.contains("--help") || rest.contains("-h") { return nil }
        guard let (v, _) = try? Arguments.parse(rest, options: options), let list = v.last("--input-file"),
            list != "-", let bytes = (try? Sys.readSmallFile(list, limit: 64 << 20)) ?? nil
        else { return nil }
        return Result { () throws(UsageError) in try GetCommand(rest, list: (list, bytes)) }
    }

    /// Reads an aria2-style list: a URL per line, options for it on the following indented
    /// lines (` out=NAME`, ` dir=DIR`, ` checksum=sha-256=HEX`); `#` starts a comment.
    static func readList(_ path: String, read: [UInt8]? = nil) throws(UsageError) -> [ListEntry] {
        // `-i -` reads standard input, as wget and aria2 do.
        let contents =
            read.map { Data($0) } ?? (path == "-" ? Output.readAll(0) : FileManager.default.contents(atPath: path))
        guard var data = contents else { throw UsageError("cannot read -i \(path)") }
        // A byte order mark (Notepad's UTF-8) is no part of the first URL.
        if data.starts(with: [0xEF, 0xBB, 0xBF]) { data.removeFirst(3) }
        var entries: [ListEntry] = []
        for (number, line) in Self.lines(String(decoding: data, as: UTF8.self)).enumerated() {
            let trimmed = line.trimmingASCIIWhitespace()
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            if line.first == " " || line.first == "\t" {
                guard !entries.isEmpty, let eq = trimmed.firstIndex(of: "=") else {
                    throw UsageError("\(path):\(number + 1): expected ' out=NAME' or ' dir=DIR' after a URL")
                }
                let key = trimmed[..<eq]
                let value = String(trimmed[trimmed.index(after: eq)...])
                switch key {
                case "out":
                    // A list may come from elsewhere: its names stay inside their directory
                    // (dir= chooses another one openly). Judged on bytes, as the kernel reads
                    // the path: "/" and a combining mark after it are one Character.
                    let parts = Sys.components(value)
                    guard parts.first?.isEmpty == false, !parts.contains(".."), parts.last?.isEmpty == false else {
                        throw UsageError(
                            "\(path):\(number + 1): out=\(value) is not a file name inside the directory (use dir=)")
                    }
                    entries[entries.count - 1].options.out = value
                case "dir": entries[entries.count - 1].options.dir = value
                case "checksum":
                    do throws(UsageError) {
                        let checksums = entries[entries.count - 1].options.checksums + (try Self.checksums(value))
                        entries[entries.count - 1].options.checksums = try Self.merged(checksums)
                    } catch {
                        throw UsageError("\(path):\(number + 1): checksum=: \(error.message)")
                    }
                default:
                    throw UsageError("\(path):\(number + 1): unknown option '\(key)' (out, dir or checksum)")
                }
            } else {
                entries.append(ListEntry(raw: trimmed))
            }
        }
        return entries
    }
}
