import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking HTTP client over a plain socket, for sending what a browser or an attacker would
/// (malformed, oversized, cut off) and reading back the bytes as they come. Every read has a
/// timeout, so a test cannot hang on a server that does not answer.
final class RawClient: @unchecked Sendable {  // its descriptor is a let; the relay reads and writes it from two threads
    let fd: Int32

    /// Connects to 127.0.0.1:`port`.
    init(port: Int, timeoutSeconds: Int = 10) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let r = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard r == 0 else {
            close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ text: String) { send(Array(text.utf8)) }

    func send(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return }
            sent += n
        }
    }

    /// Reads until the server closes, `until` is found in what came, or the timeout.
    func read(until marker: String? = nil) -> String {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            received += buffer[..<n]
            if let marker, String(decoding: received, as: UTF8.self).contains(marker) { break }
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// Sends `request` and reads the answer until the connection closes.
    static func exchange(port: Int, _ request: String) throws -> String {
        let client = try RawClient(port: port)
        client.send(request)
        return client.read()
    }
}
