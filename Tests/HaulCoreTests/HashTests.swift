import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Hashes and checksums: SHA-256, SHA-512, SHA-1, MD5, their states, RFC 9530 fields", .fewAtOnce)
struct HashTests {
    /// Bytes that are not a pattern a broken hash could get right by chance.
    static func sample(_ count: Int) -> [UInt8] {
        var x: UInt32 = 2_463_534_242
        return (0..<count).map { _ in
            x ^= x << 13
            x ^= x >> 17
            x ^= x << 5
            return UInt8(truncatingIfNeeded: x)
        }
    }

    /// Lengths around every block and padding boundary of 64- and 128-byte blocks.
    static let lengths = [0, 1, 3, 55, 56, 57, 63, 64, 65, 111, 112, 113, 119, 120, 127, 128, 129, 1000, 100_003]

    @Test(arguments: Checksum.Algorithm.allCases)
    func eachHashAgreesWithCoreutils(algorithm: Checksum.Algorithm) async throws {
        let tool = ["sha-256": "sha256sum", "sha-512": "sha512sum", "sha-1": "sha1sum", "md5": "md5sum"][
            algorithm.rawValue]!
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var files: [String] = []
        for n in Self.lengths {
            let path = dir.file("f\(n)")
            #expect(FileManager.default.createFile(atPath: path, contents: Data(Self.sample(n))))
            files.append(path)
        }
        let child = try ChildProcess("/usr/bin/" + tool, files)
        #expect(await child.finish() == 0)
        let expected = String(decoding: child.stdout, as: UTF8.self).split(separator: "\n").map {
            String($0.prefix { $0 != " " })
        }
        #expect(expected.count == files.count)
        for (i, path) in files.enumerated() {
            let got = try MultiHasher.digests(ofFile: path, [algorithm])[algorithm].map { Hex.string($0) }
            #expect(got == expected[i], "\(algorithm) of \(Self.lengths[i]) bytes")
            #expect(Self.portable(algorithm, Self.sample(Self.lengths[i])) == expected[i], "portable \(algorithm)")
        }
    }

    /// The digest by Haul's own code, without libcrypto.
    static func portable(_ algorithm: Checksum.Algorithm, _ data: [UInt8]) -> String {
        func run<Core>(_ hasher: BlockHasher<Core>) -> String {
            var hasher = hasher
            // In pieces that cross block boundaries, whole blocks among them.
            var at = 0
            for piece in [1, 200, 7, 4096, 63] where at < data.count {
                let end = min(data.count, at + piece)
                hasher.update(data[at..<end])
                at = end
            }
            hasher.update(data[at...])
            return hasher.hexDigest()
        }
        switch algorithm {
        case .sha256: return run(SHA256(portable: true))
        case .sha512: return run(SHA512(portable: true))
        case .sha1: return run(SHA1(portable: true))
        case .md5: return run(MD5(portable: true))
        }
    }

    /// Where libcrypto.so.3 is installed (Debian's libcurl brings it), it is the one hashing:
    /// otherwise the coreutils test above would pass on Haul's own code alone.
    @Test(
        .enabled(
            if: dlopen("libcrypto.so.3", RTLD_NOW | RTLD_NOLOAD) != nil || dlopen("libcrypto.so.3", RTLD_NOW) != nil))
    func libcryptoHashesWhereItIsInstalled() {
        for algorithm in Checksum.Algorithm.allCases { #expect(libcryptoHashes(algorithm), "\(algorithm)") }
    }

    @Test func knownAnswers() {
        func hex(_ a: Checksum.Algorithm, _ text: String) -> String {
            var h = MultiHasher([a])
            Array(text.utf8).withUnsafeBytes { h.update($0, at: 0) }
            return Hex.string(h.digests()[a]!)
        }
        #expect(hex(.md5, "abc") == "900150983cd24fb0d6963f7d28e17f72")
        #expect(hex(.sha1, "abc") == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(hex(.sha256, "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            hex(.sha512, "abc")
                == "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd"
                + "454d4423643ce80e2a9ac94fa54ca49f")
    }

    /// What a resume record keeps: the state at the last whole block, from which the rest of
    /// the bytes (read again from there) give the same digest as one pass.
    @Test(arguments: Checksum.Algorithm.allCases)
    func aHashGoesOnFromItsBlockState(algorithm: Checksum.Algorithm) throws {
        let data = Self.sample(10_000)
        var whole = MultiHasher([algorithm])
        data.withUnsafeBytes { whole.update($0, at: 0) }
        let expected = whole.digests()[algorithm]
        for cut in [0, 1, 63, 64, 127, 128, 129, 5_000, 9_999, 10_000] {
            var first = MultiHasher([algorithm])
            data.withUnsafeBytes { first.update(UnsafeRawBufferPointer(rebasing: $0[0..<cut]), at: 0) }
            let states = first.states
            #expect(states.count == 1 && states[0].offset <= Int64(cut) && states[0].offset % 64 == 0)
            var resumed = MultiHasher([algorithm], resuming: states, upTo: Int64(cut))
            #expect(resumed.hashedFrom == states[0].offset)
            let from = Int(resumed.hashedFrom)
            data.withUnsafeBytes { resumed.update(UnsafeRawBufferPointer(rebasing: $0[from...]), at: Int64(from)) }
            #expect(resumed.covers(exactly: 10_000))
            #expect(resumed.digests()[algorithm] == expected, "\(algorithm) cut at \(cut)")
        }
    }

    @Test func aStateThatIsNotOneIsNotResumedFrom() {
        let good = HashState(algorithm: "sha-256", offset: 128, state: String(repeating: "ab", count: 32))
        let cases = [
            HashState(algorithm: "sha-256", offset: 100, state: good.state),  // not on a block boundary
            HashState(algorithm: "sha-256", offset: 128, state: "ab"),  // the wrong size
            HashState(algorithm: "sha-256", offset: 128, state: String(repeating: "zz", count: 32)),  // not hex
            HashState(algorithm: "sha-256", offset: -64, state: good.state),
            HashState(algorithm: "sha-256", offset: 192, state: good.state),  // past the resume offset
            HashState(algorithm: "crc", offset: 128, state: good.state),
        ]
        for bad in cases {
            #expect(MultiHasher([.sha256], resuming: [bad], upTo: 150).hashedFrom == 0, "\(bad)")
        }
        #expect(MultiHasher([.sha256], resuming: [good], upTo: 150).hashedFrom == 128)
    }

    @Test func aHashGivenAGapStops() {
        var h = MultiHasher([.sha256, .md5])
        let data = Self.sample(100)
        data.withUnsafeBytes { h.update($0, at: 0) }
        data.withUnsafeBytes { h.update($0, at: 50) }  // overlap: only the new 50 bytes go in
        #expect(h.covers(exactly: 150))
        data.withUnsafeBytes { h.update($0, at: 200) }  // a gap
        #expect(h.isEmpty)
    }

    @Test func checksumsParseAsAria2AndCoreutilsNameThem() throws {
        let md5 = String(repeating: "A", count: 32)
        #expect(try Checksum("MD5=\(md5)").description == "md5=" + md5.lowercased())
        #expect(try Checksum("sha256=" + String(repeating: "0", count: 64)).algorithm == .sha256)
        #expect(try Checksum("SHA-512=" + String(repeating: "1", count: 128)).algorithm == .sha512)
        #expect(try Checksum("sha-1=" + String(repeating: "f", count: 40)).algorithm == .sha1)
        for bad in [
            "md5", "md5=", "crc32=abcd", "sha-1=" + String(repeating: "f", count: 64),
            "md5=" + String(repeating: "g", count: 32), "sha-256=١٢",
        ] {
            #expect(throws: HaulError.self, "\(bad)") { try Checksum(bad) }
        }
    }

    @Test func reprDigestIsReadAsRFC9530WritesIt() throws {
        let digest = [UInt8](repeating: 7, count: 32)
        let b64 = Data(digest).base64EncodedString()
        let long = Data([UInt8](repeating: 9, count: 64)).base64EncodedString()
        func vouched(_ fields: [(String, String)], status: Int = 206) -> [String] {
            var h = HTTPHeaders()
            for (n, v) in fields { h.add(n, v) }
            return Checksum.vouched(by: h, status: status).map { "\($0.source) \($0.algorithm.rawValue)" }
        }
        #expect(vouched([("Repr-Digest", "sha-256=:\(b64):")]) == ["reprDigest sha-256"])
        #expect(
            vouched([("repr-digest", " unixsum=:AAA=:, sha-512=:\(long):;q=1 , sha-256=:\(b64):")])
                == ["reprDigest sha-512", "reprDigest sha-256"])
        // A member that is not a byte sequence, a wrong size, a broken dictionary: the field goes.
        #expect(vouched([("Repr-Digest", "sha-256=\(b64)")]).isEmpty)
        #expect(vouched([("Repr-Digest", "sha-256=:\(long):")]).isEmpty)
        // A digest of the wrong size is skipped, not the field; a key twice counts once, its
        // last value, across field lines too.
        #expect(vouched([("Repr-Digest", "sha-256=:AAAA:, sha-512=:\(long):")]) == ["reprDigest sha-512"])
        var twice = HTTPHeaders()
        twice.add("Repr-Digest", "sha-256=:\(Data(count: 32).base64EncodedString()):")
        twice.add("Repr-Digest", "sha-256=:\(b64):")
        #expect(Checksum.vouched(by: twice, status: 206).map(\.digest) == [digest])
        #expect(vouched([("Repr-Digest", "sha-256=:\(b64):, ,")]).isEmpty)
        #expect(vouched([("Repr-Digest", "SHA-256=:\(b64):")]).isEmpty)
        #expect(vouched([("Repr-Digest", "sha-256=:\(b64)")]).isEmpty)
        // Content-Digest vouches for the file only as a whole answer without a content coding.
        #expect(vouched([("Content-Digest", "sha-256=:\(b64):")], status: 200) == ["contentDigest sha-256"])
        #expect(vouched([("Content-Digest", "sha-256=:\(b64):")], status: 206).isEmpty)
        #expect(
            vouched([("Content-Digest", "sha-256=:\(b64):"), ("Content-Encoding", "gzip")], status: 200).isEmpty)
        // Legacy and unregistered algorithms are not checked.
        #expect(vouched([("Repr-Digest", "md5=:\(Data(count: 16).base64EncodedString()):")]).isEmpty)
    }
}
