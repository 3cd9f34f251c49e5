import CHaulCurl

// The hash functions `--checksum` and RFC 9530 digests name, as block hashers: SHA-256 and
// SHA-512 (FIPS 180-4), SHA-1 (FIPS 180-4, for legacy mirrors) and MD5 (RFC 1321, likewise);
// their compressions are in HashCores.swift. Foundation on Linux has no CryptoKit, so Haul
// carries its own code, and hands whole blocks to libcrypto where it is there (the CPU's SHA
// instructions). Each can hand out its state at a block boundary and start again from it, so
// that a resume record can carry a download's hash so far (docs/integrity.md).

/// One hash function's compression: its chaining state (a tuple of ``wordCount`` words, laid
/// out in order as libcrypto's context begins) and how a block changes it.
package protocol BlockHashCore: Sendable {
    associatedtype Word: FixedWidthInteger & Sendable
    associatedtype State: Sendable
    /// Bytes per block.
    static var blockSize: Int { get }
    /// Words of the state (and of the digest).
    static var wordCount: Int { get }
    /// Whether the message length and the words are big-endian (the SHA family) or little (MD5).
    static var bigEndian: Bool { get }
    /// Bytes the message length takes in the last block.
    static var lengthSize: Int { get }
    /// `haul_digest_blocks`'s name for the function.
    static var libcryptoID: Int32 { get }
    var state: State { get set }
    init()
    mutating func compress(_ block: UnsafeRawPointer)
}

extension BlockHashCore {
    /// Bytes of the digest (and of ``chainValue``).
    package static var digestSize: Int { wordCount * Word.bitWidth / 8 }

    /// The state from a ``chainValue``; nil when it has the wrong size.
    package init?(chainValue: [UInt8]) {
        guard let words = Words<Word>.read(chainValue, count: Self.wordCount, bigEndian: Self.bigEndian) else {
            return nil
        }
        self.init()
        withUnsafeMutableBytes(of: &state) { raw in
            for (i, word) in words.enumerated() {
                raw.storeBytes(of: word, toByteOffset: i * Word.bitWidth / 8, as: Word.self)
            }
        }
    }

    /// The state as bytes: the digest, once the last block is in.
    package var chainValue: [UInt8] {
        let words = withUnsafeBytes(of: state) { raw in
            (0..<Self.wordCount).map { raw.loadUnaligned(fromByteOffset: $0 * Word.bitWidth / 8, as: Word.self) }
        }
        return Words.bytes(words, bigEndian: Self.bigEndian)
    }

    /// `count` whole blocks from `p`: through libcrypto where it is there (its code uses the
    /// CPU's SHA instructions), unless `portable`, else ``compress(_:)`` block by block.
    package mutating func compress(blocks p: UnsafeRawPointer, count: Int, portable: Bool) {
        if !portable,
            withUnsafeMutableBytes(of: &state, { haul_digest_blocks(Self.libcryptoID, $0.baseAddress, p, count) }) == 1
        {
            return
        }
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
        if bytes.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) != nil { return }
        Array(bytes).withUnsafeBytes { update($0) }
    }

    /// The digest: the padding and the length go in (the hasher is spent).
    package mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        let block = Core.blockSize
        let tail = block - Core.lengthSize
        let rem = (buffered + 1) % block
        let zeros = rem <= tail ? tail - rem : block + tail - rem
        // 0x80, the zeros, then the length in bits (its low 8 bytes: a longer length field's
        // high bytes stay 0), in one buffer: a claim hashes a short key for every download.
        var pad = [UInt8](repeating: 0, count: 1 + zeros + Core.lengthSize)
        pad[0] = 0x80
        let lengthAt = 1 + zeros
        for i in 0..<8 {
            let at = Core.bigEndian ? lengthAt + Core.lengthSize - 1 - i : lengthAt + i
            pad[at] = UInt8(truncatingIfNeeded: bitLength >> (UInt64(i) * 8))
        }
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
    let id =
        switch algorithm {
        case .sha256: SHA2Core<UInt32>.libcryptoID
        case .sha512: SHA2Core<UInt64>.libcryptoID
        case .sha1: SHA1Core.libcryptoID
        case .md5: MD5Core.libcryptoID
        }
    return haul_digest_available(id) == 1
}

package typealias SHA256 = BlockHasher<SHA2Core<UInt32>>
package typealias SHA512 = BlockHasher<SHA2Core<UInt64>>
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

/// Words to and from bytes, for chaining values.
enum Words<W: FixedWidthInteger> {
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

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
