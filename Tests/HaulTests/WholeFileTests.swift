import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// A small file that comes whole with the probe is written with no name (O_TMPFILE) and named
/// once synced: no partial, no record, nothing left by a failure (docs/startup.md).
@Suite("Small files written whole", .fewAtOnce)
struct WholeFileTests {
    /// Every side file a small download touched cost a create, a rename and an unlink; now
    /// none is made. The hook sees every open, rename and link through the syscall seam (the
    /// record's name is opened too, to read a leftover one: those are look-ups, not counted).
    @Test func aSmallFileIsNeverOnDiskUnderASideFileName() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("whole.bin")
        let seen = Locked<[String]>([])
        let hook = FaultInjection.add { call, _, path in
            if let path, path.hasPrefix(dest), [.open, .rename, .link].contains(call), path != dest + ".haul" {
                seen.withLock { $0.append("\(call) \(path)") }
            }
            return nil
        }
        var options = DownloadOptions()
        options.connections = 4
        let (result, _) = await run(
            testSession(), server.url("/whole.bin?size=20000"), to: .file(URL(fileURLWithPath: dest)), options: options)
        FaultInjection.remove(hook)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: 20000))
        #expect(seen.get() == ["link \(dest)"], "\(seen.get())")
        #expect(dir.contents() == ["whole.bin"])
    }

    /// A body that does not match `--checksum` is never written: no file, no partial.
    @Test func aSmallFileWithTheWrongChecksumLeavesNothing() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = 4
        options.checksums = [try Checksum("sha-256=" + String(repeating: "0", count: 64))]
        let (result, _) = await run(
            testSession(), server.url("/bad.bin?size=20000"), to: .file(dir.url.appendingPathComponent("bad.bin")),
            options: options)
        let error = try #require(result.error)
        #expect(error.code == .checksumMismatch && error.message.contains("expected 000"), "\(error)")
        #expect(dir.contents().isEmpty, "\(dir.contents())")
    }

    /// `--overwrite` may replace the destination, which a link cannot: the partial's way, and
    /// the old file is replaced.
    @Test func overwritingASmallFileReplacesIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("old.bin")
        #expect(FileManager.default.createFile(atPath: dest, contents: Data("old".utf8)))
        var options = DownloadOptions()
        options.connections = 4
        options.overwrite = true
        let (result, _) = await run(
            testSession(), server.url("/old.bin?size=20000"), to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: 20000))
        #expect(dir.contents() == ["old.bin"])
    }

    func smallDownload(
        _ server: TestServer, _ dest: String, sha256: String? = nil
    ) async -> (DownloadResult?, HaulError?) {
        var options = DownloadOptions()
        options.connections = 4
        options.checksums = sha256.map { [Checksum(.sha256, digest: Checksum.hexBytes(Substring($0))!)!] } ?? []
        let name = URL(fileURLWithPath: dest).lastPathComponent
        let (result, _) = await run(
            testSession(), server.url("/\(name)?size=20000"), to: .file(URL(fileURLWithPath: dest)), options: options)
        return (result.value, result.error)
    }

    /// A security module or a mount that refuses the link: the bytes take the partial's way,
    /// and the next small file in that directory does not try again.
    @Test func aRefusedLinkFallsBackToAPartialAndIsNotTriedAgainThere() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let links = Locked(0)
        let hook = FaultInjection.add { call, _, path in
            guard call == .link, let path, path.hasPrefix(dir.path) else { return nil }
            links.withLock { $0 += 1 }
            return Errno(EACCES)
        }
        let first = await smallDownload(server, dir.file("first.bin"))
        let second = await smallDownload(server, dir.file("second.bin"))
        FaultInjection.remove(hook)
        #expect(first.1 == nil && second.1 == nil, "\(String(describing: first.1)) \(String(describing: second.1))")
        expectFile(dir.file("first.bin"), equals: TestContent.bytes(count: 20000))
        expectFile(dir.file("second.bin"), equals: TestContent.bytes(count: 20000))
        #expect(links.get() == 1)
        #expect(dir.contents() == ["first.bin", "second.bin"])
    }

    /// A file system without O_TMPFILE: the partial's way, and the download succeeds.
    @Test func withoutUnnamedFilesTheSmallFileTakesThePartialsWay() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("plain.bin")
        let opened = Locked<[String]>([])
        let hook = FaultInjection.add { call, _, path in
            guard call == .open, let path else { return nil }
            if path == dir.path { return Errno(EOPNOTSUPP) }
            if path.hasPrefix(dest) { opened.withLock { $0.append(path) } }
            return nil
        }
        let (_, error) = await smallDownload(server, dest)
        FaultInjection.remove(hook)
        #expect(error == nil, "\(String(describing: error))")
        expectFile(dest, equals: TestContent.bytes(count: 20000))
        #expect(opened.get().contains(dest + ".part"), "\(opened.get())")
        #expect(dir.contents() == ["plain.bin"])
    }

    /// A full disk while the unnamed file is written: reported as one, nothing left.
    @Test func aFullDiskIsReportedAndLeavesNothing() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("full.bin")
        let hook = FaultInjection.add { call, _, path in call == .pwrite && path == dest + ".part" ? Errno(ENOSPC) : nil
        }
        let (_, error) = await smallDownload(server, dest)
        FaultInjection.remove(hook)
        #expect(error?.code == .diskFull, "\(String(describing: error))")
        #expect(dir.contents().isEmpty, "\(dir.contents())")
    }
}
