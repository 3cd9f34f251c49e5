import CHaulCurl

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Files with no name until they are complete (a small download written whole, docs/startup.md).
extension Sys {
    /// A regular file with no name yet, in `directory`, open for writing (O_TMPFILE): it is on
    /// disk only once ``linkUnnamed(_:to:)`` names it, and a process that dies first leaves
    /// nothing. Nil where the kernel or the file system has no unnamed files (then a named
    /// partial is the way).
    /// The mode is given to the open, as a partial's is: the directory's default ACL decides it
    /// where there is one, else `mode` less the process's umask (applied by haul as well:
    /// kernels before 6.0 skipped it for O_TMPFILE on file systems without POSIX ACLs). A
    /// directory found without an ACL is not asked again in this process: one given an ACL
    /// later gets files of `mode` less the umask, which its ACL can narrow but never widen.
    package static func openUnnamed(inDirectory directory: String, mode: mode_t = 0o644) throws(Errno) -> Int32? {
        guard let umask = processUmask else { return nil }
        let asked = hasDefaultACL(directory) ? mode : mode & ~umask
        while true {
            let r =
                FaultInjection.check(.open, path: directory).map { -$0.rawValue }
                ?? haul_open_unnamed(directory, Int32(asked))
            if r >= 0 { return r }
            switch -r {
            case EINTR: continue
            // No O_TMPFILE: EOPNOTSUPP (the file system), EISDIR or EINVAL (a kernel before 3.11).
            case EOPNOTSUPP, EISDIR, EINVAL, ENOSYS: return nil
            default: throw Errno(-r)
            }
        }
    }

    /// Directories known to have no default ACL, asked once each in this process: many small
    /// files go into one directory, and a getxattr for each would be a system call of their few.
    /// One with an ACL is asked at every file: were that answer kept, a path that later names a
    /// directory without one, on a file system without ACLs under a kernel before 6.0 (which
    /// then applies no umask to unnamed files), would get files more open than the umask
    /// allows. One that cannot be asked (missing, no permission) is asked again. At most 512
    /// are kept (a run into more directories asks for the others every time).
    private static let withoutDefaultACL = RememberedSet()

    private static func hasDefaultACL(_ directory: String) -> Bool {
        if withoutDefaultACL.contains(directory) { return false }
        let found = haul_has_default_acl(directory)
        if found == 0 { withoutDefaultACL.insert(directory) }
        return found == 1
    }

    /// The process's umask, read from /proc/self/status (Linux 4.7): umask(2) can only read it
    /// by setting it, which races the other threads' creates. Nil where it cannot be read.
    static let processUmask: mode_t? = {
        guard let bytes = try? readSmallFile("/proc/self/status", limit: 64 << 10) else { return nil }
        return statusUmask(bytes)
    }()

    /// The `Umask:` line's octal value in /proc/PID/status `bytes`; nil without one.
    package static func statusUmask(_ bytes: [UInt8]) -> mode_t? {
        let key = Array("Umask:".utf8)
        for line in bytes.split(separator: UInt8(ascii: "\n")) where line.starts(with: key) {
            var value: mode_t = 0
            var digits = 0
            for byte in line.dropFirst(key.count) where !isASCIISpace(byte) {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "7"), digits < 6 else { return nil }
                value = value << 3 | mode_t(byte - UInt8(ascii: "0"))
                digits += 1
            }
            return digits > 0 ? value : nil
        }
        return nil
    }

    /// Names the unnamed file `fd` `path`, failing with `EEXIST` when anything is there: never
    /// replaced, a symbolic link there never followed.
    package static func linkUnnamed(_ fd: Int32, to path: String) throws(Errno) {
        if let injected = FaultInjection.check(.link, path: path) { throw injected }
        while true {
            let r = haul_link_unnamed(fd, path)
            if r == 0 { return }
            if r != EINTR { throw Errno(r) }
        }
    }
}
