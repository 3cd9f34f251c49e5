import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// Another process on the port of a daemon that died: answers every request with 200 `{}`
/// and keeps what it was sent (the tests that check the token never reaches it).
public final class Squatter: @unchecked Sendable {
    let fd: Int32
    private let heardText = Locked("")

    /// Listens on 127.0.0.1:`port` (the dead daemon's).
    public init(port: Int) throws {
        fd = try Sys.listenTCP(address: "127.0.0.1", port: port).0
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        Sys.startThread(name: "squatter") { [self] in
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }
                var buffer = [UInt8](repeating: 0, count: 16 << 10)
                let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                if n > 0 { heardText.withLock { $0 += String(decoding: buffer[..<n], as: UTF8.self) } }
                let answer = Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".utf8)
                _ = answer.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                close(client)
            }
        }
    }

    /// Everything it was sent so far.
    public var heard: String { heardText.get() }

    /// Stops accepting.
    public func stop() { shutdown(fd, Int32(SHUT_RDWR)) }
}
