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

/// The checks on a destination and its directory before any partial exists, and what
/// ``PartialFile/inspect()`` can find there.
extension PartialFile {
    /// Makes sure the directory of a named destination is there, before any request: creates it
    /// (and its parents) when `creating`, else fails naming it.
    /// A destination whose name ends like a side file (``SafeFileName/isSideFileName(_:)``) is
    /// refused: its partial and record would be another download's.
    package static func prepareDirectory(of destination: String, creating: Bool) throws(HaulError) {
        let name = Sys.components(destination).last { !$0.isEmpty } ?? destination
        if SafeFileName.isSideFileName(name) {
            throw HaulError(
                .usage,
                "\(destination): a name ending in .part, .haul or .haul.tmp is a download's side file; choose another",
                path: destination)
        }
        // Its record's temporary, the longest side-file name, must fit a 255-byte file name.
        let longest = SafeFileName.sideFileSuffixes.map(\.utf8.count).max() ?? 0
        if name.utf8.count + longest > 255 {
            throw HaulError(
                .usage, "\(destination): the name is longer than \(255 - longest) bytes (its side files would not fit)",
                path: destination)
        }
        let parent = Sys.parentDirectory(of: destination)
        if creating {
            try DownloadStore.createDirectory(parent)
        } else if !Sys.isDirectory(parent) {
            throw HaulError(.fileSystem, "directory \(parent) does not exist", errno: ENOENT, path: parent)
        }
    }

    /// Refuses a destination that is a directory, a device, a FIFO or a socket, `overwrite` or
    /// not: the final rename cannot replace a directory (it would fail after the whole transfer)
    /// and must not replace a device node with a regular file. Returns the size of the regular
    /// file there, if any (the one look a download takes at its destination before the commit).
    /// A symbolic link to nothing holds the name: refused unless `overwrite` (then the rename
    /// replaces the link; its target is never created).
    @discardableResult
    package static func checkDestination(_ destination: String, overwrite: Bool) throws(HaulError) -> Int64? {
        let kind: Sys.FileKind?
        do { kind = try Sys.fileKind(destination) } catch { throw .fileSystem(error, "inspect", path: destination) }
        switch kind {
        case nil: return nil
        case .danglingLink:
            if overwrite { return nil }
            throw HaulError(
                .destinationExists,
                "\(destination) exists (a symbolic link to a missing file); use --overwrite to replace it",
                path: destination)
        case .regular(let size): return size
        case .directory:
            throw HaulError(.fileSystem, "\(destination) is a directory", errno: EISDIR, path: destination)
        case .other:
            throw HaulError(
                .fileSystem, "\(destination) is not a regular file (a device, FIFO or socket)", errno: EEXIST,
                path: destination)
        }
    }

    /// What is at the side-file names, as far as haul can vouch for it.
    package enum Leftover: Equatable, Sendable {
        /// No partial and no record.
        case nothing
        /// A partial with the record it was written with (bound by device and inode).
        case partial(ResumeRecord)
        /// A record bound to the file now at the destination: a crash came between the rename
        /// into place and the record's removal.
        case staleRecord
        /// Haul's own partial that cannot be resumed (shorter than its record says, or a
        /// validator that could not be sent back): to restart.
        case damaged
        /// Files haul cannot prove it wrote: never deleted, truncated or trusted without
        /// `--overwrite`. The reason names the file.
        case foreign(String)
    }

    /// How much disk space a segmented partial reserves past what is written, in all
    /// (``reserve(ahead:)``).
    package static let reservedAhead: Int64 = 64 << 20

    /// Bytes given back by ``releaseTail(_:)`` after a full disk: room for the record.
    package static let diskFullHeadroom: Int64 = 256 * 1024
}
