/// SHA-256 (FIPS 180-4), for `--checksum sha-256=<hex>` and integrity checks. Foundation on
/// Linux has no CryptoKit, so Haul carries its own.
package struct SHA256: Sendable {
    private var state: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) = (
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19
    )
    private var buffer = [UInt8](repeating: 0, count: 64)
    private var buffered = 0
    private var length: UInt64 = 0

    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    package init() {}

    package mutating func update(_ data: UnsafeRawBufferPointer) {
        guard var p = data.baseAddress else { return }
        var n = data.count
        length &+= UInt64(n)
        if buffered > 0 {
            let take = min(64 - buffered, n)
            for i in 0..<take { buffer[buffered + i] = p.load(fromByteOffset: i, as: UInt8.self) }
            buffered += take
            p += take
            n -= take
            guard buffered == 64 else { return }
            buffer.withUnsafeBytes { compress(UnsafeRawPointer($0.baseAddress!)) }
            buffered = 0
        }
        while n >= 64 {
            compress(p)
            p += 64
            n -= 64
        }
        for i in 0..<n { buffer[i] = p.load(fromByteOffset: i, as: UInt8.self) }
        buffered = n
    }

    package mutating func update<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        Array(bytes).withUnsafeBytes { update($0) }
    }

    package mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        var pad: [UInt8] = [0x80]
        let rem = (buffered + 1) % 64
        pad += [UInt8](repeating: 0, count: rem <= 56 ? 56 - rem : 120 - rem)
        for i in (0..<8).reversed() { pad.append(UInt8(truncatingIfNeeded: bitLength >> (UInt64(i) * 8))) }
        let savedLength = length
        pad.withUnsafeBytes { update($0) }
        length = savedLength
        var out: [UInt8] = []
        for word in [state.0, state.1, state.2, state.3, state.4, state.5, state.6, state.7] {
            out += [UInt8(word >> 24), UInt8((word >> 16) & 0xff), UInt8((word >> 8) & 0xff), UInt8(word & 0xff)]
        }
        return out
    }

    /// Lower-case hex of the digest.
    package mutating func hexDigest() -> String { Hex.string(finalize()) }

    private mutating func compress(_ block: UnsafeRawPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
            for i in 0..<16 {
                w[i] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
            }
            for i in 16..<64 {
                let s0 = w[i - 15].rotatedRight(7) ^ w[i - 15].rotatedRight(18) ^ (w[i - 15] >> 3)
                let s1 = w[i - 2].rotatedRight(17) ^ w[i - 2].rotatedRight(19) ^ (w[i - 2] >> 10)
                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, h) = state
            SHA256.k.withUnsafeBufferPointer { k in
                for i in 0..<64 {
                    let s1 = e.rotatedRight(6) ^ e.rotatedRight(11) ^ e.rotatedRight(25)
                    let ch = (e & f) ^ (~e & g)
                    let t1 = h &+ s1 &+ ch &+ k[i] &+ w[i]
                    let s0 = a.rotatedRight(2) ^ a.rotatedRight(13) ^ a.rotatedRight(22)
                    let maj = (a & b) ^ (a & c) ^ (b & c)
                    let t2 = s0 &+ maj
                    h = g
                    g = f
                    f = e
                    e = d &+ t1
                    d = c
                    c = b
                    b = a
                    a = t1 &+ t2
                }
            }
            state = (
                state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e, state.5 &+ f, state.6 &+ g,
                state.7 &+ h
            )
        }
    }

    /// The hex SHA-256 of some bytes.
    package static func hexDigest<C: Collection>(of bytes: C) -> String where C.Element == UInt8 {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.hexDigest()
    }

    /// The hex SHA-256 of a file, read in 1 MiB blocks.
    package static func hexDigest(ofFile path: String) throws(Errno) -> String {
        let fd = try Sys.open(path, O_RDONLY)
        defer { Sys.close(fd) }
        return try hexDigest(ofFileAt: fd)
    }

    /// The hex SHA-256 of the open file `fd`, from its first byte (the file checked is the one
    /// written, whatever its name now holds).
    package static func hexDigest(ofFileAt fd: Int32) throws(Errno) -> String {
        var hasher = SHA256()
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { block.deallocate() }
        var offset: Int64 = 0
        while true {
            let n = try Sys.pread(fd, into: block, at: offset)
            if n == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: block[0..<n]))
            offset += Int64(n)
        }
        return hasher.hexDigest()
    }
}

extension UInt32 {
    @inline(__always) fileprivate func rotatedRight(_ n: UInt32) -> UInt32 { (self >> n) | (self << (32 - n)) }
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
