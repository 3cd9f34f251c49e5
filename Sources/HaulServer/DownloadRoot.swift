import HaulCore

/// The directory the daemon downloads into, and the only one it writes or deletes in: the API
/// names files relative to it (a folder and a file name), and a name that is absolute, has a
/// `..`, an empty part or one starting with `.`, a control character, a side file's ending
/// (`.part`, `.haul`), or passes through a symbolic link is refused (aria2's RPC let any page
/// choose where to write; this one cannot). The root cannot be `/`, the home directory or a
/// directory above the state directory (a name there would reach `.ssh` or haul's own state).
package struct DownloadRoot: Sendable, Equatable {
    /// The root, absolute and lexically normal.
    package let path: String

    /// `path`, which must be an absolute path to a directory (made if missing), not `/`, the
    /// home directory, nor one that holds the home or haul's state directory.
    package init(
        _ path: String, home: String? = XDGDirectory.home(), state: String? = XDGDirectory.state.path()
    ) throws(ServeError) {
        guard path.hasPrefix("/") else {
            throw ServeError(.internalError, "the download root must be absolute: \(path)")
        }
        let normal = Sys.lexicallyNormalized(path)
        let guarded = [home, state].compactMap { $0.map(Sys.lexicallyNormalized) }
        if normal == "/" || guarded.contains(where: { $0 == normal || $0.hasPrefix(normal + "/") }) {
            throw ServeError(
                .internalError, "\(normal) cannot be the download root: it holds the home or state directory")
        }
        do { try Sys.makeDirectories(normal) } catch {
            throw ServeError(.internalError, "cannot make the download root \(normal): \(error)")
        }
        guard Sys.isDirectory(normal) else { throw ServeError(.internalError, "\(normal) is not a directory") }
        // Another user who may write in the root could plant links in it between a check and a write.
        guard (try? Sys.status(normal))??.isOwnAndPrivate == true else {
            throw ServeError(.internalError, "\(normal) must be this user's and writable by no one else")
        }
        self.path = normal
    }

    /// The absolute path of `file` in `folder` (nil: the root). Refused: a file name with a `/`,
    /// over ``SafeFileName/maxBytes`` or ending like a side file; in either, an empty name, an
    /// absolute one, an empty part or one starting with `.` (`..` among them), a part over 255
    /// bytes, a byte under 0x20 or 0x7F; and a path whose existing parts include a symbolic
    /// link, or a non-directory before its last.
    package func resolve(folder: String?, file: String) throws(ServeError) -> String {
        guard !file.utf8.contains(UInt8(ascii: "/")) else {
            throw ServeError(.badRequest, "a file name with a '/': give the folder apart")
        }
        guard file.utf8.count <= SafeFileName.maxBytes else {
            throw ServeError(.badRequest, "a file name over \(SafeFileName.maxBytes) bytes")
        }
        guard !SafeFileName.isSideFileName(file) else {
            throw ServeError(.forbidden, "'\(ServeError.shown(file))' ends like haul's own side files (.part, .haul)")
        }
        return try resolve((folder.map { $0 + "/" } ?? "") + file)
    }

    /// The absolute path of `relative` (a folder, or a folder and a file) under the root, with
    /// the checks of ``resolve(folder:file:)`` but the file name's own.
    package func resolve(_ relative: String) throws(ServeError) -> String {
        let parts = try Self.parts(relative)
        var current = path
        for (index, part) in parts.enumerated() {
            current += "/" + part
            let kind: Sys.FileKind?
            do { kind = try Sys.fileKind(current) } catch {
                throw ServeError(
                    .forbidden, "cannot look at '\(ServeError.shown(relative))' under the download root: \(error)")
            }
            guard let kind else { continue }  // not there yet: made under the root
            if Sys.isSymbolicLink(current) || kind == .danglingLink {
                throw ServeError(.forbidden, "'\(ServeError.shown(relative))' passes through a symbolic link")
            }
            if index < parts.count - 1, kind != .directory {
                throw ServeError(.forbidden, "'\(ServeError.shown(relative))': a part of it is not a directory")
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
            throw ServeError(
                .forbidden, "'\(ServeError.shown(relative))' is absolute: names are relative to the download root")
        }
        guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw ServeError(.badRequest, "a name with a control character")
        }
        let parts = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        for part in parts {
            if part.elementsEqual("..".utf8) {
                throw ServeError(.forbidden, "'\(ServeError.shown(relative))' leaves the download root")
            }
            if part.isEmpty || part.first == UInt8(ascii: ".") {
                throw ServeError(
                    .badRequest, "'\(ServeError.shown(relative))' has an empty part or one starting with '.'")
            }
            if part.count > 255 {
                throw ServeError(.badRequest, "a part of '\(ServeError.shown(relative))' is over 255 bytes")
            }
        }
        return parts.map { String(decoding: $0, as: UTF8.self) }
    }
}
