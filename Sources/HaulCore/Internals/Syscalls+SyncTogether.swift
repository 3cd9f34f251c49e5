import CHaulCurl

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One sync for many files: syncfs(2), where it can stand for their fsyncs (FileWorker).
extension Sys {
    /// Writes every dirty page and inode of the file system `fd` is on and waits (syncfs(2)),
    /// for the files at `paths` (named in the write log and to fault injection, the first).
    /// Throws the file system's first write error since `fd` was opened, whichever file it was.
    package static func syncFileSystem(of fd: Int32, paths: [String]) throws(Errno) {
        for path in paths { WriteLog.log("B \(path)") }
        _ = try retrying(.syncfs, path: paths.first) { () -> Int32 in
            let error = haul_syncfs(fd)
            guard error != 0 else { return 0 }
            errno = error
            return -1
        }
        for path in paths { WriteLog.log("S \(path)") }
    }

    /// The file system `fd` is on (its `f_fsid`), where one syncfs(2) may stand for the fsyncs of
    /// its files: ext4 (ext2, ext3) or XFS, under Linux 5.8 or later; nil elsewhere. Before
    /// 5.8, syncfs reported no write error. On btrfs a syncfs commits a whole transaction where
    /// an fsync writes its tree log, and network file systems sync per file: they keep fsync.
    package static func sharedSyncVolume(_ fd: Int32) -> UInt64? {
        guard syncfsReportsErrors else { return nil }
        var type: Int64 = 0
        var id: UInt64 = 0
        guard haul_fd_fs_identity(fd, &type, &id) == 0, [0xEF53, 0x5846_5342].contains(type) else { return nil }
        return id
    }

    private static let syncfsReportsErrors = haul_kernel_at_least(5, 8) != 0

    /// Bytes of the system's page cache waiting to be written (dirty or under writeback); nil
    /// when /proc/meminfo cannot tell.
    package static func unwrittenBytes() -> Int64? {
        let bytes = haul_unwritten_bytes()
        return bytes >= 0 ? bytes : nil
    }
}
