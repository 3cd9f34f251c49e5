import CHaulCurl
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An errno value with a readable description.
package struct Errno: Error, Equatable, Sendable, CustomStringConvertible {
    package var rawValue: Int32
    package init(_ rawValue: Int32) { self.rawValue = rawValue }

    package static var current: Errno { Errno(errno) }
    package static let noSpace = Errno(ENOSPC)
    package static let quotaExceeded = Errno(EDQUOT)
    package static let noSuchFile = Errno(ENOENT)
    package static let fileExists = Errno(EEXIST)
    package static let interrupted = Errno(EINTR)

    /// True for "the disk is full" in both its forms (ENOSPC, EDQUOT).
    package var isDiskFull: Bool { self == .noSpace || self == .quotaExceeded }
    /// True when a link(2) was refused by what the system allows rather than by what is at the
    /// name: a security module (EPERM, EACCES), /proc of another namespace (ENOENT), a mount
    /// (EXDEV), a file system or kernel without it (EOPNOTSUPP, ENOSYS, EMLINK).
    package var refusesLinking: Bool { [EPERM, EACCES, ENOENT, EXDEV, EOPNOTSUPP, ENOSYS, EMLINK].contains(rawValue) }
    package var description: String { String(cString: strerror(rawValue)) }
}

/// The one place Haul calls into POSIX for files. Each wrapper retries EINTR and throws `Errno`.
package enum Sys {
    @inline(__always)
    static func retrying<T: BinaryInteger>(
        _ call: Syscall, path: String? = nil, _ body: () -> T
    ) throws(Errno) -> T {
        if let injected = FaultInjection.check(call, path: path) { throw injected }
        while true {
            let r = body()
            if r >= 0 { return r }
            if errno != EINTR { throw Errno.current }
        }
    }

    package static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws(Errno) -> Int32 {
        try retrying(.open, path: path) { c_open(path, flags | O_CLOEXEC, mode) }
    }

    package static func close(_ fd: Int32) {
        _ = c_close(fd)  // EINTR on close must not be retried on Linux.
    }

    /// Writes the whole buffer at `offset`, looping over short writes.
    package static func pwriteAll(
        _ fd: Int32, _ buffer: UnsafeRawBufferPointer, at offset: Int64, path: String? = nil
    )
        throws(Errno)
    {
        if let injected = FaultInjection.check(.pwrite, buffer.count, path: path) { throw injected }
        var done = 0
        while done < buffer.count {
            let n = c_pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw Errno.current
            }
            done += n
        }
        if let path { WriteLog.log("W \(offset) \(buffer.count) \(path)") }
    }

    /// Writes the whole buffer at the descriptor's position (a pipe, a terminal), looping over
    /// short writes.
    package static func writeAll(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) throws(Errno) {
        var done = 0
        while done < buffer.count {
            let n = c_write(fd, buffer.baseAddress! + done, buffer.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw Errno.current
            }
            done += n
        }
    }

    /// Reads up to `count` bytes at `offset`; fewer only at end of file.
    package static func pread(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64
    ) throws(Errno)
        -> Int
    {
        var done = 0
        while done < buffer.count {
            let n = try retrying(.pread) {
                c_pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// One read(2) from the descriptor's position: the bytes read, 0 at the end.
    package static func readSome(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try retrying(.read) { c_read(fd, buffer.baseAddress!, buffer.count) }
    }

    /// `path` is only for fault injection (tests fail the sync of one named file).
    package static func fsync(_ fd: Int32, path: String? = nil) throws(Errno) {
        if let path { WriteLog.log("B \(path)") }
        _ = try retrying(.fsync, path: path) { c_fsync(fd) }
        if let path { WriteLog.log("S \(path)") }
    }

    /// Starts writing a file's dirty pages to the disk without waiting (Linux; elsewhere
    /// nothing). A later fsync then waits for writes already under way. Best effort.
    package static func startWriteback(_ fd: Int32) {
        _ = haul_start_writeback(fd)
    }

    package static func ftruncate(_ fd: Int32, _ length: Int64) throws(Errno) {
        _ = try retrying(.ftruncate) { c_ftruncate(fd, off_t(length)) }
    }

    /// Reserves `length` bytes of `fd` on disk from `offset` (fallocate(2); the file grows where
    /// it is shorter). A full disk or quota throws; a file system that cannot reserve (NFS, FUSE,
    /// off Linux) is left as it is: the space shows up as the writes come. Never emulated by
    /// writing zeros (posix_fallocate does, racing the writes of other connections).
    package static func reserve(_ fd: Int32, offset: Int64, length: Int64) throws(Errno) {
        if let injected = FaultInjection.check(.ftruncate) { throw injected }
        guard length > 0 else { return }
        let r = haul_reserve(fd, offset, length)
        if r == ENOSPC || r == EDQUOT || r == EFBIG { throw Errno(r) }
    }

    /// Whether the file system of `path` puts a file's data on disk before a rename over another
    /// file is (ext4's auto_da_alloc, btrfs), or keeps nothing across a power cut anyway (tmpfs):
    /// there a record renamed into place without an fsync is the old one or the new one after a
    /// power cut. Elsewhere (XFS, say) it can be empty.
    package static func flushesRenamedFiles(_ path: String) -> Bool {
        [FileSystemType.ext4, FileSystemType.btrfs, FileSystemType.tmpfs].contains(Int64(haul_fs_type(path)))
    }

    /// Whether the open file `fd` is on a file system that keeps nothing across a restart
    /// (tmpfs, ramfs): its fsync has nothing to write and returns at once.
    package static func keepsNothingOnDisk(_ fd: Int32) -> Bool {
        [FileSystemType.tmpfs, FileSystemType.ramfs].contains(Int64(haul_fd_fs_type(fd)))
    }

    /// statfs(2) `f_type` values (linux/magic.h).
    private enum FileSystemType {
        static let ext4: Int64 = 0xEF53
        static let btrfs: Int64 = 0x9123_683E
        static let tmpfs: Int64 = 0x0102_1994
        static let ramfs: Int64 = 0x8584_58F6
    }

    /// Bytes an unprivileged process may still write on the file system of `path` (statvfs);
    /// nil when it cannot be told.
    package static func freeBytes(_ path: String) -> Int64? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        let free = UInt64(st.f_bavail) &* UInt64(st.f_frsize)
        return free > UInt64(Int64.max) ? Int64.max : Int64(free)
    }

    package static func rename(_ from: String, _ to: String) throws(Errno) {
        _ = try retrying(.rename, path: to) { c_rename(from, to) }
    }

    /// Takes a write lock on one byte of `fd` without waiting; false when another process (or
    /// open file description) holds it. Other failures count as taken: the lock is a safeguard,
    /// not a condition for downloading.
    package static func lockByte(_ fd: Int32, at offset: Int64) -> Bool {
        (try? lockByteOrThrow(fd, at: offset)) ?? true
    }

    /// ``lockByte(_:at:)`` failing closed: false when another open file description holds it,
    /// and any other error thrown (a lock whose only job is to keep two holders apart must not
    /// count an error, such as ENOLCK on a file system without locks, as taken).
    package static func lockByteOrThrow(_ fd: Int32, at offset: Int64) throws(Errno) -> Bool {
        let result = haul_lock_byte(fd, offset, 1)
        if result == 0 { return true }
        if result == EAGAIN || result == EACCES { return false }
        throw Errno(result)
    }

    /// Drops the lock ``lockByte(_:at:)`` took.
    package static func unlockByte(_ fd: Int32, at offset: Int64) { _ = haul_lock_byte(fd, offset, 0) }

    /// This user's home directory in the password database (getpwuid_r), when it names one.
    package static func passwordHome() -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwuid_r(geteuid(), &entry, &buffer, buffer.count, &found) == 0, found != nil,
            let dir = entry.pw_dir
        else { return nil }
        let home = String(cString: dir)
        return home.hasPrefix("/") && home != "/" ? home : nil
    }

    /// A directory only this user can use: created with mode 0700 if missing; nil when `path`
    /// is not a directory owned by this user and closed to others (or is a symlink).
    package static func privateDirectory(_ path: String) -> String? {
        _ = mkdir(path, 0o700)
        return isPrivateDirectory(path) ? path : nil
    }

    /// ``privateDirectory(_:)``, closing a directory of this user's that others may read or
    /// enter (made 0755 by an earlier version) to them first; another user's is left alone.
    package static func privateDirectoryClosingOwn(_ path: String) -> String? {
        _ = mkdir(path, 0o700)
        var st = stat()
        if lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == geteuid(), st.st_mode & 0o077 != 0 {
            _ = chmod(path, 0o700)
        }
        return isPrivateDirectory(path) ? path : nil
    }

    /// Whether `path` is a directory owned by this user and closed to others (not a symlink).
    package static func isPrivateDirectory(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR && st.st_uid == geteuid()
            && st.st_mode & 0o077 == 0
    }

    /// Renames `from` to `to` unless `to` exists (then `EEXIST`), in one atomic step where the
    /// file system supports it (renameat2 RENAME_NOREPLACE); elsewhere a check, then a rename.
    package static func renameNoReplace(_ from: String, _ to: String) throws(Errno) {
        if let injected = FaultInjection.check(.rename, path: to) { throw injected }
        let r = haul_rename_noreplace(from, to)
        if r == 0 { return }
        guard r == EINVAL || r == ENOSYS else { throw Errno(r) }
        if (try? fileSize(to)) ?? nil != nil { throw .fileExists }
        try rename(from, to)
    }

    /// Removes a file; a missing file is not an error.
    package static func unlink(_ path: String) throws(Errno) {
        do { _ = try retrying(.unlink) { c_unlink(path) } } catch  where error == .noSuchFile {}
    }

    /// The device and inode number of what `path` names (following symbolic links), or nil
    /// when it cannot be stat()ed.
    package static func fileIdentity(_ path: String) -> (device: UInt64, inode: UInt64)? {
        var st = stat()
        guard c_stat(path, &st) == 0 else { return nil }
        return (UInt64(st.st_dev), UInt64(st.st_ino))
    }

    /// `path` under the working directory when relative, lexically normalised; nil when it is
    /// relative and the working directory cannot be told (removed, or not searchable): never
    /// resolved against `/` instead, as an empty working directory would.
    package static func absolutePath(_ path: String) -> String? {
        if path.utf8.first == UInt8(ascii: "/") { return lexicallyNormalized(path) }
        guard let cwd = getcwd(nil, 0) else { return nil }
        defer { free(cwd) }
        let directory = String(cString: cwd)
        // Linux gives "(unreachable)..." for a directory outside the process's root.
        guard directory.utf8.first == UInt8(ascii: "/") else { return nil }
        return lexicallyNormalized(directory + "/" + path)
    }

    /// `path` with `.` components, repeated slashes and `dir/..` pairs removed, without touching
    /// the file system (`/..` is `/`; a relative path keeps its leading `..`).
    package static func lexicallyNormalized(_ path: String) -> String {
        if isNormal(path) { return path }
        // Components split and compared on bytes, as the kernel reads them: a "/" or "." followed
        // by a combining mark is one Character, and still a separator or a dot.
        let absolute = path.utf8.first == UInt8(ascii: "/")
        func isDots(_ part: String, _ count: Int) -> Bool {
            part.utf8.count == count && part.utf8.allSatisfy { $0 == UInt8(ascii: ".") }
        }
        var parts: [String] = []
        for part in components(path) where !part.isEmpty && !isDots(part, 1) {
            if isDots(part, 2) {
                if let last = parts.last, !isDots(last, 2) {
                    parts.removeLast()
                } else if !absolute {
                    parts.append(part)
                }
                continue
            }
            parts.append(part)
        }
        let joined = parts.joined(separator: "/")
        return absolute ? "/" + joined : (joined.isEmpty ? "." : joined)
    }

    /// No empty, `.` or `..` component and no trailing slash: the usual case, checked in one
    /// pass over the bytes.
    private static func isNormal(_ path: String) -> Bool {
        let slash = UInt8(ascii: "/")
        var length = 0  // of the current component
        var onlyDots = true
        var atStart = true
        for byte in path.utf8 {
            if byte == slash {
                if length == 0 && !atStart { return false }  // an empty component
                if length > 0 && length <= 2 && onlyDots { return false }  // "." or ".."
                length = 0
                onlyDots = true
            } else {
                length += 1
                if byte != UInt8(ascii: ".") { onlyDots = false }
            }
            atStart = false
        }
        if length == 0 { return path == "/" }  // "" or a trailing slash
        return !(length <= 2 && onlyDots)
    }

    package static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return c_stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// Creates a directory and its parents (like `mkdir -p`).
    package static func makeDirectories(_ path: String) throws(Errno) {
        if isDirectory(path) { return }
        let parent = parentDirectory(of: path)
        if parent != path && !parent.isEmpty { try makeDirectories(parent) }
        do { _ = try retrying(.mkdir) { c_mkdir(path, 0o755) } } catch  where error == .fileExists {}
    }

    /// Flushes a directory entry change (a rename or create) to disk.
    package static func fsyncDirectory(_ path: String) {
        let fd = c_open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        guard fd >= 0 else { return }
        _ = c_fsync(fd)
        _ = c_close(fd)
    }

    /// Reads a small file whole (resume records); nil when it does not exist. A file over
    /// `limit` bytes throws EFBIG (cut at the limit, no decoder could read it). The buffer is the
    /// file's size, not the limit, which would allocate 1 MiB for every record read.
    /// `followingLinks` false: a symbolic link at `path` fails (ELOOP) instead of being read.
    package static func readSmallFile(
        _ path: String, limit: Int = 1 << 20, followingLinks: Bool = true
    ) throws(Errno) -> [UInt8]? {
        try readSmallFileAndStatus(path, limit: limit, followingLinks: followingLinks)?.bytes
    }

    /// ``readSmallFile(_:limit:followingLinks:)``, with the status of the file it read (taken
    /// from the same descriptor: whose it is and who may write it, of the bytes read).
    package static func readSmallFileAndStatus(
        _ path: String, limit: Int = 1 << 20, followingLinks: Bool = true
    ) throws(Errno) -> (bytes: [UInt8], status: FileStatus)? {
        let fd: Int32
        // O_NONBLOCK: a FIFO in the file's place must not make open(2) wait for a writer.
        let flags = O_RDONLY | O_NONBLOCK | (followingLinks ? 0 : O_NOFOLLOW)
        do { fd = try open(path, flags) } catch  where error == .noSuchFile { return nil }
        defer { close(fd) }
        let status = try self.status(fd: fd)
        if !status.isRegular {
            var st = stat()
            if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR { throw Errno(EISDIR) }
            return nil  // a FIFO, device or socket holds no such file
        }
        // The size, or a page for files that report none (/proc), and one byte more: a full
        // buffer grows (up to one byte past the limit, which says the file is too large).
        var capacity = min(limit, max(Int(status.size), 4095)) + 1
        var buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        var filled = 0
        while true {
            if filled == capacity {
                guard capacity <= limit else { throw Errno(EFBIG) }
                let grown = min(capacity * 2, limit + 1)
                let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: grown, alignment: 8)
                bigger.copyMemory(from: UnsafeRawBufferPointer(buffer))
                buffer.deallocate()
                buffer = bigger
                capacity = grown
            }
            let n = try pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]), at: Int64(filled))
            if n == 0 { break }
            filled += n
        }
        return (Array(buffer[0..<filled]), status)
    }

    /// Replaces `path` with `bytes` atomically and durably: write a temporary file, fsync it,
    /// rename it over `path`, fsync the directory. A crash leaves the old or the new content.
    /// Not `durably`: no fsync (a record that claims nothing yet, or only what a rerun in the
    /// same boot trusts), unless `syncingContent`: then the temporary's bytes are synced, so that
    /// a power cut leaves the old record or the new one, never an empty one. `secret`: the
    /// bytes stay out of the debug write log (cookies).
    package static func writeFileAtomically(
        _ path: String, _ bytes: [UInt8], durably: Bool = true, syncingContent: Bool = false, secret: Bool = false
    ) throws(Errno) {
        let tmp = path + ".tmp"
        // Whatever is left at the temporary's name (a FIFO that would make open(2) wait, a hard
        // link to another file that a truncate would write through) is removed, and the
        // temporary created anew, exclusively. The rename replaces whatever is at `path`.
        try unlink(tmp)
        let fd = try open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, mode: 0o600)
        do throws(Errno) {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 8)
            defer { buffer.deallocate() }
            buffer.copyBytes(from: bytes)
            try pwriteAll(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<bytes.count]), at: 0, path: tmp)
            if durably || syncingContent { try fsync(fd) }
        } catch {
            close(fd)
            try? unlink(tmp)
            throw error
        }
        close(fd)
        try rename(tmp, path)
        if durably { fsyncDirectory(parentDirectory(of: path)) }
        WriteLog.log("R \(durably ? 1 : 0) \(secret ? "-" : WriteLog.hex(bytes)) \(path)")
    }

    package static func parentDirectory(of path: String) -> String {
        split(path).directory
    }

    /// `path`'s components, split at every `/` byte, empty ones kept (a leading `/` gives an
    /// empty first one). Bytes, not Characters: a `/` followed by a combining mark is one
    /// Character, and still a separator to the kernel.
    package static func components(_ path: String) -> [String] {
        path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
    }

    /// `path` split at its last `/` byte: the directory (`.` when there is none, `/` for the
    /// root) and the name after it. Bytes, not Characters: a `/` followed by a combining mark is
    /// one Character, and still a separator to the kernel. A native string's bytes are searched
    /// in place (a file's save splits its path four times).
    package static func split(_ path: String) -> (directory: String, name: String) {
        var contiguous = path
        return contiguous.withUTF8 { bytes in
            guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return (".", path) }
            let name = String(decoding: UnsafeBufferPointer(rebasing: bytes[(slash + 1)...]), as: UTF8.self)
            if slash == 0 { return ("/", name) }
            return (String(decoding: UnsafeBufferPointer(rebasing: bytes[..<slash]), as: UTF8.self), name)
        }
    }

    /// The name after `path`'s last `/` byte (all of `path` when there is none): ``split(_:)``'s
    /// name, without making its directory.
    package static func name(of path: String) -> String {
        var contiguous = path
        return contiguous.withUTF8 { bytes in
            guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return path }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[(slash + 1)...]), as: UTF8.self)
        }
    }
}

// Module-level shims, so the wrappers above (which share the C names) reach the C functions on
// both Glibc and Darwin.
@inline(__always) private func c_open(_ p: String, _ f: Int32, _ m: mode_t) -> Int32 { open(p, f, m) }
@inline(__always) private func c_close(_ fd: Int32) -> Int32 { close(fd) }
@inline(__always) private func c_pwrite(_ fd: Int32, _ b: UnsafeRawPointer, _ n: Int, _ o: off_t) -> Int {
    pwrite(fd, b, n, o)
}
@inline(__always) private func c_write(_ fd: Int32, _ b: UnsafeRawPointer, _ n: Int) -> Int { write(fd, b, n) }
@inline(__always) private func c_read(_ fd: Int32, _ b: UnsafeMutableRawPointer, _ n: Int) -> Int { read(fd, b, n) }
@inline(__always) private func c_pread(_ fd: Int32, _ b: UnsafeMutableRawPointer, _ n: Int, _ o: off_t) -> Int {
    pread(fd, b, n, o)
}
@inline(__always) func c_fsync(_ fd: Int32) -> Int32 { fsync(fd) }
@inline(__always) private func c_ftruncate(_ fd: Int32, _ n: off_t) -> Int32 { ftruncate(fd, n) }
@inline(__always) private func c_rename(_ a: String, _ b: String) -> Int32 { rename(a, b) }
@inline(__always) private func c_unlink(_ p: String) -> Int32 { unlink(p) }
@inline(__always) func c_stat(_ p: String, _ st: UnsafeMutablePointer<stat>) -> Int32 { stat(p, st) }
@inline(__always) func c_lstat(_ p: String, _ st: UnsafeMutablePointer<stat>) -> Int32 { lstat(p, st) }
@inline(__always) private func c_mkdir(_ p: String, _ m: mode_t) -> Int32 { mkdir(p, m) }
