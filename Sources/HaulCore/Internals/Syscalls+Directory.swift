#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A directory's names, read in place (no String per entry unless asked for), and what the
/// descriptor they were read from says of the directory.
extension Sys {
    /// Names in a directory (not `.`/`..`), optionally only those ending in `suffix` (compared
    /// on the raw bytes, so a large directory costs no String per entry).
    package static func listDirectory(_ path: String, suffix: String = "") -> [String] {
        let tail = Array(suffix.utf8)
        var names: [String] = []
        forEachEntry(in: path) { raw in
            guard raw.count >= tail.count, raw.suffix(tail.count).elementsEqual(tail) else { return }
            names.append(String(decoding: raw, as: UTF8.self))
        }
        return names
    }

    /// Calls `body` with the bytes of each name in the directory at `path` but `.` and `..`, in
    /// place (valid during the call only); false when the directory cannot be opened, or a read
    /// of it fails before its end (the names given then are not all of them).
    @discardableResult
    package static func forEachEntry(in path: String, _ body: (UnsafeBufferPointer<UInt8>) -> Void) -> Bool {
        guard let dir = opendir(path) else { return false }
        defer { closedir(dir) }
        return forEachEntry(of: dir, body)
    }

    /// A directory ``readDirectory(_:_:)`` read to its end: its identity, and whether it compares
    /// names without case.
    package struct ReadDirectory: Sendable {
        package let device: UInt64
        package let inode: UInt64
        package let foldsCase: Bool
    }

    /// Calls `body` with the bytes of each name in the directory at `path` but `.` and `..`, in
    /// place (valid during the call only), and says what it read, as the descriptor the names
    /// came from tells it. Nil when the directory cannot be opened or its status read, or a read
    /// of it fails before its end (the names given then are not all of them).
    package static func readDirectory(
        _ path: String, _ body: (UnsafeBufferPointer<UInt8>) -> Void
    ) -> ReadDirectory? {
        guard let dir = opendir(path) else { return nil }
        defer { closedir(dir) }
        let fd = dirfd(dir)
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        let read = ReadDirectory(device: UInt64(st.st_dev), inode: UInt64(st.st_ino), foldsCase: foldsCase(fd))
        return forEachEntry(of: dir, body) ? read : nil
    }

    /// Calls `body` with each name of `dir` but `.` and `..`; false when a read fails before the
    /// end.
    private static func forEachEntry(of dir: OpaquePointer, _ body: (UnsafeBufferPointer<UInt8>) -> Void) -> Bool {
        while true {
            errno = 0
            guard let entry = readdir(dir) else { return errno == 0 }
            let raw = entryName(entry)
            let name = UnsafeBufferPointer(
                start: UnsafeRawPointer(raw).assumingMemoryBound(to: UInt8.self), count: strlen(raw))
            if name.count <= 2, name.allSatisfy({ $0 == UInt8(ascii: ".") }) { continue }
            body(name)
        }
    }

    /// Whether the directory open at `fd` compares names without case (ext4, f2fs, tmpfs and
    /// bcachefs casefolding: `FS_CASEFOLD_FL`). True when the flags cannot be read for another
    /// reason than a file system without them, and on systems and architectures where the
    /// request's number is not known here (Linux on x86_64, arm64, riscv64 and s390x are).
    private static func foldsCase(_ fd: Int32) -> Bool {
        #if os(Linux) && (arch(x86_64) || arch(arm64) || arch(riscv64) || arch(s390x))
            var flags: CInt = 0
            // FS_IOC_GETFLAGS, _IOR('f', 1, long) with an 8-byte long; the kernel writes an int.
            guard ioctl(fd, 0x8008_6601, &flags) == 0 else { return errno != ENOTTY && errno != EINVAL }
            return flags & 0x4000_0000 != 0
        #else
            return true
        #endif
    }

    /// The name of a directory entry, in place. An entry holds only as many bytes of `d_name` as
    /// its name needs (`d_reclen`), not the field's declared 256: reading the field as a value
    /// copies all 256 and can run off the end of the buffer `readdir` filled (a crash, listing a
    /// directory of a few thousand files).
    package static func entryName(_ entry: UnsafePointer<dirent>) -> UnsafePointer<CChar> {
        let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name) ?? 19
        return (UnsafeRawPointer(entry) + offset).assumingMemoryBound(to: CChar.self)
    }
}
