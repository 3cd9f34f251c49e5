import Foundation
import HaulCore

#if canImport(Glibc)
    import Glibc
#endif

/// A relay on 127.0.0.1 in front of the daemon that passes everything through both ways (the
/// proof too, so a client trusts it; the Host header made the daemon's) but loses the answers to the first `lose` requests whose
/// line holds `marker`: the request reaches the daemon, then the client's connection is reset
/// before the answer comes back. What a crash or a reset after the daemon acted looks like.
final class LossyRelay: @unchecked Sendable {
    let fd: Int32
    let port: Int
    let lost = Locked(0)

    init(to daemonPort: Int, losing lose: Int, of marker: String) throws {
        (fd, port) = try Sys.listenTCP(address: "127.0.0.1", port: 0)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        let needle = Array(marker.utf8)
        Sys.startThread(name: "relay") { [self] in
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }
                guard let daemon = try? RawClient(port: daemonPort, timeoutSeconds: 120) else {
                    close(client)
                    continue
                }
                // Set before the request goes on: the daemon's answer to it comes after.
                let losing = Locked(false)
                Sys.startThread(name: "relay-up") { [self] in
                    var buffer = [UInt8](repeating: 0, count: 64 << 10)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                        guard n > 0 else { break }
                        // The daemon answers its own Host only.
                        let piece = Array(
                            String(decoding: buffer[..<n], as: UTF8.self).replacingOccurrences(
                                of: "Host: 127.0.0.1:\(port)", with: "Host: 127.0.0.1:\(daemonPort)"
                            ).utf8)
                        let hit = piece.indices.contains { piece[$0...].starts(with: needle) }
                        let loseThis =
                            hit
                            && lost.withLock { count -> Bool in
                                guard count < lose else { return false }
                                count += 1
                                return true
                            }
                        if loseThis { losing.set(true) }
                        daemon.send(piece)
                    }
                    shutdown(daemon.fd, Int32(SHUT_RDWR))
                }
                Sys.startThread(name: "relay-down") {
                    var buffer = [UInt8](repeating: 0, count: 64 << 10)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { recv(daemon.fd, $0.baseAddress, $0.count, 0) }
                        guard n > 0 else { break }
                        if losing.get() { break }  // the daemon answered; the client never hears it
                        var sent = 0
                        while sent < n {
                            let m = buffer[sent..<n].withUnsafeBytes {
                                send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                            }
                            guard m > 0 else { break }
                            sent += m
                        }
                    }
                    var reset = linger(l_onoff: 1, l_linger: 0)
                    setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
                    shutdown(client, Int32(SHUT_RDWR))
                    close(client)
                    _ = daemon
                }
            }
        }
    }

    func stop() { shutdown(fd, Int32(SHUT_RDWR)) }
}
