import Dispatch
import HaulCore
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#endif

extension TestServer {
    /// Calls `body` on a thread that has joined the namespace `name`, so sockets it creates
    /// belong there (a socket keeps its namespace for life; the thread then ends).
    public static func inside<T: Sendable>(
        networkNamespace name: String, _ body: @escaping @Sendable () throws -> T
    ) throws -> T {
        let result = Locked<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Sys.startThread(name: "haul.ts.netns") {
            defer { done.signal() }
            let fd = open("/var/run/netns/\(name)", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                result.set(.failure(POSIXError(.init(rawValue: errno) ?? .EIO)))
                return
            }
            defer { close(fd) }
            // setns(2) is not imported by Glibc; 0x40000000 is CLONE_NEWNET.
            typealias SetNS = @convention(c) (Int32, Int32) -> Int32
            guard let setns: SetNS = cSymbol("setns") else {
                result.set(.failure(POSIXError(.ENOSYS)))
                return
            }
            guard setns(fd, 0x4000_0000) == 0 else {
                result.set(.failure(POSIXError(.init(rawValue: errno) ?? .EIO)))
                return
            }
            result.set(Result { try body() })
        }
        done.wait()
        return try result.get()!.get()
    }
}

/// A C function of this process by name, as `T` (a `@convention(c)` type), for the glibc calls
/// Swift's Glibc module does not import.
package func cSymbol<T>(_ name: String) -> T? {
    guard let pointer = dlsym(dlopen(nil, RTLD_NOW), name) else { return nil }
    return unsafeBitCast(pointer, to: T.self)
}
