import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Checksums: several algorithms, server digests, hashes kept with the record", .fewAtOnce)
struct IntegrityTests {
    static let size = 1_200_000

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
                #expect(error.message.contains(", the server's Repr-Digest says "), "\(error.message)")
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
        #expect(wrong.error?.message.contains("the server's Content-Digest says") == true)
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
    /// resume goes on from them: the record's state is of the partial's first bytes, and a state
    /// that is not theirs makes the checksum fail (so it was used, not the file read again).
    @Test func theHashesGoOnFromTheRecord() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.checksums = [Self.checksum(.sha256), Self.checksum(.md5)]
        let noRetry = testSession { $0.retry.maxRetries = 0 }
        for name in ["kept", "forged", "garbled"] {
            let url = server.url("/\(name)?size=\(Self.size)&drop=400000&drops=1")
            let dest = dir.url.appendingPathComponent(name)
            let (dropped, _) = await run(noRetry, url, to: .file(dest), options: options)
            #expect(
                dropped.error?.code == .incompleteBody || dropped.error?.code == .network,
                "\(String(describing: dropped.error))")
            var record = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul")))
            let hashes = try #require(record.hashes)
            #expect(Set(hashes.map(\.algorithm)) == ["sha-256", "md5"])
            let partial = bytes(at: dest.path + ".part")
            for state in hashes {
                #expect(state.offset > 0 && state.offset <= record.contiguousBytes && state.offset % 64 == 0)
                let algorithm = try #require(Checksum.Algorithm(rawValue: state.algorithm))
                var hasher = MultiHasher([algorithm])
                partial.withUnsafeBytes {
                    hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<Int(state.offset)]), at: 0)
                }
                #expect(hasher.states.first?.state == state.state, "\(state.algorithm)")
            }
            if name != "kept" {
                // Written by haul as it would (bound to the partial), with another state.
                record.hashes = hashes.map { state in
                    var s = state
                    s.state = name == "forged" ? String(repeating: "0", count: state.state.count) : "not hex"
                    return s
                }
                record.partial = nil
                plantPartial(dest.path, partial, record: record)
            }
            let (resumed, log) = await run(testSession(), url, to: .file(dest), options: options)
            let offsets = log.events.compactMap { if case .started(let s) = $0 { s.offset } else { nil } }
            #expect(offsets == [400_000], "\(name): it resumed")
            if name == "forged" {
                #expect(resumed.error?.code == .checksumMismatch, "\(String(describing: resumed.error))")
                #expect(!fileExists(dest.path))
            } else {
                // A state that is no state is read again from the file instead.
                #expect(resumed.error == nil, "\(name): \(String(describing: resumed.error))")
                expectFile(dest.path, equals: TestContent.bytes(count: Self.size))
            }
        }
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
