import HaulCore

/// The directory the daemon downloads into, and the only one it writes or deletes in: the API
/// names files relative to it (`name`, `subfolder`), and a name that is absolute, has a `..`,
/// an empty or `.` part, a control character, or passes through a symbolic link is refused
/// (aria2's RPC let any page choose where to write; this one cannot).
package struct DownloadRoot: Sendable, Equatable {
    /// The root, absolute and lexically normal.
    package let path: String

    /// `path`, which must be an absolute path to a directory (made if missing).
    package init(_ path: String) throws(ServeError) {
        guard path.hasPrefix("/") else {
            throw ServeError(.internalError, "the download root must be absolute: \(path)")
        }
        let normal = Sys.lexicallyNormalized(path)
        do { try Sys.makeDirectories(normal) } catch {
            throw ServeError(.internalError, "cannot make the download root \(normal): \(error)")
        }
        guard Sys.isDirectory(normal) else { throw ServeError(.internalError, "\(normal) is not a directory") }
        self.path = normal
    }

    /// The absolute path of `relative` under the root. Refused: an empty name, an absolute
    /// one, a `..`, `.` or empty part, a part over 255 bytes, a byte under 0x20 or 0x7F, and a
    /// path whose existing parts include a symbolic link, or a non-directory before its last.
    package func resolve(_ relative: String) throws(ServeError) -> String {
        let parts = try Self.parts(relative)
        var current = path
        for (index, part) in parts.enumerated() {
            current += "/" + part
            let kind: Sys.FileKind?
            do { kind = try Sys.fileKind(current) } catch {
                throw ServeError(.forbidden, "cannot look at '\(relative)' under the download root: \(error)")
            }
            guard let kind else { continue }  // not there yet: made under the root
            if Sys.isSymbolicLink(current) || kind == .danglingLink {
                throw ServeError(.forbidden, "'\(relative)' passes through a symbolic link")
            }
            if index < parts.count - 1, kind != .directory {
                throw ServeError(.forbidden, "'\(relative)': '\(part)' is not a directory")
            }
        }
        return current
    }

    /// The parts of a relative name, each checked byte by byte.
    static func parts(_ relative: String) throws(ServeError) -> [String] {
        let bytes = Array(relative.utf8)
        guard !bytes.isEmpty else { throw ServeError(.badRequest, "an empty name") }
        guard bytes.count <= 4096 else { throw ServeError(.badRequest, "a name over 4096 bytes") }
        guard bytes.first != UInt8(ascii: "/") else {
            throw ServeError(.forbidden, "'\(relative)' is absolute: names are relative to the download root")
        }
        guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw ServeError(.badRequest, "a name with a control character")
        }
        let parts = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        for part in parts {
            if part.isEmpty || part.elementsEqual(".".utf8) {
                throw ServeError(.badRequest, "'\(relative)' has an empty or '.' part")
            }
            if part.elementsEqual("..".utf8) { throw ServeError(.forbidden, "'\(relative)' leaves the download root") }
            if part.count > 255 { throw ServeError(.badRequest, "a part of '\(relative)' is over 255 bytes") }
        }
        return parts.map { String(decoding: $0, as: UTF8.self) }
    }
}
