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

/// The one owner of a download's place on disk. Both engines (one connection, ranges) and the
/// public API (``DownloadTask``'s resume data and cancel) ask it, and only it, about a
/// destination: the side-file names, the claim (``DestinationClaims``), the record to resume
/// from, the rule for a file already in place, and this URL's own partial. ``PartialFile``
/// does the reading and writing of the partial and its record at the names this type gives;
/// nothing outside `Storage/` spells a `.part` or `.haul` name.
package struct DownloadStore: Sendable {
    /// The download's URL (records are keyed by its redacted form).
    package let url: URL
    /// Who holds the claims: the download, and the engines it hands over to.
    package let owner: DestinationClaims.Owner
    /// Whether a partial of this URL is continued (false: `--no-continue`, it is discarded).
    package let resume: Bool
    /// Whether files haul cannot vouch for, and a file already in place, may be replaced.
    package let overwrite: Bool

    package init(url: URL, owner: DestinationClaims.Owner, resume: Bool, overwrite: Bool) {
        self.url = url
        self.owner = owner
        self.resume = resume
        self.overwrite = overwrite
    }

    /// The partial's name for `destination` (bytes are written there until the commit).
    package static func partialPath(of destination: String) -> String { destination + PartialFile.partSuffix }

    /// A destination claimed for this download, with what was found there.
    package struct Place: Sendable {
        package let destination: String
        /// The record of this URL's partial to resume from; nil: start afresh, with nothing left
        /// at the side-file names.
        package let record: ResumeRecord?
        /// The size of the regular file already at the destination, if any.
        package let existingSize: Int64?
        fileprivate let overwrite: Bool
        /// Whether the file at the destination may be replaced: `overwrite`, or a revalidated
        /// download's file, which a new version replaces (`-N`).
        package let replacesFile: Bool

        /// A new handle on the partial and its record at this destination, to open and write.
        package func makePartial() -> PartialFile { PartialFile(destination: destination) }

        /// The rule for a file already in place when no partial is continued: one of the
        /// server's size is taken as the download, done (its size is returned; a checksum asked
        /// for is checked by ``DownloadStore/confirmComplete(_:bytes:verifying:)``), another size is
        /// refused. Nil, download: nothing is there, or `overwrite`.
        package func fileInPlace(serverSize: Int64?) throws(HaulError) -> Int64? {
            guard !replacesFile, let size = existingSize else { return nil }
            if let serverSize, serverSize == size { return size }
            throw .destinationExists(destination, size: size, serverSize: serverSize)
        }
    }

    /// Claims `destination` for this download and judges what is there: a directory, device or
    /// FIFO is refused; so are side files haul cannot prove it wrote, and another URL's partial,
    /// unless `overwrite` (or, for another URL's, `resume` false); haul's own leftovers that
    /// cannot be continued are removed. `replacingFile`: a regular file there (not a symbolic
    /// link: what it points at is not the download's) may be replaced by the download (a
    /// revalidated one's), its side files judged as ever.
    package func claim(_ destination: String, replacingFile: Bool = false) throws(HaulError) -> Place {
        try DestinationClaims.shared.claim(destination, for: owner)
        return try judge(destination, replacingFile: replacingFile)
    }

    /// Claims `destination` for a new whole file that is linked there without replacing anything
    /// (the express way), and says whether it may go ahead: nothing is at the name, no side file
    /// beside it, and the file would not replace one. When the destination's directory, as the
    /// ``RecordIndex`` listed it in this process, held none of those names and this process has
    /// written none of them since, they are not looked at again: three look-ups a file that find
    /// nothing. A file another program makes at the name after the listing is found by the link,
    /// which fails on a name taken; side files it makes are not touched by the save (a partial
    /// left there after the listing is then beside a finished file, which its own download will
    /// not replace). Only when partials are continued (the listing is of their records) and
    /// nothing is to be replaced (`overwrite` judges every name).
    package func claimForWholeFile(_ destination: String) throws(HaulError) -> Bool {
        try DestinationClaims.shared.claim(destination, for: owner)
        if resume, !overwrite, RecordIndex.shared.listedFree(destination) { return true }
        let place = try judge(destination, replacingFile: false)
        return place.record == nil && !place.replacesFile && place.existingSize == nil
    }

    /// What is at a claimed `destination`, as ``claim(_:replacingFile:)`` judges it.
    private func judge(_ destination: String, replacingFile: Bool) throws(HaulError) -> Place {
        if replacingFile, !overwrite, Sys.isSymbolicLink(destination) {
            // A revalidated download asks about a regular file only: a link's target, judged by
            // its size alone, could be kept stale as "already complete".
            throw HaulError(
                .destinationExists, "\(destination) is a symbolic link; use --overwrite to replace it",
                path: destination)
        }
        let existingSize = try PartialFile.checkDestination(destination, overwrite: overwrite)
        let record = try Self.prepareSideFiles(
            of: PartialFile(destination: destination), for: url, resume: resume, overwrite: overwrite)
        let replaceable = replacingFile && ((try? Sys.status(destination)) ?? nil)?.isRegular == true
        return Place(
            destination: destination, record: record, existingSize: existingSize, overwrite: overwrite,
            replacesFile: overwrite || replaceable)
    }

    /// Makes the side files of `partial` ready for a download of `url`: the record to resume from (nil: start
    /// afresh, nothing left at the side-file names). Another URL's partial is refused unless
    /// `resume` is false (`--no-continue`); files haul cannot prove are its own are refused
    /// unless `overwrite`; haul's own that cannot be resumed, or any with `resume` false, are
    /// removed.
    package static func prepareSideFiles(
        of partial: PartialFile, for url: URL, resume: Bool, overwrite: Bool
    ) throws(HaulError) -> ResumeRecord? {
        switch try partial.inspect() {
        case .nothing: return nil
        case .staleRecord:
            try? Sys.unlink(partial.recordPath)
            return nil
        case .damaged:
            partial.discard()
            return nil
        case .foreign(let reason):
            guard overwrite else {
                throw HaulError(
                    .destinationExists, "\(reason); remove it or use --overwrite to replace it",
                    path: partial.destination)
            }
            partial.discard()
            return nil
        case .partial(let record):
            if !resume {
                partial.discard()
                return nil
            }
            guard record.url == ResumeRecord.redacted(url) else {
                throw HaulError(
                    .destinationExists,
                    "\(partial.partPath) is a partial download of \(Self.printable(record.url)); use --no-continue to discard it",
                    path: partial.destination)
            }
            return record
        }
    }

    /// `text` without control characters (a record's URL is read from disk: no terminal escape
    /// or line break reaches a message).
    private static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }))
    }

    /// Makes the target's directory ready before any request: a named file's is checked (or
    /// created when `creatingDirectories`) and its name refused if it is a side file's; a
    /// directory to download into is created if missing.
    package func prepare(_ target: DownloadTarget, creatingDirectories: Bool) throws(HaulError) {
        switch target {
        case .file(let path): try PartialFile.prepareDirectory(of: path, creating: creatingDirectories)
        case .directory(let dir): try Self.createDirectory(dir)
        }
    }

    /// Creates `directory` and its missing parents; a failure is a ``HaulError`` naming it.
    package static func createDirectory(_ directory: String) throws(HaulError) {
        do { try Sys.makeDirectories(directory) } catch {
            throw .fileSystem(error, "create directory", path: directory)
        }
    }

    /// The destination known before any request, its directory prepared: a named file, or in a
    /// directory the one where a partial of this URL waits; nil when the answer is to name it.
    package func knownDestination(
        of target: DownloadTarget, creatingDirectories: Bool
    ) throws(HaulError) -> String? {
        try prepare(target, creatingDirectories: creatingDirectories)
        switch target {
        case .file(let path): return path
        case .directory(let dir): return partialDestination(in: dir)
        }
    }

    /// In `directory`, the destination whose partial belongs to this URL (nil when not resuming).
    package func partialDestination(in directory: String) -> String? {
        guard resume else { return nil }
        return RecordIndex.shared.destination(of: ResumeRecord.redacted(url), in: directory)
    }

    /// The record of this URL's partial waiting at the target (a named file, or in a directory
    /// the one the record index knows), as a download would judge it; nil when not resuming.
    /// Reads only: nothing is claimed.
    package func waitingRecord(at target: DownloadTarget) -> ResumeRecord? {
        guard resume else { return nil }
        let destination: String
        switch target {
        case .file(let path): destination = path
        case .directory(let dir):
            guard let found = partialDestination(in: dir) else { return nil }
            destination = found
        }
        return Self.ownPartial(of: url, at: destination)?.record
    }

    /// Removes this URL's partial and record at `destination` (or of the partial at that path),
    /// if haul wrote them: an ephemeral session's cancelled download leaves nothing. Anything
    /// else there is left alone.
    package static func discardOwnPartial(of url: URL, at path: String) {
        let suffix = PartialFile.partSuffix
        let destination = path.hasSuffix(suffix) ? String(path.dropLast(suffix.count)) : path
        ownPartial(of: url, at: destination)?.file.discard()
    }

    /// This URL's partial at `destination`, as haul wrote it, with the record a rerun in this
    /// boot would continue from; nil when there is none (nothing, another URL's, or files haul
    /// cannot vouch for).
    private static func ownPartial(of url: URL, at destination: String) -> (file: PartialFile, record: ResumeRecord)? {
        let partial = PartialFile(destination: destination)
        guard case .partial(let record)? = try? partial.inspect(), record.url == ResumeRecord.redacted(url) else {
            return nil
        }
        return (partial, record)
    }

    /// What resume data keeps of this URL's partial at `destination`: its record with only the
    /// synced ranges (resume data may outlive the boot); nil when there is no such partial.
    package static func resumeRecord(of url: URL, at destination: String) -> ResumeRecord? {
        ownPartial(of: url, at: destination)?.file.storedRecord?.trusted(onBoot: nil)
    }

    /// Removes this URL's partial and record at `destination`, and nothing else: files at those
    /// names that haul did not write for this URL are left alone, and so is a partial another
    /// download (of this process or another) is writing: it is claimed for the time it takes.
    package static func discardPartial(of url: URL, at destination: String) {
        let owner = DestinationClaims.Owner()
        guard (try? DestinationClaims.shared.claim(destination, for: owner)) != nil else { return }
        defer { DestinationClaims.shared.releaseAll(of: owner) }
        ownPartial(of: url, at: destination)?.file.discard()
    }

    /// Gives the partial at `destination` back its record from resume data, when its own record
    /// is gone and it is still the file the record was made from (``PartialFile/adopt(_:)``).
    package static func restore(_ record: ResumeRecord, at destination: String) {
        PartialFile(destination: Sys.lexicallyNormalized(destination)).adopt(record)
    }

    /// A file at `path` with the server's size and no record is taken as the download already
    /// done; with expected digests only if it has them, checked on a Dispatch worker. A mismatch
    /// throws ``HaulError/Code/checksumMismatch`` and leaves the file alone: it was there
    /// before, not ours to delete.
    package static func confirmComplete(
        _ path: String, bytes: Int64, verifying expected: [Checksum], notModified: Bool = false
    ) async throws(HaulError) -> DownloadOutcome {
        if !expected.isEmpty {
            let found = try await Sys.offload { () throws(HaulError) -> (Checksum, actual: [UInt8])? in
                do throws(Errno) {
                    let fd = try Sys.open(path, O_RDONLY)
                    defer { Sys.close(fd) }
                    return try Verification(expected).mismatch(readingFile: fd)
                } catch {
                    throw .fileSystem(error, "read", path: path)
                }
            }
            if let (checksum, actual) = found {
                throw HaulError(
                    .checksumMismatch,
                    "\(path) exists "
                        + (notModified ? "and the server says it is not modified" : "with the server's size")
                        + ", but its " + [Checksum].mismatchMessage(checksum, actual: actual, of: nil)
                        + "; use --overwrite to replace it", path: path)
            }
        }
        return DownloadOutcome(path: path, bytes: bytes, alreadyComplete: true, notModified: notModified)
    }
}
