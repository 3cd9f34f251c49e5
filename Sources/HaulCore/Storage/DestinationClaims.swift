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

/// Which download is writing which file: one at a time per destination, in this process and
/// across the user's haul processes.
///
/// Two downloads that resolve to the same file (the same URL listed twice in a `-j` run, two URLs
/// with the same name in one directory, two tasks given one path, a cron job that overlaps the
/// previous run) would otherwise share its `.part` and record: each would truncate, discard or
/// rename what the other wrote, and the file that ended up in place could hold both answers. The
/// second is refused with ``HaulError/Code/destinationInUse`` before it touches anything; the
/// file is free again when the first download's engine returns (done, failed, cancelled or
/// paused), or its process ends, however it ends.
///
/// In this process a table says who holds what. Across processes each claim also locks one byte
/// of a per-user lock file (`$XDG_RUNTIME_DIR/haul/destinations.lock`, else
/// `/tmp/haul-<uid>/destinations.lock`), at an offset from the SHA-256 of the path: an
/// open-file-description lock, which the kernel drops when the process dies (kill -9 included),
/// so nothing is left to clean up. Two system calls per download. When no private lock file can
/// be had, only this process is covered.
///
/// A claim belongs to an ``Owner``: the engine that took it, and the engines it hands the same
/// download to (a segmented download falling back to one connection), which claim again freely.
/// A path is known by its directory's device and inode number plus its name, so two spellings
/// of one file agree: `a/./b`, `a/x/../b`, a symlinked or bind-mounted directory. A directory
/// that does not exist yet (the open would fail anyway) falls back to the lexically normalised
/// path. Not covered: two users (each has a lock file of their own), hard links.
package final class DestinationClaims: Sendable {
    /// The claims of this process.
    package static let shared = DestinationClaims()

    /// Who holds a claim: one download (its identity is all that counts).
    package final class Owner: Sendable {
        package init() {}
    }

    private struct Table {
        /// The files being written now, by whom, and the offset of their byte in the lock file
        /// (a SHA-256 each: worked out once).
        var holders: [String: (owner: ObjectIdentifier, offset: Int64)] = [:]
        /// Files saved by downloads that keep their claim (``keep(_:savedFrom:)``), with the URL
        /// each came from. Apart from `holders`, so that a release looks only at what is in flight.
        var kept: [String: String] = [:]
    }

    private let table = Locked(Table())

    package init() {}

    /// Claims `path` for `owner`; throws ``HaulError/Code/destinationInUse`` when another owner
    /// or another process holds it, or a download of this process saved it and kept it.
    package func claim(_ path: String, for owner: Owner) throws(HaulError) {
        let key = Self.key(path)
        let me = ObjectIdentifier(owner)
        enum Outcome {
            case claimed, held
            case saved(from: String)
            case heldElsewhere
        }
        // The byte lock is taken and dropped under the table's lock: the lock file's locks belong
        // to this process's one descriptor, so a release racing a new claim of the same path
        // could otherwise drop the new claim's lock.
        let outcome = table.withLock { t -> Outcome in
            if let url = t.kept[key] { return .saved(from: url) }
            if let holder = t.holders[key] { return holder.owner == me ? .claimed : .held }
            let offset = Self.offset(key)
            if let fd = Self.lockFile, !Sys.lockByte(fd, at: offset) { return .heldElsewhere }
            t.holders[key] = (me, offset)
            return .claimed
        }
        switch outcome {
        case .claimed: return
        case .saved(let url):
            throw HaulError(
                .destinationInUse, "\(path) was saved from \(url) earlier in this run; give this download its own name",
                path: path)
        case .held:
            throw HaulError(
                .destinationInUse, "\(path) is being downloaded by another download in this process", path: path)
        case .heldElsewhere:
            throw HaulError(.destinationInUse, "\(path) is being downloaded by another haul process", path: path)
        }
    }

    /// Keeps every path `owner` claimed for the rest of the process, noting the URL (without
    /// credentials) its file was saved from: a later download that resolves to one of them is
    /// refused, naming that URL, rather than finding it "already complete" or replacing it. For
    /// `haul get`, whose run is its process. The cross-process lock is released as usual: other
    /// processes may write the file once it is saved, and a run of a thousand files
    /// does not hold a thousand locks (the kernel walks a file's locks on every `F_OFD_SETLK`).
    package func keep(_ owner: Owner, savedFrom url: URL) {
        release(owner, keepingAsSavedFrom: ResumeRecord.redacted(url))
    }

    /// Frees every path `owner` claimed (the table holds only the files being written now).
    package func releaseAll(of owner: Owner) { release(owner, keepingAsSavedFrom: nil) }

    /// Drops `owner`'s claims and their cross-process locks; with a URL, notes each path as kept.
    private func release(_ owner: Owner, keepingAsSavedFrom url: String?) {
        let me = ObjectIdentifier(owner)
        table.withLock { t in
            for (key, holder) in t.holders where holder.owner == me {
                t.holders[key] = nil
                if let url { t.kept[key] = url }
                if let fd = Self.lockFile { Sys.unlockByte(fd, at: holder.offset) }
            }
        }
    }

    /// Whether some download of this process holds `path` (tests).
    package func isClaimed(_ path: String) -> Bool { table.withLock { $0.holders[Self.key(path)] != nil } }

    /// `device:inode/name` of the path's directory and its last component: one `stat`. A
    /// directory that is not there gives the normalised path itself.
    private static func key(_ path: String) -> String {
        let normal = Sys.lexicallyNormalized(path)
        let (directory, name) = Sys.split(normal)
        guard let (device, inode) = Sys.fileIdentity(directory) else { return normal }
        return "\(device):\(inode)/\(name)"
    }

    /// Where a path's byte lies in the lock file: 62 bits of its SHA-256.
    static func offset(_ key: String) -> Int64 {
        var hasher = SHA256()
        hasher.update(key.utf8)
        let digest = hasher.finalize()
        let bits = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int64(bits & 0x3FFF_FFFF_FFFF_FFFF)
    }

    /// The per-user lock file, opened once for the process (close-on-exec); nil when no private
    /// directory for it can be had.
    private static let lockFile: Int32? = {
        let runtime = Environment.process["XDG_RUNTIME_DIR"].flatMap { $0.hasPrefix("/") ? $0 : nil }
        let directory =
            runtime.flatMap { Sys.privateDirectory($0 + "/haul") } ?? Sys.privateDirectory("/tmp/haul-\(getuid())")
        guard let directory else { return nil }
        return try? Sys.open(directory + "/destinations.lock", O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600)
    }()
}
