import Foundation

/// Which download of this process is writing which file: one at a time per destination.
///
/// Two downloads that resolve to the same file (the same URL listed twice in a `-j` run, two URLs
/// with the same name in one directory, two tasks given one path) would otherwise share its
/// `.part` and record: each would truncate, discard or rename what the other wrote, and the file
/// that ended up in place could hold both answers. The second is refused with
/// ``HaulError/Code/destinationInUse`` before it touches anything; the file is free again when
/// the first download's engine returns (done, failed, cancelled or paused).
///
/// A claim belongs to an ``Owner``: the engine that took it, and the engines it hands the same
/// download to (a segmented download falling back to one connection), which claim again freely.
/// Paths are compared after lexical normalisation (`a/./b`, `a/x/../b`), without resolving
/// symlinks. Other processes are not seen (see docs/resume.md).
package final class DestinationClaims: Sendable {
    /// The claims of this process.
    package static let shared = DestinationClaims()

    /// One download's claims.
    package final class Owner: Sendable {
        fileprivate let paths = Locked<Set<String>>([])
        package init() {}
    }

    private let holders = Locked<[String: ObjectIdentifier]>([:])

    package init() {}

    /// Claims `path` for `owner`; throws ``HaulError/Code/destinationInUse`` when another owner
    /// holds it.
    package func claim(_ path: String, for owner: Owner) throws(HaulError) {
        let key = Self.key(path)
        let me = ObjectIdentifier(owner)
        let taken = holders.withLock { holders -> Bool in
            if let holder = holders[key], holder != me { return true }
            holders[key] = me
            return false
        }
        if taken {
            throw HaulError(
                .destinationInUse, "\(path) is being downloaded by another download in this process", path: path)
        }
        owner.paths.withLock { _ = $0.insert(key) }
    }

    /// Frees every path `owner` claimed.
    package func releaseAll(of owner: Owner) {
        let paths = owner.paths.withLock { paths -> Set<String> in
            defer { paths = [] }
            return paths
        }
        guard !paths.isEmpty else { return }
        let me = ObjectIdentifier(owner)
        holders.withLock { holders in
            for key in paths where holders[key] == me { holders[key] = nil }
        }
    }

    /// Whether some download holds `path` (tests).
    package func isClaimed(_ path: String) -> Bool { holders.withLock { $0[Self.key(path)] != nil } }

    /// Lexical only: no system call (`URL(fileURLWithPath:)` would stat the path).
    private static func key(_ path: String) -> String {
        URL(filePath: path, directoryHint: .notDirectory).standardized.path(percentEncoded: false)
    }
}
