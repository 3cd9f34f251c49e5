import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Destination closures and completion handlers", .fewAtOnce)
struct DestinationClosureTests {
    func session(_ temporary: TemporaryDirectory) -> HaulSession {
        testSession { $0.temporaryDirectory = temporary.url }
    }

    @Test func closurePlacesTheFinishedFileCreatingDirectories() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let temporary = try TemporaryDirectory()
        defer { cleanUp(server, dir, temporary) }
        let seen = Box<(URL, DownloadStart)?>(nil)
        let final = dir.url.appendingPathComponent("a/b/c.bin")
        let result = try await session(temporary).download(
            from: server.url("/c.bin?size=300000"),
            to: .custom { temporaryURL, response in
                seen.set((temporaryURL, response))
                return (final, [.createIntermediateDirectories])
            })
        #expect(result.fileURL == final)
        expectFile(final.path, equals: TestContent.bytes(count: 300_000))
        let (temporaryURL, response) = try #require(seen.get())
        #expect(temporaryURL.path.hasPrefix(temporary.path))
        #expect(response.status == 200 && response.totalBytes == 300_000)
        #expect(temporary.contents().isEmpty)
    }

    /// A closure that keeps the file where it is (its own temporary URL) with .removePreviousFile
    /// had the download deleted as "the previous file", then failed to move it.
    @Test func theTemporaryURLItselfAsTheFinalPlaceKeepsTheFile() async throws {
        let server = try TestServer()
        let temporary = try TemporaryDirectory()
        defer { cleanUp(server, temporary) }
        for options: DestinationOptions in [[], [.removePreviousFile]] {
            let result = try await session(temporary).download(
                from: server.url("/stay.bin?size=5000"), to: .custom { temporaryURL, _ in (temporaryURL, options) })
            expectFile(result.fileURL.path, equals: TestContent.bytes(count: 5000))
            try FileManager.default.removeItem(at: result.fileURL)
        }
    }

    /// The temporary file on another file system (tmpfs) than the final place: rename fails with
    /// EXDEV and the file is copied; the copy goes in under a temporary name first, so a copy cut
    /// short leaves nothing under the final name.
    @Test func aPlaceOnAnotherFileSystemGetsACopy() async throws {
        guard Sys.isDirectory("/dev/shm") else { return }  // no tmpfs here: nothing to cross
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let shm = "/dev/shm/haul-test-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: shm) }
        let session = testSession { $0.temporaryDirectory = URL(fileURLWithPath: shm) }
        let final = dir.url.appendingPathComponent("moved.bin")
        let result = try await session.download(
            from: server.url("/moved.bin?size=300000"), to: .custom { _, _ in (final, []) })
        #expect(result.fileURL == final)
        expectFile(final.path, equals: TestContent.bytes(count: 300_000))
        #expect(dir.contents() == ["moved.bin"])
        #expect((try? FileManager.default.contentsOfDirectory(atPath: shm)) ?? [] == [])
    }

    @Test func existingFinalFileNeedsRemovePreviousFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let temporary = try TemporaryDirectory()
        defer { cleanUp(server, dir, temporary) }
        let final = dir.url.appendingPathComponent("x.bin")
        #expect(FileManager.default.createFile(atPath: final.path, contents: Data("old".utf8)))
        let url = server.url("/x.bin?size=1000")
        let refused = await #expect(throws: HaulError.self) {
            try await session(temporary).download(from: url, to: .custom { _, _ in (final, []) })
        }
        #expect(refused?.code == .destinationExists)
        #expect(FileManager.default.contents(atPath: final.path) == Data("old".utf8))
        // The finished download was kept; the second call finds it complete and places it.
        let result = try await session(temporary).download(
            from: url, to: .custom { _, _ in (final, [.removePreviousFile]) })
        #expect(result.fileURL == final)
        expectFile(final.path, equals: TestContent.bytes(count: 1000))
        #expect(server.requests(path: "/x.bin").count == 2)
    }

    @Test func completionHandlerForm() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let result = await withCheckedContinuation { c in
            testSession().download(from: server.url("/h.bin?size=500"), to: .directory(dir.url)) {
                c.resume(returning: $0)
            }
        }
        #expect(result.value?.fileURL.lastPathComponent == "h.bin")
        let failed = await withCheckedContinuation { c in
            testSession().download(from: server.url("/h404?status=404"), to: .directory(dir.url)) {
                c.resume(returning: $0)
            }
        }
        #expect(failed.error?.httpStatus == 404)
    }

    @Test func defaultDirectoryIsTheUserCache() {
        #expect(HaulSession.defaultDownloadDirectory.path.hasSuffix("haul/downloads"))
    }
}

/// A lock box for test closures.
final class Box<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func get() -> Value { lock.withLock { value } }
    func set(_ v: Value) { lock.withLock { value = v } }
}
