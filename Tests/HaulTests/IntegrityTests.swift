import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Checksums: several algorithms, server digests, hashes kept with the record", .fewAtOnce)
struct IntegrityTests {
    static let size = 3_000_000

    static func checksum(_ algorithm: Checksum.Algorithm, version: Int = 0, size: Int = size) -> Checksum {
        Checksum(algorithm, digest: TestContent.digest(algorithm, version: version, count: size))!
    }

    @Test(arguments: [1, 4])
    func everyAlgorithmIsCheckedAtOnce(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        options.checksums = Checksum.Algorithm.allCases.map { Self.checksum($0) }
        let dest = dir.url.appendingPathComponent("all-\(connections).bin")
        let (ok, _) = await run(testSession(), server.url("/all?size=\(Self.size)"), to: .file(dest), options: options)
        #expect(ok.error == nil, "\(String(describing: ok.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: Self.size))

        // One wrong among right ones: the file is not put in place, and nothing is left.
        options.checksums[2] = Self.checksum(.sha1, version: 1)
        let bad = dir.url.appendingPathComponent("bad-\(connections).bin")
        let (no, _) = await run(testSession(), server.url("/all?size=\(Self.size)"), to: .file(bad), options: options)
        let error = try #require(no.error)
        #expect(error.code == .checksumMismatch)
        #expect(error.message.hasPrefix("SHA-1 of \(bad.path) is "), "\(error.message)")
        #expect(error.message.hasSuffix("expected \(Self.checksum(.sha1, version: 1).hex)"), "\(error.message)")
        #expect(dir.contents() == ["all-\(connections).bin"])
    }

    @Test(arguments: [1, 4])
    func aServersReprDigestIsChecked(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        for (query, fails) in [
            ("digest=repr", false), ("digest=sha512", false), ("digest=malformed", false),
            ("digest=repr&digestof=1", true), ("digest=sha512&digestof=1", true),
        ] {
            let name = "f-\(connections)-\(query.filter(\.isLetter))"
            let dest = dir.url.appendingPathComponent(name)
            let (result, _) = await run(
                testSession(), server.url("/\(name)?size=\(Self.size)&\(query)"), to: .file(dest), options: options)
            if fails {
                let error = try #require(result.error, "\(query)")
                #expect(error.code == .checksumMismatch)
                #expect(
                    error.message.contains(", the server's Repr-Digest (not checked with --no-server-digest) says "),
                    "\(error.message)")
                #expect(!fileExists(dest.path) && !fileExists(dest.path + ".part") && !fileExists(dest.path + ".haul"))
            } else {
                #expect(result.error == nil, "\(query): \(String(describing: result.error))")
                expectFile(dest.path, equals: TestContent.bytes(count: Self.size))
            }
        }
    }

    @Test func aContentDigestCountsOnlyForAWholeAnswer() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // A 200 whose Content-Digest is of another version's bytes: wrong.
        let one = dir.url.appendingPathComponent("one")
        let (wrong, _) = await run(
            testSession(), server.url("/c?size=\(Self.size)&digest=content&digestof=1"), to: .file(one))
        #expect(wrong.error?.code == .checksumMismatch, "\(String(describing: wrong.error))")
        #expect(
            wrong.error?.message.contains("the server's Content-Digest (not checked with --no-server-digest) says")
                == true)
        // On four connections every answer is a 206, whose Content-Digest covers its range only:
        // the right ones are no reason to fail.
        var options = DownloadOptions()
        options.connections = 4
        let four = dir.url.appendingPathComponent("four")
        let (ranged, _) = await run(
            testSession(), server.url("/c?size=\(Self.size)&digest=content"), to: .file(four), options: options)
        #expect(ranged.error == nil, "\(String(describing: ranged.error))")
        expectFile(four.path, equals: TestContent.bytes(count: Self.size))
    }

    /// The hashes a one-connection download computes as it writes go into its record, and a
    /// resume goes on from them: the record's state is of the partial's first bytes; a byte
    /// changed before it between the runs goes unseen (the file was not read again: the
    /// trade docs/integrity.md names); a state that is wrong fails the check, which reads the
    /// file once more before it deletes anything; a state that is no state, or none (an older
    /// haul's record), is not used.
    @Test func theHashesGoOnFromTheRecord() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.checksums = [Self.checksum(.sha256), Self.checksum(.md5)]
        let noRetry = testSession { $0.retry.maxRetries = 0 }
        for name in ["kept", "changed", "forged", "garbled", "none"] {
            let url = server.url("/\(name)?size=\(Self.size)&drop=400000&drops=1")
            let dest = dir.url.appendingPathComponent(name)
            let (dropped, _) = await run(noRetry, url, to: .file(dest), options: options)
            #expect(
                dropped.error?.code == .incompleteBody || dropped.error?.code == .network,
                "\(String(describing: dropped.error))")
            var record = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul")))
            let hashes = try #require(record.hashes)
            #expect(Set(hashes.map(\.algorithm)) == ["sha-256", "md5"])
            var partial = bytes(at: dest.path + ".part")
            for state in hashes {
                let block: Int64 = state.algorithm == "sha-512" ? 128 : 64
                #expect(state.offset > 0 && state.offset <= record.contiguousBytes && state.offset % block == 0)
                let algorithm = try #require(Checksum.Algorithm(rawValue: state.algorithm))
                var hasher = MultiHasher([algorithm])
                partial.withUnsafeBytes {
                    hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<Int(state.offset)]), at: 0)
                }
                #expect(hasher.states.first?.state == state.state, "\(state.algorithm)")
            }
            if name == "changed" {
                partial[100] ^= 0xFF
            } else if name == "none" {
                record.hashes = nil  // an older haul's record: the partial is hashed from byte 0
            } else if name != "kept" {
                record.hashes = hashes.map { state in
                    var s = state
                    s.state = name == "forged" ? String(repeating: "0", count: state.state.count) : "not hex"
                    return s
                }
            }
            if name != "kept" {
                // Written as haul would (bound to the partial).
                record.partial = nil
                plantPartial(dest.path, partial, record: record)
            }
            let (resumed, log) = await run(testSession(), url, to: .file(dest), options: options)
            let offsets = log.events.compactMap { if case .started(let s) = $0 { s.offset } else { nil } }
            #expect(offsets == [400_000], "\(name): it resumed")
            #expect(resumed.error == nil, "\(name): \(String(describing: resumed.error))")
            var expected = TestContent.bytes(count: Self.size)
            if name == "changed" { expected[100] ^= 0xFF }
            expectFile(dest.path, equals: expected)
        }
    }

    /// A retry in the same run goes on from the hashes in memory, past drops at and off block
    /// boundaries, and a 200 that replaces the partial (no Range support) starts them afresh.
    @Test func retriesGoOnFromTheHashesInMemory() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.checksums = Checksum.Algorithm.allCases.map { Self.checksum($0) }
        for query in ["drop=400000&drops=1", "drop=400001&drops=2", "drop=400000&drops=1&ranges=0"] {
            let dest = dir.url.appendingPathComponent(query.filter(\.isNumber))
            let (result, log) = await run(
                testSession(), server.url("/r?size=\(Self.size)&\(query)"), to: .file(dest), options: options)
            #expect(result.error == nil, "\(query): \(String(describing: result.error))")
            #expect(log.retries.count >= 1, "\(query)")
            expectFile(dest.path, equals: TestContent.bytes(count: Self.size))
        }
    }

    /// The caller's digests are the word on the file: with them a server's are not checked (a
    /// CDN's stale Repr-Digest cannot make a right file undownloadable), and without them
    /// `checksServerDigests = false` turns the server's off.
    @Test(arguments: [1, 4])
    func givenDigestsWinOverTheServers(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/w?size=\(Self.size)&digest=repr&digestof=1")
        var given = DownloadOptions()
        given.connections = connections
        given.checksums = [Self.checksum(.sha256)]
        let one = dir.url.appendingPathComponent("given")
        let (ok, _) = await run(testSession(), url, to: .file(one), options: given)
        #expect(ok.error == nil, "\(String(describing: ok.error))")
        expectFile(one.path, equals: TestContent.bytes(count: Self.size))
        var off = DownloadOptions()
        off.connections = connections
        off.checksServerDigests = false
        let two = dir.url.appendingPathComponent("off")
        let (fine, _) = await run(testSession(), url, to: .file(two), options: off)
        #expect(fine.error == nil, "\(String(describing: fine.error))")
    }

    /// A file already in place with the server's size, and a Repr-Digest that is not its: not
    /// taken as the download, on one connection as on four.
    @Test(arguments: [1, 4])
    func aFileAlreadyThereIsCheckedAgainstTheServersDigest(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("there-\(connections).bin")
        let other = TestContent.bytes(version: 1, count: 70_000)
        #expect(FileManager.default.createFile(atPath: dest.path, contents: Data(other)))
        var options = DownloadOptions()
        options.connections = connections
        let (result, _) = await run(
            testSession(), server.url("/there?size=70000&digest=repr"), to: .file(dest), options: options)
        #expect(result.error?.code == .checksumMismatch, "\(String(describing: result.error))")
        #expect(bytes(at: dest.path) == other, "not ours to delete")
    }

    /// A full disk gives back the partial's tail: the record's hashes then are ones within the
    /// bytes it still claims, and the rerun verifies.
    @Test func aFullDiskKeepsHashesWithinTheBytesLeft() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("full.bin")
        let part = dest.path + ".part"
        let written = LockedCounter()
        // Past 2 MB (after a checkpoint, at 1 MB/s), one pwrite fails with ENOSPC.
        let hook = FaultInjection.add { call, count, path in
            guard call == .pwrite, path == part else { return nil }
            return written.add(count) > 2_000_000 && written.fireOnce() ? .noSpace : nil
        }
        var options = DownloadOptions()
        options.checksums = [Self.checksum(.sha256), Self.checksum(.sha512)]
        let url = server.url("/full.bin?size=\(Self.size)&rate=1000000")
        let (result, _) = await run(testSession(), url, to: .file(dest), options: options)
        FaultInjection.remove(hook)
        #expect(result.error?.code == .diskFull, "\(String(describing: result.error))")
        let record = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul")))
        let hashes = try #require(record.hashes)
        #expect(!hashes.isEmpty && hashes.allSatisfy { $0.offset <= record.contiguousBytes }, "\(hashes)")
        let (again, _) = await run(testSession(), url, to: .file(dest), options: options)
        #expect(again.error == nil, "\(String(describing: again.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: Self.size))
    }

    @Test func twoDigestsOfOneAlgorithmAreRefusedBeforeAnyRequest() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.checksums = [Self.checksum(.md5), Self.checksum(.md5, version: 1)]
        let (result, _) = await run(
            testSession(), server.url("/two?size=1000"), to: .file(dir.url.appendingPathComponent("two")),
            options: options)
        #expect(result.error?.code == .usage && result.error?.message.contains("two different md5") == true)
        #expect(server.requests.isEmpty)
    }

    @Test func aFileAlreadyThereCountsOnlyWithItsDigests() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("there.bin")
        let other = TestContent.bytes(version: 1, count: 70_000)
        #expect(FileManager.default.createFile(atPath: dest.path, contents: Data(other)))
        var options = DownloadOptions()
        options.checksums = [Self.checksum(.sha512, size: 70_000)]
        let (result, _) = await run(testSession(), server.url("/there?size=70000"), to: .file(dest), options: options)
        let error = try #require(result.error)
        #expect(error.code == .checksumMismatch && error.message.contains("use --overwrite"), "\(error.message)")
        #expect(bytes(at: dest.path) == other, "not ours to delete")
    }
}
