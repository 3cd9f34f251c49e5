#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The HTTP cache's files: one per URL (and decoding), `<SHA-256 of the key>.cache` in a
/// directory of this user's alone (0700), bounded to `capacity` bytes, the least recently used
/// going first. A file is `HAULHTTP1\n`, the head's JSON length (4 bytes, big-endian), the
/// head (``CachedResponse`` and the body's length and SHA-256), then the body; a file that is
/// not exactly that is not used. docs/http-cache.md.
package struct HTTPCacheStore: Sendable {
    package let directory: String
    package let capacity: Int
    /// The largest body kept: an eighth of the capacity.
    package var maxBody: Int { capacity / 8 }

    package init(directory: String, capacity: Int) {
        self.directory = directory
        self.capacity = max(0, capacity)
    }

    private static let magic = Array("HAULHTTP1\n".utf8)

    private struct Head: Codable {
        var entry: CachedResponse
        var bodyLength: Int
        var bodySHA256: String
    }

    /// The stored answer for `url`, if there is one haul wrote and it is whole.
    package func entry(for url: URL, decoded: Bool) -> CachedResponse? {
        guard Sys.isPrivateDirectory(directory) else { return nil }
        let key = Self.key(url, decoded: decoded)
        let path = directory + "/" + key
        guard
            let (bytes, status) = try? Sys.readSmallFileAndStatus(
                path, limit: maxBody + 64 << 10, followingLinks: false),
            status.isOwnAndPrivate, var entry = Self.decode(bytes),
            entry.url == ResumeRecord.redacted(url), entry.decoded == decoded
        else { return nil }
        entry.body = Self.body(of: bytes)
        try? Sys.setModified(path, seconds: Int64(Date().timeIntervalSince1970))  // recently used
        return entry
    }

    /// Keeps `entry` (replacing the URL's), then removes the least recently used entries past
    /// the capacity. A body over ``maxBody`` is not kept (and the URL's old entry goes).
    package func store(_ entry: CachedResponse) {
        guard let url = URL(string: entry.url) else { return }
        let path = directory + "/" + Self.key(url, decoded: entry.decoded)
        guard entry.body.count <= maxBody, let bytes = Self.encode(entry) else {
            if Sys.isPrivateDirectory(directory) { try? Sys.unlink(path) }
            return
        }
        guard (try? Sys.makeDirectories(Sys.parentDirectory(of: directory))) != nil,
            Sys.privateDirectoryClosingOwn(directory) != nil
        else { return }
        guard (try? Sys.writeFileAtomically(path, bytes, durably: false)) != nil else { return }
        let total = Self.totals.withLock { totals -> Int64? in
            guard let known = totals[directory] else { return nil }
            totals[directory] = known + Int64(bytes.count)
            return known + Int64(bytes.count)
        }
        if total.map({ $0 > Int64(capacity) }) ?? true { trim() }
    }

    /// The bytes this process counts in each directory since it last listed it (an entry
    /// replaced counts twice until the next listing: a trim comes early, never late).
    private static let totals = Locked<[String: Int64]>([:])

    /// Removes the URL's entry.
    package func remove(_ url: URL, decoded: Bool) {
        guard Sys.isPrivateDirectory(directory) else { return }
        try? Sys.unlink(directory + "/" + Self.key(url, decoded: decoded))
    }

    /// Removes every entry.
    package func removeAll() {
        guard Sys.isPrivateDirectory(directory) else { return }
        for name in Sys.listDirectory(directory, suffix: ".cache") { try? Sys.unlink(directory + "/" + name) }
    }

    /// Lists the directory (once per process, and whenever the count passes the capacity) and,
    /// past the capacity, removes entries least recently used first down to nine tenths of it.
    private func trim() {
        let entries = Sys.listDirectory(directory, suffix: ".cache").compactMap { name -> (String, Sys.FileStatus)? in
            (try? Sys.status(directory + "/" + name)).flatMap { $0 }.map { (name, $0) }
        }
        var total = entries.reduce(Int64(0)) { $0 + $1.1.size }
        if total > Int64(capacity) {
            for (name, status) in entries.sorted(by: { $0.1.modified < $1.1.modified }) {
                guard total > Int64(capacity) * 9 / 10 else { break }
                try? Sys.unlink(directory + "/" + name)
                total -= status.size
            }
        }
        Self.totals.withLock { $0[directory] = total }
    }

    // MARK: - Format

    private static func key(_ url: URL, decoded: Bool) -> String {
        var hasher = SHA256()
        hasher.update(Array(("GET \(ResumeRecord.redacted(url)) \(decoded ? "decoded" : "identity")").utf8))
        return Hex.string(hasher.finalize()) + ".cache"
    }

    private static func digest(_ body: Data) -> String {
        var hasher = SHA256()
        body.withUnsafeBytes { hasher.update($0) }
        return Hex.string(hasher.finalize())
    }

    static func encode(_ entry: CachedResponse) -> [UInt8]? {
        let head = Head(entry: entry, bodyLength: entry.body.count, bodySHA256: digest(entry.body))
        guard let json = try? JSONEncoder().encode(head), json.count < Int(UInt32.max) else { return nil }
        let n = UInt32(json.count)
        return magic + [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
            + Array(json) + Array(entry.body)
    }

    /// The entry's head when `bytes` are a whole file of this format whose body is the one
    /// its head names.
    static func decode(_ bytes: [UInt8]) -> CachedResponse? {
        let start = magic.count + 4
        guard bytes.count >= start, Array(bytes[0..<magic.count]) == magic else { return nil }
        let n = bytes[magic.count..<start].reduce(0) { $0 << 8 | Int($1) }
        guard n <= bytes.count - start,
            let head = try? JSONDecoder().decode(Head.self, from: Data(bytes[start..<start + n])),
            head.entry.version == 1, head.bodyLength == bytes.count - start - n,
            digest(Data(bytes[(start + n)...])) == head.bodySHA256
        else { return nil }
        return head.entry
    }

    private static func body(of bytes: [UInt8]) -> Data {
        let start = magic.count + 4
        let n = bytes[magic.count..<start].reduce(0) { $0 << 8 | Int($1) }
        return Data(bytes[(start + n)...])
    }
}
