/// Which names each download directory held when the ``RecordIndex`` listed it for the express
/// way, and which names this process has written there since (a partial, a record, a file linked
/// or found taken), so that a save that only links a new whole file, never replacing, can skip
/// the look-ups at its name, its partial's and its record's that would find nothing
/// (``DownloadStore/claimForWholeFile(_:)``, docs/small-downloads.md).
///
/// Names are kept as hashes of their bytes (FNV-1a, ASCII case folded), per directory identity
/// (device and inode: a directory reached by two paths is one, and one listed again under
/// another path adds what it holds now). Each path is bound to the directory it named when first
/// seen; what this process writes through a path and looks up through it agree, even after the
/// directory at the path is replaced. At most `limit` entries are kept, hashes and paths
/// together: a listing that would pass the bound keeps none of its names, and a written name or
/// a new path past it lets all go, after which no name is free.
final class ListedNames: Sendable {
    private struct Directory: Hashable {
        let device: UInt64
        let inode: UInt64
    }

    private struct State {
        /// Path → the directory it named when first seen.
        var identities: [String: Directory] = [:]
        /// Directory → the hashes of the names it held when listed.
        var listed: [Directory: Set<UInt64>] = [:]
        /// Directory → the hashes of the names this process wrote there, before its listing or
        /// after.
        var written: [Directory: Set<UInt64>] = [:]
        /// Entries held in the three above together.
        var kept = 0
        /// More than the limit were to be kept: none are, and no name is free.
        var full = false

        /// Counts `count` more entries kept; past `limit`, lets all go.
        mutating func keep(_ count: Int, limit: Int) {
            kept += count
            guard kept > limit else { return }
            (full, identities, listed, written, kept) = (true, [:], [:], [:], 0)
        }

        /// Binds `path` to `directory` unless it is bound; the directory it is bound to.
        mutating func bind(_ path: String, to directory: Directory, limit: Int) -> Directory {
            if let bound = identities[path] { return bound }
            identities[path] = directory
            keep(1, limit: limit)
            return directory
        }
    }

    private let limit: Int
    private let state = Locked(State())

    init(limit: Int) { self.limit = limit }

    /// How many names a listing may keep (a new path's entry set aside).
    var room: Int { state.withLock { $0.full ? 0 : limit - $0.kept - 1 } }

    /// `path` was listed: the directory `read` and the hashes of its names (nil: none kept). A
    /// path bound to another directory keeps nothing new.
    func listed(_ path: String, read: Sys.ReadDirectory?, names: Set<UInt64>?) {
        guard let read, !read.foldsCase, let names else { return }
        let directory = Directory(device: read.device, inode: read.inode)
        state.withLock { s in
            guard !s.full, s.identities[path, default: directory] == directory,
                s.kept + names.count + (s.identities[path] == nil ? 1 : 0) <= limit
            else { return }
            _ = s.bind(path, to: directory, limit: limit)
            let before = s.listed[directory]?.count ?? 0
            s.listed[directory, default: []].formUnion(names)
            s.keep((s.listed[directory]?.count ?? 0) - before, limit: limit)
        }
    }

    /// Whether the name of `destination`, and its partial's and record's, were none of them in
    /// its directory when listed, and none was written by this process since.
    func isFree(_ destination: String) -> Bool {
        let (path, name) = Sys.split(destination)
        let base = Self.hash(name.utf8)
        let side = [
            base, Self.hash(PartialFile.partSuffix.utf8, after: base),
            Self.hash(ResumeRecord.fileExtension.utf8, after: base),
        ]
        return state.withLock { s in
            guard !s.full, let directory = s.identities[path], let names = s.listed[directory] else { return false }
            let written = s.written[directory] ?? []
            return side.allSatisfy { !names.contains($0) && !written.contains($0) }
        }
    }

    /// This process wrote at `destination`: it is not free from now on. A path not seen before
    /// is bound to the directory it names now (one stat; none when it is gone, and then nothing
    /// can be written there).
    func wrote(_ destination: String) {
        let (path, name) = Sys.split(destination)
        let base = Self.hash(name.utf8)
        let (full, bound) = state.withLock { s in (s.full, s.identities[path]) }
        guard !full else { return }
        let named: Directory
        if let bound {
            named = bound
        } else {
            guard let identity = Sys.fileIdentity(path) else { return }
            named = Directory(device: identity.device, inode: identity.inode)
        }
        state.withLock { s in
            guard !s.full else { return }
            let directory = s.bind(path, to: named, limit: limit)
            guard !s.full, s.listed[directory]?.contains(base) != true else { return }
            if s.written[directory, default: []].insert(base).inserted { s.keep(1, limit: limit) }
        }
    }

    /// FNV-1a of `bytes` with ASCII letters in lower case, continuing from `start` (a name's
    /// hash, for the name with a suffix). Two names with one hash only cost a look that was not
    /// needed; folding ASCII case keeps a file system that ignores it (XFS's ASCII-CI) from
    /// taking `A.part` for a name apart from `a`.
    static func hash(_ bytes: some Sequence<UInt8>, after start: UInt64 = 0xcbf2_9ce4_8422_2325) -> UInt64 {
        var h = start
        for byte in bytes {
            let folded = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            h = (h ^ UInt64(folded)) &* 0x0000_0100_0000_01B3
        }
        return h
    }
}
