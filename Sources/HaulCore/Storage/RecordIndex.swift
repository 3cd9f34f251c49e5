/// Which partial in a download directory belongs to which URL, so that a download into a
/// directory (whose file name comes from the server's answer) finds its partial before it asks,
/// and asks for the missing bytes at once.
///
/// Each directory is listed once per process, and its records read once; after that the records
/// this process writes and removes keep the index current. A listing per download would make a
/// thousand downloads into one directory list it a thousand times (two `getdents` per file,
/// growing with the directory).
///
/// A record written by another process after the listing is not in the index; the download
/// still finds it when the answer names the same file (it then asks again with Range: one
/// request more). Every hit is checked against the record on disk.
///
/// The listing also keeps which names the directory held, and the index which names this
/// process writes (records, files), as hashes, for ``listedFree(_:)``.
package final class RecordIndex: Sendable {
    /// The index of this process.
    package static let shared = RecordIndex()

    private struct State {
        /// Directory → (URL without credentials → destination path).
        var directories: [String: [String: String]] = [:]
        /// Destination path → its URL, for the entries above.
        var owners: [String: String] = [:]
        /// Directory → the hashes of the names it held when listed (a directory whose names
        /// were not kept has none).
        var listed: [String: Set<UInt64>] = [:]
        /// Directory → the hashes of the names this process has written a record or a file at,
        /// before its listing or after.
        var written: [String: Set<UInt64>] = [:]
        /// Hashes held in `listed` and `written` together.
        var kept = 0
        /// More than `namesKept` were to be kept: none are, and no name is taken as free.
        var full = false
        /// How often each directory was listed (tests).
        var listings: [String: Int] = [:]

        /// Counts `count` more hashes kept; past `limit`, lets all of them go and takes no name
        /// as free from then on.
        mutating func keep(_ count: Int, limit: Int) {
            kept += count
            guard kept > limit else { return }
            (full, listed, written, kept) = (true, [:], [:], 0)
        }
    }

    /// The most name hashes kept, all directories together (8 bytes each in a set: a few MiB).
    private let namesKept: Int
    private let state = Locked(State())

    package init(namesKept: Int = 1 << 18) { self.namesKept = namesKept }

    /// The destination of the partial in `dir` whose record names `url` (redacted), if any.
    package func destination(of url: String, in dir: String) -> String? {
        guard let destination = listing(of: dir)[url] else { return nil }
        guard Self.recordURL(at: destination) == url else {
            removed(destination: destination)
            return nil
        }
        return destination
    }

    /// Lists `dir` now unless it was listed before: a caller about to look up many URLs from a
    /// thread that must not wait for a directory's records (the transport's) lists it first.
    package func prepare(_ dir: String) { _ = listing(of: dir) }

    /// Whether `destination`'s directory, when this index listed it, held nothing at its name
    /// nor at its partial's and record's names, and this process has written no record or file
    /// there since. A download that only links a new whole file there, never replacing (the
    /// express way), need not look at those names again: a file made at the name since is found
    /// by the link itself, and side files made since by another program are not touched by it.
    /// False when the directory was not listed, or its names were not kept (more than the
    /// index keeps, a directory that could not be read to its end, or one that folds case).
    package func listedFree(_ destination: String) -> Bool {
        let (dir, name) = Sys.split(destination)
        let base = Self.hash(name.utf8)
        return state.withLock { s in
            guard !s.full, let names = s.listed[dir], s.written[dir]?.contains(base) != true else { return false }
            return !names.contains(base) && !names.contains(Self.hash(PartialFile.partSuffix.utf8, after: base))
                && !names.contains(Self.hash(ResumeRecord.fileExtension.utf8, after: base))
        }
    }

    /// This process has written at `destination` (a record, or a file linked or found there):
    /// ``listedFree(_:)`` no longer takes it as free.
    package func wrote(_ destination: String) {
        let (dir, name) = Sys.split(destination)
        let base = Self.hash(name.utf8)
        state.withLock { s in
            guard !s.full, s.written[dir, default: []].insert(base).inserted else { return }
            s.keep(1, limit: namesKept)
        }
    }

    /// The index of `dir`, listed the first time.
    private func listing(of dir: String) -> [String: String] {
        if let known = state.withLock({ $0.directories[dir] }) { return known }
        let room = state.withLock { namesKept - $0.kept }
        let (listed, names) = Self.list(dir, namesKept: room)
        return state.withLock { s in
            s.listings[dir, default: 0] += 1
            if let names, !s.full, s.listed[dir] == nil, s.kept + names.count <= namesKept {
                s.listed[dir] = names
                s.keep(names.count, limit: namesKept)
            }
            // Records noted while this listing ran win over it.
            let merged = listed.merging(s.directories[dir] ?? [:]) { _, noted in noted }
            s.directories[dir] = merged
            for (url, destination) in merged { s.owners[destination] = url }
            return merged
        }
    }

    /// A record for `url` was written at `destination` (ignored until its directory is listed:
    /// the listing will find it on disk).
    package func noted(url: String, destination: String) {
        wrote(destination)
        let dir = Sys.parentDirectory(of: destination)
        state.withLock { s in
            guard s.directories[dir] != nil, s.owners[destination] != url else { return }
            if let previous = s.owners[destination] { s.directories[dir]?[previous] = nil }
            if let other = s.directories[dir]?[url] { s.owners[other] = nil }
            s.directories[dir]?[url] = destination
            s.owners[destination] = url
        }
    }

    /// The record at `destination` is gone (the file is in place, or the partial was discarded).
    package func removed(destination: String) {
        wrote(destination)
        let dir = Sys.parentDirectory(of: destination)
        state.withLock { s in
            guard let url = s.owners.removeValue(forKey: destination) else { return }
            s.directories[dir]?[url] = nil
        }
    }

    /// How many times `dir` was listed by this index.
    package func listings(of dir: String) -> Int { state.withLock { $0.listings[dir] ?? 0 } }

    /// The records in `dir` (URL → destination) and the hashes of all its names (nil: more
    /// than `namesKept`, a read that failed before the end, or a directory that folds case,
    /// where a name's bytes do not say which names it takes).
    private static func list(_ dir: String, namesKept: Int) -> (records: [String: String], names: Set<UInt64>?) {
        let suffix = Array(ResumeRecord.fileExtension.utf8)
        var records: [String] = []
        var names = Set<UInt64>()
        var keepsNames = namesKept > 0 && !Sys.foldsCase(dir)
        let read = Sys.forEachEntry(in: dir) { raw in
            if keepsNames {
                names.insert(hash(raw))
                if names.count > namesKept { (keepsNames, names) = (false, []) }
            }
            if raw.count > suffix.count, raw.suffix(suffix.count).elementsEqual(suffix) {
                records.append(String(decoding: raw.dropLast(suffix.count), as: UTF8.self))
            }
        }
        var found: [String: String] = [:]
        // Sorted, so that of two records naming one URL the same one wins every time.
        for name in records.sorted().reversed() {
            let destination = dir + "/" + name
            if let url = recordURL(at: destination) { found[url] = destination }
        }
        return (found, read && keepsNames ? names : nil)
    }

    /// FNV-1a of `bytes` with ASCII letters in lower case, continuing from `start` (a name's
    /// hash, for the name with a suffix). Two names with one hash only cost a look that was not
    /// needed; folding ASCII case keeps a file system that ignores it (XFS's ASCII-CI) from
    /// taking `A.part` for a name apart from `a`.
    private static func hash(_ bytes: some Sequence<UInt8>, after start: UInt64 = 0xcbf2_9ce4_8422_2325) -> UInt64 {
        var h = start
        for byte in bytes {
            let folded = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            h = (h ^ UInt64(folded)) &* 0x0000_0100_0000_01B3
        }
        return h
    }

    /// The URL of the partial at `destination`, when haul can vouch for it (a record bound to
    /// its partial): a planted record naming a URL does not pick a download's destination.
    private static func recordURL(at destination: String) -> String? {
        guard case .partial(let record) = try? PartialFile(destination: destination).inspect() else { return nil }
        return record.url
    }
}
