/// A small download whose every byte is in memory, written as a file with no name (O_TMPFILE)
/// that gets the destination's name only once it is synced.
///
/// Until then nothing is on disk under any name: a kill, a power loss or a failed write leaves
/// no partial to vouch for, so none needs a record. Where a named partial needs a record
/// written first, an fsync, a rename and the record's removal (docs/startup.md), this is one
/// create, one write, one fsync (grouped with the others on the ``FileWorker``) and one link.
/// Used when the destination may not be replaced (`linkat` never replaces): `--overwrite` takes
/// the partial's way.
package final class WholeFile: @unchecked Sendable {
    /// Unchecked Sendable: `fd` is used by one job of the file worker at a time.
    package let destination: String
    private var fd: Int32

    private init(destination: String, fd: Int32) {
        self.destination = destination
        self.fd = fd
    }

    deinit { if fd >= 0 { Sys.close(fd) } }

    /// The name its writes and sync are known by in fault injection and the write log: the
    /// partial's, whose place it takes (messages name the destination).
    package var syncName: String { destination + ".part" }

    /// Whether files with no name can be named: /proc to name them through (the kernel's and
    /// the file system's O_TMPFILE are tried by ``create(for:)``).
    private static let procFD = Sys.isDirectory("/proc/thread-self/fd")
    /// Directories where a link was refused by a security module or a mount: every later one
    /// there would be too, so their files take the partial's way (a few hundred at most).
    private static let refused = RememberedSet()

    /// An unnamed file beside `destination`; nil where there can be none (then a partial).
    package static func create(for destination: String) throws(HaulError) -> WholeFile? {
        let directory = Sys.parentDirectory(of: destination)
        guard procFD, !refused.contains(directory) else { return nil }
        let fd: Int32?
        do { fd = try Sys.openUnnamed(inDirectory: directory) } catch {
            throw .fileSystem(error, "create", path: destination)
        }
        return fd.map { WholeFile(destination: destination, fd: $0) }
    }

    /// Writes `body` whole, after checking it against the expected digests: a body that does
    /// not match is never written, and the error says so as a partial's would.
    package func write(_ body: [UInt8], verifying verification: Verification) throws(HaulError) {
        if let (expected, actual) = verification.mismatch(of: body) {
            throw HaulError(
                .checksumMismatch, [Checksum].mismatchMessage(expected, actual: actual, of: destination),
                path: destination)
        }
        let failure = body.withUnsafeBytes { buffer -> Errno? in
            do throws(Errno) {
                try Sys.pwriteAll(fd, buffer, at: 0, path: syncName)
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw .fileSystem(failure, "write", path: destination) }
    }

    /// How naming the file went.
    package enum Named: Sendable {
        /// It is the destination now.
        case linked
        /// Something took the destination's name meanwhile; the file is gone.
        case taken
        /// This system does not let the file be named (a security module, a mount, /proc of
        /// another namespace); the file is gone, and later ones take the partial's way.
        case refused
    }

    /// The file worker's step: sync the file (grouped with others), then give it its name;
    /// `then` turns how that went into the job's value. A failed sync or a full disk throws.
    /// Returned by the job that created the file (``create(for:)``): the worker counts on the
    /// files it syncs together coming in the order they were opened (`opened`).
    package func committing<T: Sendable>(then value: @escaping @Sendable (Named) -> T) -> FileWorker.Step<T> {
        .sync(fd: fd, path: syncName, opened: true) { [self] error throws(HaulError) in
            if let error { throw .fileSystem(error, "sync", path: destination) }
            let failure: Errno?
            do throws(Errno) {
                try Sys.linkUnnamed(fd, to: destination)
                failure = nil
            } catch {
                failure = error
            }
            close()
            // Linked, or found taken: either way a file is at the name now.
            if failure == nil || failure == .fileExists { RecordIndex.shared.wrote(destination) }
            guard let failure else { return value(.linked) }
            if failure == .fileExists { return value(.taken) }
            if failure.refusesLinking {
                let directory = Sys.parentDirectory(of: destination)
                Self.refused.insert(directory)
                return value(.refused)
            }
            throw .fileSystem(failure, "rename into", path: destination)
        }
    }

    private func close() {
        if fd >= 0 { Sys.close(fd) }
        fd = -1
    }
}
