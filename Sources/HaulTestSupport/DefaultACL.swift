import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A directory's default POSIX ACL, set through its extended attribute (tests of the modes files
/// get under one).
public enum DefaultACL {
    /// Gives `path` a default ACL of the owner's, the group's and the others' permissions, in the
    /// kernel's extended-attribute format (linux/posix_acl_xattr.h): version 2, then (tag,
    /// permissions, id) entries in tag order. False where the file system has none.
    public static func set(_ path: String, user: UInt16, group: UInt16, other: UInt16) throws -> Bool {
        var bytes: [UInt8] = []
        withUnsafeBytes(of: UInt32(2).littleEndian) { bytes += $0 }
        for (tag, permissions) in [(UInt16(0x01), user), (0x04, group), (0x20, other)] {
            withUnsafeBytes(of: tag.littleEndian) { bytes += $0 }
            withUnsafeBytes(of: permissions.littleEndian) { bytes += $0 }
            withUnsafeBytes(of: UInt32.max.littleEndian) { bytes += $0 }
        }
        typealias SetXattr =
            @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer, Int, Int32) -> Int32
        guard symbol("setxattr", as: SetXattr.self)(path, name, bytes, bytes.count, 0) == 0 else {
            if errno == EOPNOTSUPP { return false }
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        return true
    }

    private static let name = "system.posix_acl_default"

    /// libc's function of that name: Swift's Glibc module leaves out <sys/xattr.h>.
    private static func symbol<F>(_ name: String, as type: F.Type) -> F {
        unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), name)!, to: type)
    }
}
