#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A file already at a download's destination that the request asks the server about
/// (`haul get -N`, docs/conditional-get.md): `If-None-Match` with the ETag it was saved with,
/// `If-Modified-Since` with its Last-Modified (or, for a file haul has no validators of, its
/// modification time). A 304 keeps it; a new version replaces it.
package struct Condition: Sendable, Equatable {
    /// The file asked about.
    package let path: String
    /// Its size now.
    package let size: Int64
    /// What the server sent for the file when haul saved it (from the ``ValidatorStore``).
    package let etag: String?
    package let lastModified: String?
    /// Its modification time in seconds since 1970, when haul has no validators of it.
    package let modified: Int64?
    /// The file as it was when the question was made: an answer that it is up to date is kept
    /// only for these bytes.
    package let stamp: FileStamp?

    package init(
        path: String, size: Int64, etag: String?, lastModified: String?, modified: Int64? = nil,
        stamp: FileStamp? = nil
    ) {
        self.path = path
        self.size = size
        self.etag = etag
        self.lastModified = lastModified
        self.modified = etag == nil && lastModified == nil ? modified : nil
        self.stamp = stamp
    }

    /// Whether it was asked about by validators the server gave for it (else by its time only,
    /// whose answer binds no bytes: a 304 to If-Modified-Since says only that the server's is
    /// not newer).
    package var hasValidators: Bool { etag != nil || lastModified != nil }

    /// The conditional request's headers (both when both are known: a server looks at
    /// `If-None-Match` first, RFC 9110 13.2.2).
    package var headers: [(String, String)] {
        var headers: [(String, String)] = []
        if let etag { headers.append(("If-None-Match", etag)) }
        if let date = lastModified ?? modified.map(HTTPDate.format) { headers.append(("If-Modified-Since", date)) }
        return headers
    }

    /// Whether an answer with a body (a 200, or a probe's 206 of `total` bytes) is of the file
    /// already there: a server that ignores conditions but names the same version (the same
    /// ETag, compared weakly as `If-None-Match` compares; else the same Last-Modified; else, for
    /// a file without validators, one not newer than it) and the same size.
    package func unchanged(_ headers: HTTPHeaders, total: Int64?) -> Bool {
        guard total == size else { return false }
        if let etag {
            guard let theirs = headers.etag else { return false }
            return Self.opaque(theirs) == Self.opaque(etag)
        }
        if let lastModified { return headers.lastModified == lastModified }
        if let modified, let date = headers.lastModified.flatMap({ HTTPDate.parse($0) }) { return date <= modified }
        return false
    }

    static func opaque(_ etag: String) -> Substring {
        etag.hasPrefix("W/") ? etag.dropFirst(2) : Substring(etag)
    }

    /// The outcome of an answer that the file is the server's (either engine's): the file kept
    /// as it is, once it passes `checksums`, with the validators the answer named, else those
    /// it was asked about with.
    package func kept(
        etag: String?, lastModified: String?, verifying checksums: [Checksum]
    ) async throws(HaulError) -> DownloadOutcome {
        var kept = try await DownloadStore.confirmComplete(path, bytes: size, verifying: checksums, notModified: true)
        kept.etag = etag ?? self.etag
        kept.lastModified = lastModified ?? self.lastModified
        return kept
    }
}

/// What a file's status says of its bytes: a write, a truncation, a file renamed over it or a
/// `touch` changes one of these (its change time, which no program can set back, at least).
package struct FileStamp: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64
    let size: Int64
    let modified: Int64
    let changed: Int64

    package init(_ status: Sys.FileStatus) {
        self.init(
            device: status.device, inode: status.inode, size: status.size, modified: status.modified,
            changed: status.changed)
    }

    init(device: UInt64, inode: UInt64, size: Int64, modified: Int64, changed: Int64) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modified = modified
        self.changed = changed
    }
}

/// The validators (ETag, Last-Modified) of files downloaded with revalidation, one small file
/// per URL and target under `$XDG_STATE_HOME/haul/validators`, each bound to the file it was
/// written for: its device, inode, size, modification and change times. Any change to the file
/// (a write, a `touch`, a copy in its place) changes its change time, which no program can set
/// back, and the entry is then not used. Best effort: an entry that cannot be written or read
/// costs only the ETag (the file's time is asked about instead), and so does a directory or
/// entry another user could have written (the directory must be this user's alone, 0700, as
/// haul makes it). docs/conditional-get.md.
package struct ValidatorStore: Sendable {
    /// Where the entries are; nil: nowhere (an ephemeral session), only files' times are asked about.
    package let directory: String?

    package init(directory: String?) { self.directory = directory }

    /// `$XDG_STATE_HOME/haul/validators`, else `~/.local/state/haul/validators`; nil without a
    /// home (``XDGDirectory``).
    package static func defaultDirectory(
        _ environment: Environment = .process
    ) -> String? {
        XDGDirectory.state.path(environment).map { $0 + "/haul/validators" }
    }

    /// Entries kept at most; past it the oldest go (checked once per process, at its first save).
    package static let maxEntries = 10_000

    /// One entry (format version 1).
    struct Entry: Codable, Equatable {
        var version = 1
        /// The URL without user and password, and the target, as the key was made of them.
        var url: String
        var target: String
        /// The file saved.
        var path: String
        var etag: String?
        var lastModified: String?
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int64
        var changed: Int64

        var stamp: FileStamp {
            FileStamp(device: device, inode: inode, size: size, modified: modified, changed: changed)
        }
    }

    /// What a download of `url` to `target` asks the server about: the file haul saved there
    /// with its validators, else the file already at the destination with its time; nil when
    /// there is no regular file to ask about.
    package func condition(for url: URL, target: DownloadTarget) -> Condition? {
        let (key, targetText) = Self.key(url, target)
        // The entry's file, when it is still the file the entry was written for.
        if let entry = read(key).flatMap({ valid($0, url: url, target: targetText) }),
            let status = try? Sys.status(entry.path), status.isRegular, FileStamp(status) == entry.stamp
        {
            let path = target.namedFile ?? entry.path
            return Condition(
                path: path, size: status.size, etag: entry.etag, lastModified: entry.lastModified,
                stamp: FileStamp(status))
        }
        let path: String
        switch target {
        case .file(let file): path = file
        case .directory(let dir): path = dir + "/" + SafeFileName.suggestedName(contentDisposition: nil, url: url)
        }
        guard let status = try? Sys.status(path), status.isRegular else { return nil }
        return Condition(
            path: path, size: status.size, etag: nil, lastModified: nil,
            modified: status.modified >= 0 ? status.modified / 1_000_000_000 : 0, stamp: FileStamp(status))
    }

    /// Notes the validators of the file just saved (or found up to date) at `path` for `url`
    /// and `target`; when `settingTime`, first sets its modification time to `lastModified` (as
    /// wget does), so that a later look without the entry asks about the server's own date.
    package func save(
        _ url: URL, target: DownloadTarget, path: String, etag: String?, lastModified: String?, settingTime: Bool
    ) {
        if settingTime, let seconds = lastModified.flatMap({ HTTPDate.parse($0) }) {
            try? Sys.setModified(path, seconds: seconds)
        }
        let status = try? Sys.status(path)
        write(url, target: target, etag: etag, lastModified: lastModified, path: path, status: status ?? nil)
    }

    /// Notes the validators of the file found up to date, as `asked` found it: an answer to its
    /// time alone notes nothing (it binds no bytes), and a file changed since the question
    /// (its ``FileStamp``) loses its entry.
    package func saveUnchanged(
        _ url: URL, target: DownloadTarget, asked: Condition, etag: String?, lastModified: String?
    ) {
        guard asked.hasValidators else { return }
        var status = (try? Sys.status(asked.path)) ?? nil
        if status.map(FileStamp.init) != asked.stamp { status = nil }
        // A 304 naming another ETag than the one asked about vouches for no version of these
        // bytes (RFC 9111 4.3.4 updates only a stored response its validator matches).
        if let theirs = etag, let mine = asked.etag, Condition.opaque(theirs) != Condition.opaque(mine) { status = nil }
        write(
            url, target: target, etag: etag ?? asked.etag, lastModified: lastModified ?? asked.lastModified,
            path: asked.path, status: status)
    }

    // MARK: - Entries

    /// Writes the entry of `path` as `status` finds it; removes the entry when there is nothing
    /// to note (no validators, no regular file).
    private func write(
        _ url: URL, target: DownloadTarget, etag: String?, lastModified: String?, path: String,
        status: Sys.FileStatus?
    ) {
        guard let directory else { return }
        let (key, targetText) = Self.key(url, target)
        let file = directory + "/" + key
        guard etag != nil || lastModified != nil, let status, status.isRegular else {
            if Sys.isPrivateDirectory(directory) { try? Sys.unlink(file) }
            return
        }
        let entry = Entry(
            url: ResumeRecord.redacted(url), target: targetText, path: Self.absolute(path), etag: etag,
            lastModified: lastModified, device: status.device, inode: status.inode, size: status.size,
            modified: status.modified, changed: status.changed)
        guard let bytes = try? JSONEncoder().encode(entry) else { return }
        let parent = Sys.parentDirectory(of: directory)
        guard (try? Sys.makeDirectories(parent)) != nil, Sys.privateDirectoryClosingOwn(directory) != nil else {
            return
        }
        Self.pruneOnce(directory)
        try? Sys.writeFileAtomically(file, Array(bytes), durably: false)
    }

    private func read(_ key: String) -> Entry? {
        guard let directory, Sys.isPrivateDirectory(directory) else { return nil }
        let path = directory + "/" + key
        guard let status = (try? Sys.status(path)) ?? nil, status.isRegular, status.isOwnAndPrivate,
            let bytes = try? Sys.readSmallFile(path, limit: 16 << 10, followingLinks: false)
        else {
            return nil
        }
        return try? JSONDecoder().decode(Entry.self, from: Data(bytes))
    }

    /// The entry when it is one haul wrote for this URL and target: its file is the target, or
    /// a name haul could have given in the target directory, and its validators can be sent.
    private func valid(_ entry: Entry, url: URL, target: String) -> Entry? {
        guard entry.version == 1, entry.url == ResumeRecord.redacted(url), entry.target == target else { return nil }
        let sendable = [entry.etag, entry.lastModified].allSatisfy { value in
            value.map { $0.utf8.count <= 1024 && $0.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F } } ?? true
        }
        guard sendable else { return nil }
        if target.hasPrefix("file:") { return "file:" + entry.path == target ? entry : nil }
        let name = String(entry.path.utf8.split(separator: UInt8(ascii: "/")).last.map { Substring($0) } ?? "")
        guard "dir:" + Sys.parentDirectory(of: entry.path) == target, SafeFileName.sanitize(name) == name else {
            return nil
        }
        return entry
    }

    /// The entry's file name (the SHA-256 of the URL without credentials and of the target,
    /// made absolute) and the target's text.
    private static func key(_ url: URL, _ target: DownloadTarget) -> (String, String) {
        let text =
            switch target {
            case .file(let path): "file:" + absolute(path)
            case .directory(let dir): "dir:" + absolute(dir)
            }
        var hasher = SHA256()
        hasher.update(Array((ResumeRecord.redacted(url) + "\n" + text).utf8))
        return (Hex.string(hasher.finalize()) + ".json", text)
    }

    /// The path absolute where the working directory can be told, else as given (normalised).
    private static func absolute(_ path: String) -> String {
        Sys.absolutePath(path) ?? Sys.lexicallyNormalized(path)
    }

    private static let pruned = Locked<Set<String>>([])

    /// Past ``maxEntries`` entries in `directory`, removes the oldest tenth and more (once per
    /// process and directory).
    private static func pruneOnce(_ directory: String) {
        guard pruned.withLock({ $0.insert(directory).inserted }) else { return }
        let names = Sys.listDirectory(directory, suffix: ".json")
        guard names.count > maxEntries else { return }
        let byAge = names.map { name in
            (name, (try? Sys.status(directory + "/" + name))?.modified ?? 0)
        }.sorted { $0.1 < $1.1 }
        for (name, _) in byAge.prefix(names.count - maxEntries * 9 / 10) { try? Sys.unlink(directory + "/" + name) }
    }
}
