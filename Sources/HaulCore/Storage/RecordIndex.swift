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
/// The listing also keeps which names the directory held (``ListedNames``), for
/// ``listedFree(_:)``.
package final class RecordIndex: Sendable {
    /// The index of this process.
    package static let shared = RecordIndex()

    private struct State {
        /// Directory → (URL without credentials → destination path).
        var directories: [String: [String: String]] = [:]
        /// Destination path → its URL, for the entries above.
        var owners: [String: String] = [:]
        /// How often each directory was listed (tests).
        var listings: [String: Int] = [:]
    }

    private let state = Locked(State())
    /// The names the listed directories held, and those this process wrote since.
    private let names: ListedNames

    /// `namesKept`: the most entries ``ListedNames`` keeps, name hashes and paths together.
    package init(namesKept: Int = 1 << 18) { names = ListedNames(limit: namesKept) }

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
    /// `keepingNames`: the listing also keeps the hashes of its names, for ``listedFree(_:)``
    /// (the express way's; other listings skip that work, a large directory's names a few
    /// milliseconds, and their directories are never free).
    package func prepare(_ dir: String, keepingNames: Bool = false) {
        _ = listing(of: dir, keepingNames: keepingNames)
    }

    /// Whether `destination`'s directory, when this index listed it (under any path), held
    /// nothing at its name nor at its partial's and record's names, and this process has
    /// written no partial, record or file there since. A download that only links a new whole file
    /// there, never replacing (the express way), need not look at those names again: a file
    /// made at the name since is found by the link itself, and side files made since by another
    /// program are not touched by it. False when the directory was not listed, or its names were
    /// not kept (past the bound, a read that failed before the end, a directory that folds case).
    package func listedFree(_ destination: String) -> Bool { names.isFree(destination) }

    /// This process has written at `destination` (a partial, a record, a file linked or found there):
    /// ``listedFree(_:)`` no longer takes it as free.
    package func wrote(_ destination: String) { names.wrote(destination) }

    /// The index of `dir`, listed the first time.
    private func listing(of dir: String, keepingNames: Bool = false) -> [String: String] {
        if let known = state.withLock({ $0.directories[dir] }) { return known }
        let (listed, read, hashes) = Self.list(dir, keeping: keepingNames ? names.room : 0)
        names.listed(dir, read: read, names: hashes)
        return state.withLock { s in
            s.listings[dir, default: 0] += 1
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

    /// The records in `dir` (URL → destination), and with `keeping` above 0 what was read and
    /// the hashes of all its names (nil: more than `keeping`).
    private static func list(
        _ dir: String, keeping: Int
    ) -> (records: [String: String], read: Sys.ReadDirectory?, names: Set<UInt64>?) {
        let tail = Array(ResumeRecord.fileExtension.utf8)
        var records: [String] = []
        var names = Set<UInt64>()
        var keepsNames = keeping > 0
        func visit(_ raw: UnsafeBufferPointer<UInt8>) {
            if keepsNames {
                names.insert(ListedNames.hash(raw))
                if names.count > keeping { (keepsNames, names) = (false, []) }
            }
            if raw.count > tail.count, raw.suffix(tail.count).elementsEqual(tail) {
                records.append(String(decoding: raw.dropLast(tail.count), as: UTF8.self))
            }
        }
        // Only a listing that keeps names asks what it read (an fstat and an ioctl more).
        var read: Sys.ReadDirectory?
        if keepsNames { read = Sys.readDirectory(dir, visit) } else { Sys.forEachEntry(in: dir, visit) }
        var found: [String: String] = [:]
        // Sorted, so that of two records naming one URL the same one wins every time.
        for name in records.sorted().reversed() {
            let destination = dir + "/" + name
            if let url = recordURL(at: destination) { found[url] = destination }
        }
        return (found, read, keepsNames ? names : nil)
    }

    /// The URL of the partial at `destination`, when haul can vouch for it (a record bound to
    /// its partial): a planted record naming a URL does not pick a download's destination.
    private static func recordURL(at destination: String) -> String? {
        guard case .partial(let record) = try? PartialFile(destination: destination).inspect() else { return nil }
        return record.url
    }
}
