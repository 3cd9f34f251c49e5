import Dispatch

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

/// `<dest>.part` plus its resume record `<dest>.haul`, written in an order that keeps the record
/// honest: data is written, fsync()ed, and only then does an atomically replaced record claim it
/// as synced; in between, notes claim what was written, for a rerun in the same boot only.
///
/// Unchecked `Sendable`: writers at distinct offsets, checkpoints and notes (under `recordLock`)
/// share it; the owner opens it first, and reads its counters and commits it once no writer runs.
package final class PartialFile: @unchecked Sendable {
    package let destination: String
    package var partPath: String { destination + Self.partSuffix }
    /// What the partial's name adds to the destination's.
    static let partSuffix = ".part"
    package var recordPath: String { destination + ResumeRecord.fileExtension }

    private var fd: Int32 = -1
    /// The next write position; bytes before it are written (not necessarily durable).
    package private(set) var writtenBytes: Int64 = 0
    /// Bytes the last record claims.
    package private(set) var durableBytes: Int64 = 0
    /// This partial's record is in the ``RecordIndex``.
    private var noted = false
    /// The file the partial is: found bound to its record by ``inspect()``, or created here.
    package private(set) var boundIdentity: ResumeRecord.FileIdentity?
    /// Held while a record is written: checkpoints (on a worker) and notes (on the notes queue)
    /// share the record's temporary. One per destination in the process, not per object: a retry's
    /// new object and an old one's queued note, or a task's discard, write the same files.
    private let recordLock: Locked<Void>
    /// The last record a checkpoint wrote (claiming synced bytes only), which notes extend.
    private var lastCheckpointed: ResumeRecord?
    /// The ranges the last note claimed as written: a checkpoint keeps claiming them.
    private var lastNoted: [ByteRange] = []
    /// The mount the partial is reached through (``ResumeRecord/mountID``); under `recordLock`.
    private var boundMount: UInt64?

    package init(destination: String) {
        self.destination = destination
        var hasher = Hasher()
        hasher.combine(Sys.lexicallyNormalized(destination))
        recordLock = Self.recordLocks[Int(UInt(bitPattern: hasher.finalize()) % UInt(Self.recordLocks.count))]
    }

    /// Record locks, one chosen by the destination's normalized path: every object of one
    /// destination takes the same one (two destinations may share one; no code holds two).
    private static let recordLocks = (0..<64).map { _ in Locked<Void>() }

    /// The record on disk as this object last saw it, synced and written ranges apart: read by
    /// ``inspect()`` when it found the partial bound to it, or written by a checkpoint since.
    package var storedRecord: ResumeRecord? { recordLock.withLock { lastCheckpointed } }

    /// Whether the file at the partial's name is still `bound`: not removed (a discard or
    /// commit, by this object or another) or replaced (a restart's new partial).
    private func stillAt(_ bound: ResumeRecord.FileIdentity?) -> Bool {
        guard let bound, let status = (try? Sys.status(partPath)) ?? nil else { return false }
        return bound.isSame(as: status)
    }

    deinit { close() }

    /// Looks at the partial, its record and the destination without changing anything.
    package func inspect() throws(HaulError) -> Leftover {
        let read: (bytes: [UInt8], status: Sys.FileStatus)?
        do { read = try Sys.readSmallFileAndStatus(recordPath, followingLinks: false) } catch
            where error.rawValue == ELOOP
        {
            return .foreign("\(recordPath) is a symbolic link")
        } catch {
            throw .fileSystem(error, "read", path: recordPath)
        }
        let part: Sys.FileStatus?
        do { part = try Sys.status(partPath) } catch { throw .fileSystem(error, "inspect", path: partPath) }
        guard let read else {
            guard let part else { return .nothing }
            let kind = part.isRegular ? "" : " (not a regular file)"
            return .foreign("\(partPath) exists\(kind) without a resume record")
        }
        guard let stored = ResumeRecord.decode(read.bytes), let bound = stored.partial else {
            return .foreign("\(recordPath) is not a resume record this version of haul wrote")
        }
        // What a rerun in this boot may trust, as long as the partial holds it (a tail given back
        // on a full disk, or a cut before a restart's record, can leave a note claiming more):
        // else only what was synced.
        var record = stored.trusted(onBoot: BootID.current, mount: part?.mount)
        if let part, !record.fits(size: part.size) { record = stored.trusted(onBoot: nil) }
        guard let part else {
            let final = try? Sys.status(destination)
            if let final, bound.isSame(as: final) { return .staleRecord }
            return .foreign("\(recordPath) is left without its partial file")
        }
        guard part.isRegular, part.links == 1, bound.isSame(as: part) else {
            return .foreign("\(partPath) is not the file its resume record was written with")
        }
        // In a directory others can write (a sticky /tmp), a partial and record planted by another
        // user could be bound to each other: both must be this user's and writable by no one else
        // (the record's status is of the descriptor its bytes were read from, the partial's of
        // the one statx that gave its identity).
        guard part.isOwnAndPrivate, read.status.isOwnAndPrivate else {
            return .foreign("\(partPath) or its record belongs to another user or is writable by others")
        }
        guard record.fits(size: part.size), record.hasSendableValidators else { return .damaged }
        boundIdentity = bound
        // Notes of a resumed download extend the record as it is on disk (its synced ranges).
        recordLock.withLock {
            lastCheckpointed = stored
            boundMount = part.mount
        }
        return .partial(record)
    }

    /// Writes `record` (from resume data the caller kept) as the record of the partial now at its
    /// name, when its record is gone and that is still the file the record was made from (its
    /// ``ResumeRecord/partial`` identity), one link, this user's, holding at least the bytes the
    /// record claims. Best effort; otherwise nothing is written and the download judges what it
    /// finds (another program's `.part` is refused, as without resume data).
    /// Not while a download of this process writes it, and not over a record that already binds
    /// the partial (haul's own, for this URL or another: the download judges it).
    package func adopt(_ record: ResumeRecord) {
        guard let identity = record.partial, !DestinationClaims.shared.isClaimed(destination) else { return }
        guard case .foreign = try? inspect(), (try? Sys.readSmallFile(recordPath, followingLinks: false)) == nil
        else { return }
        guard let part = (try? Sys.status(partPath)) ?? nil, identity.isSame(as: part), part.isRegular,
            part.links == 1, part.isOwnAndPrivate, part.size >= record.contiguousBytes
        else { return }
        guard let fd = try? Sys.open(partPath, O_RDONLY | O_NOFOLLOW) else { return }
        defer { Sys.close(fd) }
        guard (try? Sys.fsync(fd)) != nil else { return }  // the record claims synced bytes only
        recordLock.withLock { try? Sys.writeFileAtomically(recordPath, record.encoded()) }
        RecordIndex.shared.wrote(destination)
    }

    /// Opens the partial for writing at `offset`, dropping anything after it (bytes past the last
    /// checkpoint may not have reached the disk). From 0 the partial is made anew.
    package func open(at offset: Int64) throws(HaulError) {
        if fd < 0, offset == 0 {
            try create()
            return
        }
        if fd < 0 { try reopen() }
        do { try Sys.ftruncate(fd, offset) } catch { throw .fileSystem(error, "truncate", path: partPath) }
        writtenBytes = offset
        durableBytes = offset
    }

    /// Creates the partial, exclusively and without following a link: whatever is at its name
    /// (haul's own partial being restarted, since ``prepare(for:resume:overwrite:)`` refused
    /// anything else) is removed first, never truncated or written through (a hard link to
    /// another file). Created empty: no truncate (on ext4 a truncate to zero also makes close()
    /// start writeback).
    private func create() throws(HaulError) {
        do {
            fd = try Sys.open(partPath, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o644)
        } catch  where error == .fileExists {
            guard case .partial = try inspect() else {
                throw HaulError(
                    .destinationExists,
                    "\(partPath) appeared, and haul did not write it; use --overwrite to replace it",
                    path: destination)
            }
            recordLock.lock()
            defer { recordLock.unlock() }
            try? Sys.unlink(partPath)
            do { fd = try Sys.open(partPath, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o644) } catch {
                throw .fileSystem(error, "create", path: partPath)
            }
        } catch {
            throw .fileSystem(error, "create", path: partPath)
        }
        writtenBytes = 0
        durableBytes = 0
        // A partial is at the name from now on, with a record or without (one that cannot be
        // written): a whole-file save does not take the name as free.
        RecordIndex.shared.wrote(destination)
        // A new file: no record claims it yet (an inspect() above saw the one it replaces).
        recordLock.withLock {
            lastCheckpointed = nil
            lastNoted = []
        }
        let status: Sys.FileStatus
        do { status = try Sys.status(fd: fd) } catch { throw .fileSystem(error, "inspect", path: partPath) }
        boundIdentity = ResumeRecord.FileIdentity(status)
        recordLock.withLock { boundMount = status.mount }
    }

    /// Opens the partial that ``inspect()`` found bound to its record, checking that it is still
    /// that file (nothing swapped it in between).
    private func reopen() throws(HaulError) {
        if boundIdentity == nil { _ = try inspect() }
        do { fd = try Sys.open(partPath, O_RDWR | O_NOFOLLOW) } catch {
            throw .fileSystem(error, "open", path: partPath)
        }
        let status: Sys.FileStatus
        do { status = try Sys.status(fd: fd) } catch { throw .fileSystem(error, "inspect", path: partPath) }
        guard let bound = boundIdentity, bound.isSame(as: status), status.links == 1 else {
            close()
            throw HaulError(
                .destinationExists, "\(partPath) is not the file its resume record was written with", path: destination)
        }
    }

    /// Opens the partial for positional writes of a file of `total` bytes (segmented downloads),
    /// keeping what is there (`completed` not empty: the bytes its record claims, in the partial
    /// it binds) or making it anew. The file is sparse at `total`; a total whose missing bytes
    /// exceed the free space fails now, not halfway; disk space is reserved only
    /// ``reservedAhead`` past where the bytes go (``reserve(ahead:)``), so an answer that claims
    /// a large total and sends little leaves no large file behind, on a rerun too.
    package func openPreallocated(total: Int64, completed: [ByteRange]) throws(HaulError) {
        if fd < 0 {
            if completed.isEmpty { try create() } else { try reopen() }
        }
        let size: Int64
        do { size = try Sys.status(fd: fd).size } catch { throw .fileSystem(error, "inspect", path: partPath) }
        let gaps = ByteRange.gaps(in: total, leftBy: completed)
        let missing = gaps.reduce(0) { $0 + $1.count }
        if let free = Sys.freeBytes(Sys.parentDirectory(of: partPath)), missing > free {
            if size == 0 { discard() }
            throw HaulError(
                .diskFull,
                "not enough space: \(missing) needed, \(free) free (for \(destination))",
                errno: ENOSPC, path: partPath)
        }
        do {
            // Exactly the file's size (a partial longer than its total is cut to it).
            if size != total { try Sys.ftruncate(fd, total) }
            try reserving(ahead: gaps)
        } catch {
            // A fresh partial holds nothing to resume: not left behind (a full disk, a size the
            // file system cannot take), nor without a record.
            if completed.isEmpty { discard() }
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

    /// fsync()s the data, then atomically replaces the record so it claims exactly the synced
    /// bytes; the record names the partial it describes (``ResumeRecord/partial``). A record
    /// that claims no bytes (a fresh partial's first) needs no sync of the data: `syncingData`
    /// false.
    package func checkpoint(_ record: ResumeRecord, syncingData: Bool = true) throws(HaulError) {
        if fd >= 0, syncingData {
            do { try Sys.fsync(fd, path: partPath) } catch { throw .fileSystem(error, "sync", path: partPath) }
        }
        var record = record
        record.partial = boundIdentity
        record.bootID = BootID.current
        recordLock.lock()
        defer { recordLock.unlock() }
        guard stillAt(boundIdentity) else {
            throw HaulError(
                .fileSystem, "\(partPath) was removed or replaced during the download", errno: ENOENT, path: partPath)
        }
        record.written = ByteRange.union(record.ranges + lastNoted)
        record.mountID = boundMount
        do { try Sys.writeFileAtomically(recordPath, record.encoded(), durably: syncingData) } catch {
            throw .fileSystem(error, "write", path: recordPath)
        }
        lastCheckpointed = record
        if !noted {
            RecordIndex.shared.noted(url: record.url, destination: destination)
            noted = true
        }
        durableBytes = record.contiguousBytes
    }

    /// Reserves disk space at the start of each of `gaps` (the parts still to be written, where
    /// connections write next), ``reservedAhead`` in all, as the bytes arrive: what is allocated
    /// stays within the bytes received plus that. Best effort: a full disk shows up at the next
    /// write.
    package func reserve(ahead gaps: [ByteRange]) {
        try? reserving(ahead: gaps)
    }

    private func reserving(ahead gaps: [ByteRange]) throws(Errno) {
        guard fd >= 0, !gaps.isEmpty else { return }
        // What is allocated already counts (earlier reservations at gap starts since passed,
        // or split): never more than the bytes written plus ``reservedAhead`` in all.
        let status = try Sys.status(fd: fd)
        let written = status.size - gaps.reduce(0) { $0 + $1.count }
        var left = min(Self.reservedAhead, written + Self.reservedAhead - status.allocated)
        guard left > 0 else { return }
        // An even share for each gap (at least 1 MiB, for the first gaps, when there are many).
        let share = max(1 << 20, left / Int64(gaps.count))
        for gap in gaps where left > 0 {
            let length = min(gap.count, share, left)
            try Sys.reserve(fd, offset: gap.start, length: length)
            left -= length
        }
    }

    /// Notes in the record that `written` is in the partial (written, not yet synced), so that a
    /// rerun in the same boot (after kill -9) trusts it; a reboot falls back to the last
    /// checkpoint's synced ranges. No fsync: a rename of a small file, on the notes thread (one
    /// for the process, so that a busy journal never holds a transfer's thread); a note not yet
    /// written when the next comes is replaced by it. Nothing before the first checkpoint, after
    /// a discard or after the commit.
    package func note(written: [ByteRange]) {
        let scheduled = pendingNote.withLock { pending -> Bool in
            defer { pending = written }
            return pending != nil
        }
        if !scheduled { Self.notes.async { self.writeNote() } }
    }

    /// Notes wait here for their turn: the latest ranges of this partial (older ones superseded).
    private let pendingNote = Locked<[ByteRange]?>(nil)
    static let notes = DispatchQueue(label: "haul.notes")

    private func writeNote() {
        guard let written = pendingNote.take() else { return }
        recordLock.lock()
        defer { recordLock.unlock() }
        guard var record = lastCheckpointed, stillAt(record.partial) else { return }
        record.written = written
        record.bootID = BootID.current
        record.mountID = boundMount
        lastNoted = written
        try? Sys.writeFileAtomically(recordPath, record.encoded(), durably: false, syncingContent: !flushesRenames)
    }

    /// ``Sys/flushesRenamedFiles(_:)`` for the partial's directory, asked once.
    private lazy var flushesRenames = Sys.flushesRenamedFiles(Sys.parentDirectory(of: partPath))

    /// Drops up to `bytes` from the end of what was written (never below the durable bytes),
    /// freeing space on a full disk. Best effort.
    package func releaseTail(_ bytes: Int64) {
        guard fd >= 0 else { return }
        let keep = max(durableBytes, writtenBytes - bytes)
        recordLock.withLock { lastNoted = ByteRange.union(lastNoted.map { ByteRange($0.start, min($0.end, keep)) }) }
        if (try? Sys.ftruncate(fd, keep)) != nil { writtenBytes = keep }
    }

    /// Closes the partial; a note still queued is dropped.
    package func close() {
        pendingNote.withLock { $0 = nil }
        if fd >= 0 { Sys.close(fd) }
        fd = -1
    }

    /// Removes the partial and its record.
    package func discard() {
        close()
        // Under the record lock: a note or checkpoint that checked the partial is still there
        // finishes its write first, and none begins between the two removals.
        recordLock.withLock {
            lastCheckpointed = nil
            lastNoted = []
            try? Sys.unlink(partPath)
            try? Sys.unlink(recordPath)
        }
        boundIdentity = nil
        RecordIndex.shared.removed(destination: destination)
        noted = false
        writtenBytes = 0
        durableBytes = 0
    }

    /// Syncs (in a group with other files finishing now) and renames the partial into place on
    /// the ``FileWorker``, then removes the record. A crash in between leaves the finished file
    /// and a stale record, which the next run finds complete and removes.
    ///
    /// With a `verification`, the file is first checked against it on a Dispatch worker (the
    /// digests not computed while writing are read from the file): a mismatch deletes it and its
    /// record and throws ``HaulError/Code/checksumMismatch``.
    package func commit(
        replacing: Bool, verifying verification: Verification = Verification(), on worker: FileWorker = .shared
    ) async throws(HaulError) {
        if !verification.isEmpty {
            try await Sys.offload { [self] () throws(HaulError) in try verify(verification) }
        }
        try await worker.perform { [self] () throws(HaulError) in try committing(replacing: replacing, then: ()) }
    }

    /// The commit as a step of a job already on the ``FileWorker`` (which wrote the file, say):
    /// the checksum check, if any (on the worker: for small files), the sync, then the rename,
    /// then `value`.
    package func committing<T: Sendable>(
        replacing: Bool, verifying verification: Verification = Verification(), then value: T
    ) throws(HaulError) -> FileWorker.Step<T> {
        if !verification.isEmpty { try verify(verification) }
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
        recordLock.withLock { lastCheckpointed = nil }  // no note after this
        try? Sys.unlink(recordPath)
        RecordIndex.shared.removed(destination: destination)
    }

    /// Checks the finished partial against the expected digests; a mismatch deletes it (and its
    /// record) and throws ``HaulError/Code/checksumMismatch``.
    private func verify(_ verification: Verification) throws(HaulError) {
        // The file stays open: the commit that follows must still sync it.
        let found: (Checksum, actual: [UInt8])?
        do {
            if fd >= 0 {
                found = try verification.mismatch(readingFile: fd)
            } else {
                let file = try Sys.open(partPath, O_RDONLY | O_NOFOLLOW)
                defer { Sys.close(file) }
                found = try verification.mismatch(readingFile: file)
            }
        } catch {
            throw .fileSystem(error, "read", path: partPath)
        }
        if let (expected, actual) = found {
            discard()
            throw HaulError(
                .checksumMismatch, [Checksum].mismatchMessage(expected, actual: actual, of: destination),
                path: destination)
        }
    }

    /// Brings `hashes` up to `end` with the partial's bytes (a resume whose record kept them a
    /// little before its offset).
    package func hash(_ hashes: inout MultiHasher, upTo end: Int64) throws(HaulError) {
        do { try hashes.catchUp(reading: fd, to: end) } catch { throw .fileSystem(error, "read", path: partPath) }
    }
}
