import CHaulCurl

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One sync for many files: syncfs(2), where it can stand for their fsyncs (FileWorker).
extension Sys {
    /// Syncs the files `fds` (at `paths`, named in the write log and to fault injection) on one
    /// file system: syncfs(2) of the first, which writes every dirty page and inode there and
    /// throws the file system's first write error since that descriptor was opened, whichever
    /// file it was; then an fsync of the last, whose error is returned (the others are then not
    /// known to be synced). The fsync flushes the disk's cache after all of that is written:
    /// syncfs flushes before its last writes of the block device's buffers (inode tables,
    /// extents), and ext2 not at all. Where the file system journals, it finds little to do.
    package static func syncFileSystem(_ fds: [Int32], paths: [String]) throws(Errno) -> Errno? {
        guard let first = fds.first, let last = fds.last else { return nil }
        for path in paths { WriteLog.log("B \(path)") }
        _ = try retrying(.syncfs, path: paths.first) { () -> Int32 in
            let error = haul_syncfs(first)
            guard error != 0 else { return 0 }
            errno = error
            return -1
        }
        do throws(Errno) { _ = try retrying(.fsync, path: paths.last) { c_fsync(last) } } catch { return error }
        for path in paths { WriteLog.log("S \(path)") }
        return nil
    }

    /// The file system `fd` is on (its device), where one syncfs(2) may stand for the fsyncs of
    /// its files: ext4 (ext2, ext3) or XFS, under Linux 5.17 or later; nil elsewhere. Before
    /// 5.8 syncfs reported no write error, and before 5.17 not the file system's own (a failed
    /// journal commit or cache flush). On btrfs a syncfs commits a whole transaction where an
    /// fsync writes its tree log, and network file systems sync per file: they keep fsync.
    package static func sharedSyncVolume(_ fd: Int32) -> UInt64? {
        guard syncfsReportsErrors else { return nil }
        var type: Int64 = 0
        var id: UInt64 = 0
        guard haul_fd_fs_identity(fd, &type, &id) == 0, [0xEF53, 0x5846_5342].contains(type) else { return nil }
        return id
    }

    private static let syncfsReportsErrors = haul_kernel_at_least(5, 17) != 0

    /// Bytes of the system's page cache waiting to be written (dirty or under writeback); nil
    /// when /proc/meminfo cannot tell.
    package static func unwrittenBytes() -> Int64? {
        let bytes = haul_unwritten_bytes()
        return bytes >= 0 ? bytes : nil
    }
}
