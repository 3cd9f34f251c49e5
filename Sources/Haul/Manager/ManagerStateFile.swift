import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A persisted manager's list on disk: `<stateDirectory>/managers/<identifier>.json`, held by one
/// manager at a time through a lock on `<identifier>.lock` beside it (an open-file-description
/// lock: a second manager with the same identifier fails, in this process or another, and the
/// lock goes with the descriptor when the holder exits, even by kill -9). docs/download-manager.md
/// says why and what was rejected.
final class ManagerStateFile: Sendable {
    /// The list.
    let url: URL
    /// The lock's descriptor while this manager holds the list.
    private let lock: Locked<Int32?>
    /// Held while the file is written; counts the writes.
    private let writes = Locked(0)

    private struct Stored: Codable {
        var version = 1
        var items: [StoredItem]
    }

    private struct StoredItem: Codable {
        var id: UUID
        var url: String
        var target: DownloadManager.Target
        var priority: Int
        var state: DownloadManager.Item.State
        var fileURL: URL?
        var sequence: Int
    }

    /// Takes the list of `identifier` in `directory`.
    /// - Throws: ``HaulError/Code/usage`` for an identifier that names no file,
    ///   ``HaulError/Code/listInUse`` while another manager holds it, a file system error when
    ///   the directory cannot be made, or the lock file opened or locked.
    init(directory: URL, identifier: String) throws(HaulError) {
        guard let name = Self.fileName(identifier) else {
            throw HaulError(
                .usage,
                "a download manager's identifier must be 1 to \(Self.longestName) bytes once encoded for a file "
                    + "name (each byte but A-Z a-z 0-9 - _ . takes three); this one has \(identifier.utf8.count) bytes")
        }
        let managers = directory.appendingPathComponent("managers").path
        let lockPath = managers + "/" + name + ".lock"
        let fd: Int32
        do throws(Errno) {
            try Sys.makeDirectories(managers)
            fd = try Sys.open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK, mode: 0o600)
        } catch {
            throw HaulError.fileSystem(error, "open the download list lock", path: lockPath)
        }
        let locked: Bool
        do throws(Errno) { locked = try Sys.lockByteOrThrow(fd, at: 0) } catch {
            Sys.close(fd)
            throw HaulError.fileSystem(error, "lock", path: lockPath)
        }
        guard locked else {
            Sys.close(fd)
            throw HaulError(
                .listInUse, "the download list \"\(identifier)\" is in use by another manager (\(lockPath))",
                path: lockPath)
        }
        url = URL(fileURLWithPath: managers + "/" + name + ".json")
        lock = Locked(fd)
    }

    deinit { release() }

    /// Gives the list up (the next manager with this identifier may take it); later saves are dropped.
    func release() {
        writes.withLock { _ in
            lock.withLock { fd in
                if let held = fd { Sys.close(held) }
                fd = nil
            }
        }
    }

    /// How many times the file was written (tests).
    var writeCount: Int { writes.get() }

    /// The longest encoded name: with `.json.unreadable` after it, still under NAME_MAX (255).
    static let longestName = 200

    /// An identifier as a file name: bytes `A-Z a-z 0-9 - _ .` as they are (a first `.` is
    /// encoded), every other byte as `%XX`, so two identifiers never share a file and none
    /// names a path elsewhere. Nil when empty or longer than ``longestName`` once encoded.
    static func fileName(_ identifier: String) -> String? {
        let bytes = Array(identifier.utf8)
        guard !bytes.isEmpty, bytes.count <= longestName else { return nil }
        var name = ""
        for (i, b) in bytes.enumerated() {
            let plain =
                (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D
                || b == 0x5F || (b == 0x2E && i > 0)
            name += plain ? String(UnicodeScalar(b)) : "%" + Hex.string([b], uppercase: true)
        }
        return name.utf8.count <= longestName ? name : nil
    }

    /// Writes `items` (credentials removed from their URLs), replacing the file atomically.
    func save(_ items: [DownloadManager.Item]) {
        let stored = Stored(
            items: items.map {
                StoredItem(
                    id: $0.id, url: ResumeRecord.redacted($0.url), target: $0.target, priority: $0.priority,
                    state: $0.state, fileURL: $0.fileURL, sequence: $0.sequence)
            })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard let data = try? encoder.encode(stored) else { return }
        writes.withLock { count in
            guard lock.get() != nil else { return }  // released: another manager may hold it now
            try? Sys.writeFileAtomically(url.path, Array(data))
            count += 1
        }
    }

    /// The saved items, in the order added (empty when there is no list yet). A list this
    /// manager cannot read (damaged, too large, of a later version) is kept aside as
    /// `<identifier>.json.unreadable` instead of being replaced by the next save.
    func load(needsNetwork: (URL) -> Bool) -> [DownloadManager.Item] {
        // 1 GiB: some three million downloads.
        let bytes: [UInt8]?
        do { bytes = try Sys.readSmallFile(url.path, limit: 1 << 30, followingLinks: false) } catch { bytes = [] }
        guard let bytes else { return [] }  // no list yet
        guard let stored = try? JSONDecoder().decode(Stored.self, from: Data(bytes)), stored.version == 1 else {
            try? Sys.rename(url.path, url.path + ".unreadable")
            return []
        }
        return stored.items.sorted { $0.sequence < $1.sequence }.compactMap { item in
            guard let url = URL(string: item.url) else { return nil }
            return DownloadManager.Item(
                id: item.id, url: url, target: item.target, priority: item.priority, state: item.state,
                fileURL: item.fileURL, sequence: item.sequence, origin: url.originKey, needsNetwork: needsNetwork(url))
        }
    }
}
