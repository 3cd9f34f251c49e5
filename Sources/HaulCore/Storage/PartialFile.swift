import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `<dest>.part` plus its resume record `<dest>.haul`, written in an order that keeps the record
/// honest: data is written, fsync()ed, and only then does an atomically replaced record claim it.
///
/// Unchecked `Sendable`: it passes between the threads of one download, which use it one at a
/// time (positional writes of several ranges at distinct offsets aside); the owner opens,
/// checkpoints and commits it once the writers have stopped.
package final class PartialFile: @unchecked Sendable {
    package let destination: String
    package var partPath: String { destination + ".part" }
    package var recordPath: String { destination + ResumeRecord.fileExtension }

    private var fd: Int32 = -1
    /// The next write position; bytes before it are written (not necessarily durable).
    package private(set) var writtenBytes: Int64 = 0
    /// Bytes the last record claims.
    package private(set) var durableBytes: Int64 = 0
    /// This partial's record is in the ``RecordIndex``.
    private var noted = false

    package init(destination: String) { self.destination = destination }

    deinit { close() }

    /// Creates `directory` and its missing parents; a failure is a ``HaulError`` naming it.
    package static func createDirectory(_ directory: String) throws(HaulError) {
        do { try Sys.makeDirectories(directory) } catch {
            throw .fileSystem(error, "create directory", path: directory)
        }
    }

    /// Makes sure the directory of a named destination is there, before any request: creates it
    /// (and its parents) when `creating`, else fails naming it.
    package static func prepareDirectory(of destination: String, creating: Bool) throws(HaulError) {
        let parent = Sys.parentDirectory(of: destination)
        if creating {
            try createDirectory(parent)
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

    /// Loads the record, if any, and checks the partial file still holds what it claims.
    package func loadRecord() throws(HaulError) -> ResumeRecord? {
        let bytes: [UInt8]?
        do { bytes = try Sys.readSmallFile(recordPath) } catch { throw .fileSystem(error, "read", path: recordPath) }
        guard let bytes, let record = ResumeRecord.decode(bytes) else { return nil }
        let partSize: Int64?
        do { partSize = try Sys.fileSize(partPath) } catch { throw .fileSystem(error, "stat", path: partPath) }
        // A partial that is gone or shorter than the record says cannot be trusted.
        guard let partSize, partSize >= record.contiguousBytes else { return nil }
        return record
    }

    /// ``loadRecord()``, refusing a partial that belongs to another URL (it is never overwritten
    /// without `--no-continue`).
    package func loadRecord(of url: URL) throws(HaulError) -> ResumeRecord? {
        guard let record = try loadRecord() else { return nil }
        guard record.url == ResumeRecord.redacted(url) else {
            throw HaulError(
                .destinationExists,
                "\(partPath) is a partial download of \(record.url); use --no-continue to discard it",
                path: destination)
        }
        return record
    }

    /// Opens the partial for writing at `offset`, dropping anything after it (bytes past the last
    /// checkpoint may not have reached the disk).
    package func open(at offset: Int64) throws(HaulError) {
        // A fresh partial is created empty: no truncate (on ext4 a truncate to zero also makes
        // close() start writeback, meant for programs that rewrite a file in place).
        if fd < 0, offset == 0, let created = try? Sys.open(partPath, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW) {
            fd = created
            writtenBytes = 0
            durableBytes = 0
            return
        }
        if fd < 0 {
            // O_NOFOLLOW: a symlink planted at the partial's name must not redirect our writes.
            do { fd = try Sys.open(partPath, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o644) } catch {
                throw .fileSystem(error, "create", path: partPath)
            }
        }
        do { try Sys.ftruncate(fd, offset) } catch { throw .fileSystem(error, "truncate", path: partPath) }
        writtenBytes = offset
        durableBytes = offset
    }

    /// Opens the partial for positional writes of a file of `total` bytes (segmented downloads),
    /// keeping what is there and reserving the space: fallocate where the file system supports it
    /// (a full disk shows up now, not halfway), else a sparse ftruncate.
    package func openPreallocated(total: Int64) throws(HaulError) {
        if fd < 0 {
            do { fd = try Sys.open(partPath, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o644) } catch {
                throw .fileSystem(error, "create", path: partPath)
            }
        }
        do { try Sys.preallocate(fd, total) } catch {
            // An empty partial holds nothing to resume: not left behind (a full disk, a size
            // the file system cannot take).
            if (try? Sys.fileSize(partPath)) == 0 {
                close()
                try? Sys.unlink(partPath)
            }
            throw .fileSystem(error, "reserve space for", path: partPath)
        }
    }

    /// Whether the partial holds exactly `data` at `offset` (a resume without a validator
    /// compares the bytes before its offset with the server's).
    package func holds(_ data: UnsafeRawBufferPointer, at offset: Int64) throws(HaulError) -> Bool {
        let mine = UnsafeMutableRawBufferPointer.allocate(byteCount: data.count, alignment: 8)
        defer { mine.deallocate() }
        let n: Int
        do { n = try Sys.pread(fd, into: mine, at: offset) } catch { throw .fileSystem(error, "read", path: partPath) }
        return n == data.count && memcmp(mine.baseAddress!, data.baseAddress!, n) == 0
    }

    /// Writes at `offset` (segmented downloads; several ranges at once).
    package func write(_ data: UnsafeRawBufferPointer, at offset: Int64) throws(HaulError) {
        do { try Sys.pwriteAll(fd, data, at: offset, path: partPath) } catch {
            throw .fileSystem(error, "write", path: partPath)
        }
    }

    /// Appends at the write position.
    package func write(_ data: UnsafeRawBufferPointer) throws(HaulError) {
        do { try Sys.pwriteAll(fd, data, at: writtenBytes, path: partPath) } catch {
            throw .fileSystem(error, "write", path: partPath)
        }
        writtenBytes += Int64(data.count)
    }

    /// fsync()s the data, then atomically replaces the record so it claims exactly the synced bytes.
    package func checkpoint(_ record: ResumeRecord) throws(HaulError) {
        if fd >= 0 {
            do { try Sys.fsync(fd, path: partPath) } catch { throw .fileSystem(error, "sync", path: partPath) }
        }
        do { try Sys.writeFileAtomically(recordPath, record.encoded()) } catch {
            throw .fileSystem(error, "write", path: recordPath)
        }
        if !noted {
            RecordIndex.shared.noted(url: record.url, destination: destination)
            noted = true
        }
        durableBytes = record.contiguousBytes
    }

    /// Bytes given back by ``releaseTail(_:)`` after a full disk: room for the record.
    package static let diskFullHeadroom: Int64 = 256 * 1024

    /// Drops up to `bytes` from the end of what was written (never below the durable bytes),
    /// freeing space on a full disk. Best effort.
    package func releaseTail(_ bytes: Int64) {
        guard fd >= 0 else { return }
        let keep = max(durableBytes, writtenBytes - bytes)
        if (try? Sys.ftruncate(fd, keep)) != nil { writtenBytes = keep }
    }

    package func close() {
        if fd >= 0 { Sys.close(fd) }
        fd = -1
    }

    /// Removes the partial and its record.
    package func discard() {
        close()
        try? Sys.unlink(partPath)
        try? Sys.unlink(recordPath)
        RecordIndex.shared.removed(destination: destination)
        noted = false
        writtenBytes = 0
        durableBytes = 0
    }

    /// Syncs (in a group with other files finishing now) and renames the partial into place on
    /// the ``FileWorker``, then removes the record. A crash in between leaves the finished file
    /// and a stale record, which the next run finds complete and removes.
    ///
    /// With `sha256`, the file is first checked against it (hex, any case) on a Dispatch worker:
    /// a mismatch deletes it and its record and throws ``HaulError/Code/checksumMismatch``.
    package func commit(
        replacing: Bool, verifying sha256: String? = nil, on worker: FileWorker = .shared
    ) async throws(HaulError) {
        if let sha256 {
            try await Sys.offload { [self] () throws(HaulError) in try verify(sha256: sha256) }
        }
        try await worker.perform { [self] () throws(HaulError) in try committing(replacing: replacing, then: ()) }
    }

    /// The commit as a step of a job already on the ``FileWorker`` (which wrote the file, say):
    /// the checksum check, if any (on the worker: for small files), the sync, then the rename,
    /// then `value`.
    package func committing<T: Sendable>(
        replacing: Bool, verifying sha256: String? = nil, then value: T
    ) throws(HaulError) -> FileWorker.Step<T> {
        if let sha256 { try verify(sha256: sha256) }
        guard fd >= 0 else {  // nothing written here (already complete on disk)
            try putInPlace(replacing: replacing)
            return .done(value)
        }
        return .sync(fd: fd, path: partPath) { [self] error throws(HaulError) in
            if let error { throw .fileSystem(error, "sync", path: partPath) }
            try putInPlace(replacing: replacing)
            return value
        }
    }

    private func putInPlace(replacing: Bool) throws(HaulError) {
        close()
        do {
            if replacing {
                try Sys.rename(partPath, destination)
            } else {
                try Sys.renameNoReplace(partPath, destination)
            }
        } catch  where error == .fileExists {
            throw HaulError(
                .destinationExists, "\(destination) appeared during the download; the data is in \(partPath)",
                path: destination)
        } catch {
            throw .fileSystem(error, "rename into", path: destination)
        }
        // No directory fsync here: the data was synced before the rename, so whichever name
        // survives a power loss holds complete bytes, and losing the rename only brings back the
        // partial (with its record, if it had one): an older consistent state. That halves the
        // syncs of a thousand small downloads.
        try? Sys.unlink(recordPath)
        RecordIndex.shared.removed(destination: destination)
    }

    /// A file at `path` with the server's size and no record is taken as the download already
    /// done; with an expected SHA-256 (hex, any case) only if it matches, checked on a Dispatch
    /// worker. A mismatch throws ``HaulError/Code/checksumMismatch`` and leaves the file alone:
    /// it was there before, not ours to delete.
    package static func confirmComplete(
        _ path: String, bytes: Int64, sha256: String?
    ) async throws(HaulError) -> DownloadOutcome {
        if let expected = sha256?.lowercased() {
            let actual = try await Sys.offload { () throws(HaulError) -> String in
                do throws(Errno) { return try SHA256.hexDigest(ofFile: path) } catch {
                    throw .fileSystem(error, "read", path: path)
                }
            }
            guard actual == expected else {
                throw HaulError(
                    .checksumMismatch,
                    "\(path) exists with the server's size, but its SHA-256 is \(actual), expected \(expected);"
                        + " use --overwrite to replace it", path: path)
            }
        }
        return DownloadOutcome(path: path, bytes: bytes, alreadyComplete: true)
    }

    /// Checks the finished partial against an expected SHA-256 (hex, any case); a mismatch
    /// deletes it (and its record) and throws ``HaulError/Code/checksumMismatch``.
    private func verify(sha256 expected: String) throws(HaulError) {
        let expected = expected.lowercased()
        // The file stays open: the commit that follows must still sync it.
        let actual: String
        do { actual = try SHA256.hexDigest(ofFile: partPath) } catch {
            throw .fileSystem(error, "read", path: partPath)
        }
        guard actual == expected else {
            discard()
            throw HaulError(
                .checksumMismatch, "SHA-256 of \(destination) is \(actual), expected \(expected)", path: destination)
        }
    }
}
