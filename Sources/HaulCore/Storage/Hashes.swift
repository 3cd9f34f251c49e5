import CHaulCurl

// The hash functions `--checksum` and RFC 9530 digests name, as block hashers: SHA-256 and
// SHA-512 (FIPS 180-4), SHA-1 (FIPS 180-4, for legacy mirrors) and MD5 (RFC 1321, likewise).
// Foundation on Linux has no CryptoKit, so Haul carries its own code, and hands whole blocks to
// libcrypto where it is there (the CPU's SHA instructions). Each can hand out its state at a
// block boundary and start again from it, so that a resume record can carry a download's hash
// so far (docs/integrity.md).

/// One hash function's compression: its chaining state and how a block changes it.
package protocol BlockHashCore: Sendable {
    /// Bytes per block.
    static var blockSize: Int { get }
    /// Bytes of the digest (and of ``chainValue``).
    static var digestSize: Int { get }
    /// Whether the message length and the words are big-endian (the SHA family) or little (MD5).
    static var bigEndian: Bool { get }
    /// Bytes the message length takes in the last block.
    static var lengthSize: Int { get }
    init()
    /// The state from a ``chainValue``; nil when it has the wrong size.
    init?(chainValue: [UInt8])
    /// The state as bytes: the digest, once the last block is in.
    var chainValue: [UInt8] { get }
    mutating func compress(_ block: UnsafeRawPointer)
    /// `count` whole blocks from `p`: through libcrypto where it is there (its code uses the
    /// CPU's SHA instructions), unless `portable`, else ``compress(_:)`` block by block.
    mutating func compress(blocks p: UnsafeRawPointer, count: Int, portable: Bool)
}

extension BlockHashCore {
    /// Whether libcrypto took the blocks (`haul_digest_blocks`), updating `state` in place.
    fileprivate static func viaLibcrypto<State>(
        _ id: Int32, _ state: inout State, _ p: UnsafeRawPointer, _ count: Int
    ) -> Bool {
        withUnsafeMutableBytes(of: &state) { haul_digest_blocks(id, $0.baseAddress, p, count) } == 1
    }

    /// The blocks one by one, with Haul's own code.
    fileprivate mutating func compressEach(_ p: UnsafeRawPointer, count: Int) {
        for i in 0..<count { compress(p + i * Self.blockSize) }
    }
}

/// A hash over a stream of bytes: whole blocks go through its core, the rest waits in a buffer.
package struct BlockHasher<Core: BlockHashCore>: Sendable {
    private var core = Core()
    /// The bytes of a block not yet whole: inline (128 bytes, the largest block), so that a
    /// hasher copied out of an enum and back does not copy a heap buffer on its next write.
    private var buffer:
        (
            UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
            UInt64, UInt64, UInt64
        ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    private var buffered = 0
    private var length: UInt64 = 0
    /// Haul's own code only, never libcrypto (tests compare the two).
    private var portable = false

    package init() {}

    package init(portable: Bool) { self.portable = portable }

    /// Bytes hashed so far.
    package var count: Int64 { Int64(length) }

    /// The state after the last whole block: its offset and chaining value (what a resume record
    /// keeps; the bytes after it are read again from the file).
    package var blockState: (offset: Int64, chainValue: [UInt8]) {
        (Int64(length) - Int64(buffered), core.chainValue)
    }

    /// A hasher that has taken the first `offset` bytes, from their ``blockState``; nil when the
    /// offset is not on a block boundary or the value has the wrong size.
    package init?(offset: Int64, chainValue: [UInt8]) {
        guard offset >= 0, offset % Int64(Core.blockSize) == 0, let core = Core(chainValue: chainValue) else {
            return nil
        }
        self.core = core
        length = UInt64(offset)
    }

    package mutating func update(_ data: UnsafeRawBufferPointer) {
        guard var p = data.baseAddress else { return }
        var n = data.count
        let block = Core.blockSize
        length &+= UInt64(n)
        if buffered > 0 {
            let take = min(block - buffered, n)
            let at = buffered
            withUnsafeMutableBytes(of: &buffer) {
                $0.baseAddress!.advanced(by: at).copyMemory(from: p, byteCount: take)
            }
            buffered += take
            p += take
            n -= take
            guard buffered == block else { return }
            let copy = buffer
            withUnsafeBytes(of: copy) { core.compress($0.baseAddress!) }
            buffered = 0
        }
        if n >= block {
            let blocks = n / block
            core.compress(blocks: p, count: blocks, portable: portable)
            p += blocks * block
            n -= blocks * block
        }
        let left = n
        withUnsafeMutableBytes(of: &buffer) { $0.baseAddress!.copyMemory(from: p, byteCount: left) }
        buffered = n
    }

    package mutating func update<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        Array(bytes).withUnsafeBytes { update($0) }
    }

    /// The digest: the padding and the length go in (the hasher is spent).
    package mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        let block = Core.blockSize
        let tail = block - Core.lengthSize
        var pad: [UInt8] = [0x80]
        let rem = (buffered + 1) % block
        pad += [UInt8](repeating: 0, count: rem <= tail ? tail - rem : block + tail - rem)
        var lengthBytes = [UInt8](repeating: 0, count: Core.lengthSize)
        for i in 0..<8 {
            lengthBytes[Core.lengthSize - 1 - i] = UInt8(truncatingIfNeeded: bitLength >> (UInt64(i) * 8))
        }
        pad += Core.bigEndian ? lengthBytes : lengthBytes.reversed()
        let savedLength = length
        pad.withUnsafeBytes { update($0) }
        length = savedLength
        return core.chainValue
    }

    /// Lower-case hex of the digest.
    package mutating func hexDigest() -> String { Hex.string(finalize()) }

    /// The hex digest of some bytes.
    package static func hexDigest<C: Collection>(of bytes: C) -> String where C.Element == UInt8 {
        var hasher = Self()
        hasher.update(bytes)
        return hasher.hexDigest()
    }

    /// The hex digest of a file, read in 1 MiB blocks.
    package static func hexDigest(ofFile path: String) throws(Errno) -> String {
        var hasher = Self()
        try FileDigest.read(path) { hasher.update($0) }
        return hasher.hexDigest()
    }

    /// The hex digest of the open file `fd`, from its first byte.
    package static func hexDigest(ofFileAt fd: Int32) throws(Errno) -> String {
        var hasher = Self()
        try FileDigest.read(fd, from: 0) { hasher.update($0) }
        return hasher.hexDigest()
    }
}

/// Whether libcrypto hashes whole blocks of `algorithm` in this process (else Haul's own code).
package func libcryptoHashes(_ algorithm: Checksum.Algorithm) -> Bool {
    let id: Int32 =
        switch algorithm {
        case .sha256: Int32(HAUL_DIGEST_SHA256)
        case .sha512: Int32(HAUL_DIGEST_SHA512)
        case .sha1: Int32(HAUL_DIGEST_SHA1)
        case .md5: Int32(HAUL_DIGEST_MD5)
        }
    return haul_digest_available(id) == 1
}

package typealias SHA256 = BlockHasher<SHA256Core>
package typealias SHA512 = BlockHasher<SHA512Core>
package typealias SHA1 = BlockHasher<SHA1Core>
package typealias MD5 = BlockHasher<MD5Core>

/// Reads files for hashing, 1 MiB at a time.
package enum FileDigest {
    /// Feeds `body` the bytes of `path`.
    package static func read(_ path: String, _ body: (UnsafeRawBufferPointer) -> Void) throws(Errno) {
        let fd = try Sys.open(path, O_RDONLY)
        defer { Sys.close(fd) }
        try read(fd, from: 0, body)
    }

    /// Feeds `body` the bytes of the open file `fd` from `start` up to `end` (its end if nil),
    /// read with `pread` (the file's offset is left alone); returns how many there were (fewer
    /// than asked when the file ends before `end`).
    @discardableResult
    package static func read(
        _ fd: Int32, from start: Int64, to end: Int64? = nil, _ body: (UnsafeRawBufferPointer) -> Void
    ) throws(Errno) -> Int64 {
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { block.deallocate() }
        var offset = start
        while end.map({ offset < $0 }) ?? true {
            let want = end.map { Int(min(Int64(block.count), $0 - offset)) } ?? block.count
            let n = try Sys.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: block[0..<want]), at: offset)
            if n == 0 { break }
            body(UnsafeRawBufferPointer(rebasing: block[0..<n]))
            offset += Int64(n)
        }
        return offset - start
    }
}

package struct SHA256Core: BlockHashCore {
    package static let blockSize = 64
    package static let digestSize = 32
    package static let bigEndian = true
    package static let lengthSize = 8
    private var state: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) = (
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19
    )

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

    package init?(chainValue: [UInt8]) {
        guard let w = Words<UInt32>.read(chainValue, count: 8, bigEndian: true) else { return nil }
        state = (w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
    }

    package var chainValue: [UInt8] {
        Words.bytes([state.0, state.1, state.2, state.3, state.4, state.5, state.6, state.7], bigEndian: true)
    }

    package mutating func compress(blocks p: UnsafeRawPointer, count: Int, portable: Bool) {
        if !portable, Self.viaLibcrypto(Int32(HAUL_DIGEST_SHA256), &state, p, count) { return }
        compressEach(p, count: count)
    }

    package mutating func compress(_ block: UnsafeRawPointer) {
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
            SHA256Core.k.withUnsafeBufferPointer { k in
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
}

package struct SHA512Core: BlockHashCore {
    package static let blockSize = 128
    package static let digestSize = 64
    package static let bigEndian = true
    package static let lengthSize = 16
    private var state: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (
        0x6a09_e667_f3bc_c908, 0xbb67_ae85_84ca_a73b, 0x3c6e_f372_fe94_f82b, 0xa54f_f53a_5f1d_36f1,
        0x510e_527f_ade6_82d1, 0x9b05_688c_2b3e_6c1f, 0x1f83_d9ab_fb41_bd6b, 0x5be0_cd19_137e_2179
    )

    private static let k: [UInt64] = [
        0x428a_2f98_d728_ae22, 0x7137_4491_23ef_65cd, 0xb5c0_fbcf_ec4d_3b2f, 0xe9b5_dba5_8189_dbbc,
        0x3956_c25b_f348_b538, 0x59f1_11f1_b605_d019, 0x923f_82a4_af19_4f9b, 0xab1c_5ed5_da6d_8118,
        0xd807_aa98_a303_0242, 0x1283_5b01_4570_6fbe, 0x2431_85be_4ee4_b28c, 0x550c_7dc3_d5ff_b4e2,
        0x72be_5d74_f27b_896f, 0x80de_b1fe_3b16_96b1, 0x9bdc_06a7_25c7_1235, 0xc19b_f174_cf69_2694,
        0xe49b_69c1_9ef1_4ad2, 0xefbe_4786_384f_25e3, 0x0fc1_9dc6_8b8c_d5b5, 0x240c_a1cc_77ac_9c65,
        0x2de9_2c6f_592b_0275, 0x4a74_84aa_6ea6_e483, 0x5cb0_a9dc_bd41_fbd4, 0x76f9_88da_8311_53b5,
        0x983e_5152_ee66_dfab, 0xa831_c66d_2db4_3210, 0xb003_27c8_98fb_213f, 0xbf59_7fc7_beef_0ee4,
        0xc6e0_0bf3_3da8_8fc2, 0xd5a7_9147_930a_a725, 0x06ca_6351_e003_826f, 0x1429_2967_0a0e_6e70,
        0x27b7_0a85_46d2_2ffc, 0x2e1b_2138_5c26_c926, 0x4d2c_6dfc_5ac4_2aed, 0x5338_0d13_9d95_b3df,
        0x650a_7354_8baf_63de, 0x766a_0abb_3c77_b2a8, 0x81c2_c92e_47ed_aee6, 0x9272_2c85_1482_353b,
        0xa2bf_e8a1_4cf1_0364, 0xa81a_664b_bc42_3001, 0xc24b_8b70_d0f8_9791, 0xc76c_51a3_0654_be30,
        0xd192_e819_d6ef_5218, 0xd699_0624_5565_a910, 0xf40e_3585_5771_202a, 0x106a_a070_32bb_d1b8,
        0x19a4_c116_b8d2_d0c8, 0x1e37_6c08_5141_ab53, 0x2748_774c_df8e_eb99, 0x34b0_bcb5_e19b_48a8,
        0x391c_0cb3_c5c9_5a63, 0x4ed8_aa4a_e341_8acb, 0x5b9c_ca4f_7763_e373, 0x682e_6ff3_d6b2_b8a3,
        0x748f_82ee_5def_b2fc, 0x78a5_636f_4317_2f60, 0x84c8_7814_a1f0_ab72, 0x8cc7_0208_1a64_39ec,
        0x90be_fffa_2363_1e28, 0xa450_6ceb_de82_bde9, 0xbef9_a3f7_b2c6_7915, 0xc671_78f2_e372_532b,
        0xca27_3ece_ea26_619c, 0xd186_b8c7_21c0_c207, 0xeada_7dd6_cde0_eb1e, 0xf57d_4f7f_ee6e_d178,
        0x06f0_67aa_7217_6fba, 0x0a63_7dc5_a2c8_98a6, 0x113f_9804_bef9_0dae, 0x1b71_0b35_131c_471b,
        0x28db_77f5_2304_7d84, 0x32ca_ab7b_40c7_2493, 0x3c9e_be0a_15c9_bebc, 0x431d_67c4_9c10_0d4c,
        0x4cc5_d4be_cb3e_42b6, 0x597f_299c_fc65_7e2a, 0x5fcb_6fab_3ad6_faec, 0x6c44_198c_4a47_5817,
    ]

    package init() {}

    package init?(chainValue: [UInt8]) {
        guard let w = Words<UInt64>.read(chainValue, count: 8, bigEndian: true) else { return nil }
        state = (w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
    }

    package var chainValue: [UInt8] {
        Words.bytes([state.0, state.1, state.2, state.3, state.4, state.5, state.6, state.7], bigEndian: true)
    }

    package mutating func compress(blocks p: UnsafeRawPointer, count: Int, portable: Bool) {
        if !portable, Self.viaLibcrypto(Int32(HAUL_DIGEST_SHA512), &state, p, count) { return }
        compressEach(p, count: count)
    }

    package mutating func compress(_ block: UnsafeRawPointer) {
        withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 80) { w in
            for i in 0..<16 {
                w[i] = UInt64(bigEndian: block.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self))
            }
            for i in 16..<80 {
                let s0 = w[i - 15].rotatedRight(1) ^ w[i - 15].rotatedRight(8) ^ (w[i - 15] >> 7)
                let s1 = w[i - 2].rotatedRight(19) ^ w[i - 2].rotatedRight(61) ^ (w[i - 2] >> 6)
                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, h) = state
            SHA512Core.k.withUnsafeBufferPointer { k in
                for i in 0..<80 {
                    let s1 = e.rotatedRight(14) ^ e.rotatedRight(18) ^ e.rotatedRight(41)
                    let ch = (e & f) ^ (~e & g)
                    let t1 = h &+ s1 &+ ch &+ k[i] &+ w[i]
                    let s0 = a.rotatedRight(28) ^ a.rotatedRight(34) ^ a.rotatedRight(39)
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
}

package struct SHA1Core: BlockHashCore {
    package static let blockSize = 64
    package static let digestSize = 20
    package static let bigEndian = true
    package static let lengthSize = 8
    private var state: (UInt32, UInt32, UInt32, UInt32, UInt32) = (
        0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476, 0xc3d2_e1f0
    )

    package init() {}

    package init?(chainValue: [UInt8]) {
        guard let w = Words<UInt32>.read(chainValue, count: 5, bigEndian: true) else { return nil }
        state = (w[0], w[1], w[2], w[3], w[4])
    }

    package var chainValue: [UInt8] { Words.bytes([state.0, state.1, state.2, state.3, state.4], bigEndian: true) }

    package mutating func compress(blocks p: UnsafeRawPointer, count: Int, portable: Bool) {
        if !portable, Self.viaLibcrypto(Int32(HAUL_DIGEST_SHA1), &state, p, count) { return }
        compressEach(p, count: count)
    }

    package mutating func compress(_ block: UnsafeRawPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { w in
            for i in 0..<16 {
                w[i] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
            }
            for i in 16..<80 { w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotatedLeft(1) }
            var (a, b, c, d, e) = state
            for i in 0..<80 {
                let f: UInt32
                let k: UInt32
                switch i {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5a82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ed9_eba1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc)
                default: (f, k) = (b ^ c ^ d, 0xca62_c1d6)
                }
                let t = a.rotatedLeft(5) &+ f &+ e &+ k &+ w[i]
                e = d
                d = c
                c = b.rotatedLeft(30)
                b = a
                a = t
            }
            state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e)
        }
    }
}

package struct MD5Core: BlockHashCore {
    package static let blockSize = 64
    package static let digestSize = 16
    package static let bigEndian = false
    package static let lengthSize = 8
    private var state: (UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476)

    private static let k: [UInt32] = [
        0xd76a_a478, 0xe8c7_b756, 0x2420_70db, 0xc1bd_ceee, 0xf57c_0faf, 0x4787_c62a, 0xa830_4613, 0xfd46_9501,
        0x6980_98d8, 0x8b44_f7af, 0xffff_5bb1, 0x895c_d7be, 0x6b90_1122, 0xfd98_7193, 0xa679_438e, 0x49b4_0821,
        0xf61e_2562, 0xc040_b340, 0x265e_5a51, 0xe9b6_c7aa, 0xd62f_105d, 0x0244_1453, 0xd8a1_e681, 0xe7d3_fbc8,
        0x21e1_cde6, 0xc337_07d6, 0xf4d5_0d87, 0x455a_14ed, 0xa9e3_e905, 0xfcef_a3f8, 0x676f_02d9, 0x8d2a_4c8a,
        0xfffa_3942, 0x8771_f681, 0x6d9d_6122, 0xfde5_380c, 0xa4be_ea44, 0x4bde_cfa9, 0xf6bb_4b60, 0xbebf_bc70,
        0x289b_7ec6, 0xeaa1_27fa, 0xd4ef_3085, 0x0488_1d05, 0xd9d4_d039, 0xe6db_99e5, 0x1fa2_7cf8, 0xc4ac_5665,
        0xf429_2244, 0x432a_ff97, 0xab94_23a7, 0xfc93_a039, 0x655b_59c3, 0x8f0c_cc92, 0xffef_f47d, 0x8584_5dd1,
        0x6fa8_7e4f, 0xfe2c_e6e0, 0xa301_4314, 0x4e08_11a1, 0xf753_7e82, 0xbd3a_f235, 0x2ad7_d2bb, 0xeb86_d391,
    ]
    private static let shifts: [UInt32] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21]

    package init() {}

    package init?(chainValue: [UInt8]) {
        guard let w = Words<UInt32>.read(chainValue, count: 4, bigEndian: false) else { return nil }
        state = (w[0], w[1], w[2], w[3])
    }

    package var chainValue: [UInt8] { Words.bytes([state.0, state.1, state.2, state.3], bigEndian: false) }

    package mutating func compress(blocks p: UnsafeRawPointer, count: Int, portable: Bool) {
        if !portable, Self.viaLibcrypto(Int32(HAUL_DIGEST_MD5), &state, p, count) { return }
        compressEach(p, count: count)
    }

    package mutating func compress(_ block: UnsafeRawPointer) {
        var (a, b, c, d) = state
        for i in 0..<64 {
            var f: UInt32
            let g: Int
            switch i {
            case 0..<16: (f, g) = ((b & c) | (~b & d), i)
            case 16..<32: (f, g) = ((d & b) | (~d & c), (5 * i + 1) % 16)
            case 32..<48: (f, g) = (b ^ c ^ d, (3 * i + 5) % 16)
            default: (f, g) = (c ^ (b | ~d), (7 * i) % 16)
            }
            let m = UInt32(littleEndian: block.loadUnaligned(fromByteOffset: g * 4, as: UInt32.self))
            f = f &+ a &+ MD5Core.k[i] &+ m
            a = d
            d = c
            c = b
            b = b &+ f.rotatedLeft(MD5Core.shifts[(i / 16) * 4 + i % 4])
        }
        state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d)
    }
}

/// Words to and from bytes, for chaining values.
private enum Words<W: FixedWidthInteger> {
    static func read(_ bytes: [UInt8], count: Int, bigEndian: Bool) -> [W]? {
        let size = W.bitWidth / 8
        guard bytes.count == count * size else { return nil }
        return (0..<count).map { i in
            let chunk = bytes[(i * size)..<((i + 1) * size)]
            let ordered = bigEndian ? Array(chunk) : chunk.reversed()
            return ordered.reduce(W.zero) { ($0 << 8) | W($1) }
        }
    }

    static func bytes(_ words: [W], bigEndian: Bool) -> [UInt8] {
        let size = W.bitWidth / 8
        var out: [UInt8] = []
        out.reserveCapacity(words.count * size)
        for word in words {
            for i in 0..<size {
                let shift = bigEndian ? (size - 1 - i) * 8 : i * 8
                out.append(UInt8(truncatingIfNeeded: word >> shift))
            }
        }
        return out
    }
}

// Concrete, not generic over FixedWidthInteger: an unspecialized generic in a debug build
// (the tests) made each rotation a witness call.
extension UInt32 {
    @inline(__always) fileprivate func rotatedRight(_ n: UInt32) -> UInt32 { (self >> n) | (self << (32 - n)) }
    @inline(__always) fileprivate func rotatedLeft(_ n: UInt32) -> UInt32 { (self << n) | (self >> (32 - n)) }
}

extension UInt64 {
    @inline(__always) fileprivate func rotatedRight(_ n: UInt64) -> UInt64 { (self >> n) | (self << (64 - n)) }
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
