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

    /// The name its sync is known by in fault injection and errors: the partial's, whose place
    /// it takes.
    package var syncName: String { destination + ".part" }

    /// Whether files with no name can be made and then named here: a kernel and file system
    /// with O_TMPFILE (tried by ``create(for:)``), and /proc to name them through.
    private static let canName = Sys.isDirectory("/proc/self/fd")

    /// An unnamed file beside `destination`; nil where there can be none (then a partial).
    package static func create(for destination: String) throws(HaulError) -> WholeFile? {
        guard canName else { return nil }
        let directory = Sys.parentDirectory(of: destination)
        let fd: Int32?
        do { fd = try Sys.openUnnamed(inDirectory: directory) } catch {
            throw .fileSystem(error, "create a file in", path: directory)
        }
        return fd.map { WholeFile(destination: destination, fd: $0) }
    }

    /// Writes `body` whole, after checking it against an expected SHA-256 (hex, any case): a
    /// body that does not match is never written, and the error says so as a partial's would.
    package func write(_ body: [UInt8], verifying sha256: String?) throws(HaulError) {
        if let expected = sha256?.lowercased() {
            let actual = SHA256.hexDigest(of: body)
            guard actual == expected else {
                throw HaulError(
                    .checksumMismatch, "SHA-256 of \(destination) is \(actual), expected \(expected)", path: destination
                )
            }
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

    /// The file worker's step: sync the file (grouped with others), then give it its name.
    /// When something took the name meanwhile, `taken` runs instead (the caller keeps the bytes
    /// another way) and its error ends the download.
    package func committing<T: Sendable>(
        then value: T, taken: @escaping @Sendable () throws(HaulError) -> Never
    ) -> FileWorker.Step<T> {
        .sync(fd: fd, path: syncName) { [self] error throws(HaulError) in
            if let error { throw .fileSystem(error, "sync", path: syncName) }
            let failure: Errno?
            do throws(Errno) {
                try Sys.linkUnnamed(fd, to: destination)
                failure = nil
            } catch {
                failure = error
            }
            if let failure {
                close()
                if failure == .fileExists { try taken() }
                throw .fileSystem(failure, "link into", path: destination)
            }
            close()
            return value
        }
    }

    private func close() {
        if fd >= 0 { Sys.close(fd) }
        fd = -1
    }
}
