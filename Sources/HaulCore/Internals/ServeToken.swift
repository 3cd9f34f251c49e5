#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The daemon's secret: 256 random bits as 64 lowercase hex digits, created on first start in a
/// file only this user can read (0600, in a 0700 directory), and required on every HTTP call.
/// Not `Equatable` (a `==` on the text would stop at the first difference: compare with
/// ``matches(_:)``), and printed as `ServeToken(…)`, never its text.
package struct ServeToken: Sendable, CustomStringConvertible {
    /// The token as the CLI sends it (`Authorization: Bearer …`) and the page gets it
    /// (`#token=…`).
    package let text: String

    package var description: String { "ServeToken(…)" }

    package init?(text: String) {
        guard text.utf8.count == 64, text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) })
        else { return nil }
        self.text = text
    }

    /// A new token from the system's cryptographic random source (getrandom on Linux).
    package static func random() -> ServeToken {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return ServeToken(text: Hex.string(bytes))!
    }

    /// The token in `file`, made there first if there is none. A file that is a link, not a
    /// regular file, not this user's, readable or writable by others, hard-linked, or not a
    /// token is refused (it is not the daemon's: another user may know it), never overwritten.
    /// A new token is written whole to a temporary file, synced, then renamed to `file` (never
    /// replacing one that appeared meanwhile), so the
    /// name never holds part of a token; a daemon that loses the race reads the winner's.
    package static func loadOrCreate(at file: String) throws(HaulError) -> ServeToken {
        let directory = Sys.parentDirectory(of: file)
        try? Sys.makeDirectories(Sys.parentDirectory(of: directory))
        guard Sys.privateDirectory(directory) != nil else {
            throw HaulError(.fileSystem, "\(directory) is not a directory only this user can enter")
        }
        if let found = try read(file) { return found }
        let token = random()
        let temporary = file + ".tmp." + Hex.string((0..<8).map { _ in UInt8.random(in: 0...255) })
        defer { try? Sys.unlink(temporary) }
        do throws(Errno) {
            let fd = try Sys.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
            defer { Sys.close(fd) }
            let line = Array((token.text + "\n").utf8)
            let written = line.withUnsafeBytes { b -> Errno? in
                do throws(Errno) { try Sys.writeAll(fd, b) } catch { return error }
                return nil
            }
            if let written { throw written }
            try Sys.fsync(fd, path: temporary)
        } catch {
            throw HaulError(.fileSystem, "cannot write the token file \(file): \(error)")
        }
        do throws(Errno) { try Sys.renameNoReplace(temporary, file) } catch {
            guard error == .fileExists, let theirs = try read(file) else {
                throw HaulError(.fileSystem, "cannot make the token file \(file): \(error)")
            }
            return theirs
        }
        Sys.fsyncDirectory(directory)
        return token
    }

    /// The token in `file` (nil when there is none), with the checks of ``loadOrCreate(at:)``.
    package static func read(_ file: String) throws(HaulError) -> ServeToken? {
        let found: (bytes: [UInt8], status: Sys.FileStatus)?
        do { found = try Sys.readSmallFileAndStatus(file, limit: 4096, followingLinks: false) } catch {
            throw HaulError(.fileSystem, "cannot read the token file \(file): \(error)")
        }
        guard let found else { return nil }
        guard found.status.isRegular, found.status.isOwnAndSecret, found.status.links == 1 else {
            throw HaulError(.fileSystem, "\(file) is not a file only this user can read: not used as the token")
        }
        var bytes = found.bytes[...]
        while let last = bytes.last, last == 0x0A || last == 0x0D { bytes = bytes.dropLast() }
        guard let token = ServeToken(text: String(decoding: bytes, as: UTF8.self)) else {
            throw HaulError(.fileSystem, "\(file) does not hold a token (64 hex digits)")
        }
        return token
    }

    /// The daemon's proof that it knows the token, for a caller's `nonce` (hex): the hex
    /// HMAC-SHA256, keyed by the token's text, of `haul-serve-proof:` and the nonce. A caller
    /// (the CLI, the page) asks for it before it sends the token, so that whatever else holds
    /// the port after the daemon stopped (another user's process) is never sent it.
    package func proof(nonce: String) -> String {
        Hex.string(Self.hmacSHA256(key: Array(text.utf8), Array("haul-serve-proof:\(nonce)".utf8)))
    }

    /// Whether `presented` is this token's proof for `nonce` (every byte compared).
    package func matchesProof(_ presented: String, nonce: String) -> Bool {
        let mine = Array(proof(nonce: nonce).utf8)
        let theirs = Array(presented.lowercased().utf8)
        guard mine.count == theirs.count else { return false }
        return zip(mine, theirs).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// HMAC-SHA256 (RFC 2104).
    static func hmacSHA256(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var block = key
        if key.count > 64 {
            var hasher = SHA256()
            hasher.update(key)
            block = hasher.finalize()
        }
        block += [UInt8](repeating: 0, count: 64 - block.count)
        var inner = SHA256()
        inner.update(block.map { $0 ^ 0x36 })
        inner.update(message)
        var outer = SHA256()
        outer.update(block.map { $0 ^ 0x5C })
        outer.update(inner.finalize())
        return outer.finalize()
    }

    /// Whether `presented` is this token, in time that does not depend on where they differ
    /// (every byte is compared; a length that differs is compared against the token itself).
    package func matches<S: Collection<UInt8>>(_ presented: S) -> Bool {
        let mine = Array(text.utf8)
        let theirs = Array(presented)
        var difference = UInt8(truncatingIfNeeded: mine.count ^ theirs.count)
        if theirs.count != mine.count { difference |= 1 }
        for i in 0..<mine.count {
            difference |= mine[i] ^ (i < theirs.count ? theirs[i] : ~mine[i])
        }
        return difference == 0
    }
}
