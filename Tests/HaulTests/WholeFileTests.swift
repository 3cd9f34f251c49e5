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
    /// none is made. The hook sees every open, rename and link through the syscall seam.
    @Test func aSmallFileIsNeverOnDiskUnderASideFileName() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("whole.bin")
        let seen = Locked<[String]>([])
        let hook = FaultInjection.add { call, _, path in
            if let path, path.hasPrefix(dest), [.open, .rename, .link].contains(call) {
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
        options.sha256 = String(repeating: "0", count: 64)
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
}
