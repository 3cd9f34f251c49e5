import CHaulCurl

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What is at a path: which file, of what kind, its size and times.
extension Sys {
    /// Which file a path or descriptor is, without following a symbolic link: what a resume
    /// record binds its partial by (docs/resume-record.md).
    package struct FileStatus: Equatable, Sendable {
        package var device: UInt64
        package var inode: UInt64
        package var size: Int64
        package var isRegular: Bool
        /// Hard links to it: a partial haul made has one.
        package var links: UInt64
        /// When it was created, in nanoseconds since 1970 (statx), where the file system keeps
        /// it: a file made later at a freed inode number has another.
        package var birth: Int64?
        /// Owned by this process's user, and writable by nobody else.
        package var isOwnAndPrivate: Bool
        /// The mount it was reached through, where the kernel tells (a new id at each mount: a
        /// disk pulled and plugged in again is another mount).
        package var mount: UInt64? = nil
        /// Bytes of disk allocated to it (512-byte blocks).
        package var allocated: Int64 = 0
        /// The last change of its bytes (mtime) and of its inode (ctime: any write, rename,
        /// chmod or time set, which no program can set back), in nanoseconds since 1970.
        package var modified: Int64 = 0
        package var changed: Int64 = 0
        /// Owned by this process's user, and neither readable nor writable by anybody else (a
        /// secret's file: the daemon's token).
        package var isOwnAndSecret = false
    }

    /// The status of what is at `path` itself (a symbolic link is not followed), from one statx
    /// (identity, kind, owner and birth time of one inode); nil when nothing is there.
    package static func status(_ path: String) throws(Errno) -> FileStatus? {
        do { return try fileStatus(fd: -1, path: path) } catch  where error == .noSuchFile { return nil }
    }

    /// The status of an open file.
    package static func status(fd: Int32) throws(Errno) -> FileStatus {
        try fileStatus(fd: fd, path: nil)
    }

    private static func fileStatus(fd: Int32, path: String?) throws(Errno) -> FileStatus {
        var s = haul_file_status()
        _ = try retrying(.stat) { () -> Int32 in
            let r = path.map { haul_status(-1, $0, &s) } ?? haul_status(fd, nil, &s)
            if r == 0 { return 0 }
            errno = r
            return -1
        }
        return FileStatus(
            device: s.device, inode: s.inode, size: s.size, isRegular: (mode_t(s.mode) & S_IFMT) == S_IFREG,
            links: s.links,
            birth: s.has_birth != 0 ? s.birth_seconds &* 1_000_000_000 &+ Int64(s.birth_nanoseconds) : nil,
            isOwnAndPrivate: s.uid == geteuid() && (s.mode & 0o022) == 0, mount: s.has_mount != 0 ? s.mount : nil,
            allocated: s.blocks &* 512, modified: s.modified, changed: s.changed,
            isOwnAndSecret: s.uid == geteuid() && (s.mode & 0o077) == 0)
    }

    /// Sets the modification time of what is at `path` itself (a symbolic link's own, not its
    /// target's) to `seconds` since 1970.
    package static func setModified(_ path: String, seconds: Int64) throws(Errno) {
        _ = try retrying(.stat) { () -> Int32 in
            let r = haul_set_modified(path, seconds)
            if r == 0 { return 0 }
            errno = r
            return -1
        }
    }

    /// The size of what is at `path` (any kind of file), or nil when nothing is there.
    package static func fileSize(_ path: String) throws(Errno) -> Int64? {
        var st = stat()
        do { _ = try retrying(.stat) { c_stat(path, &st) } } catch  where error == .noSuchFile { return nil }
        return Int64(st.st_size)
    }

    /// What a path names, following symbolic links.
    package enum FileKind: Equatable, Sendable {
        case regular(size: Int64)
        case directory
        /// A device, FIFO or socket.
        case other
        /// A symbolic link whose target does not exist.
        case danglingLink
    }

    /// What is at `path`, or nil when nothing is there. One `lstat` (the usual cases: nothing, a
    /// regular file); a symbolic link costs a `stat` more.
    package static func fileKind(_ path: String) throws(Errno) -> FileKind? {
        var st = stat()
        do { _ = try retrying(.stat) { c_lstat(path, &st) } } catch  where error == .noSuchFile { return nil }
        if (st.st_mode & S_IFMT) == S_IFLNK {
            do { _ = try retrying(.stat) { c_stat(path, &st) } } catch  where error == .noSuchFile {
                return .danglingLink
            }
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return .regular(size: Int64(st.st_size))
        case S_IFDIR: return .directory
        default: return .other
        }
    }

    /// Whether `path` itself is a symbolic link.
    package static func isSymbolicLink(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK
    }
}
