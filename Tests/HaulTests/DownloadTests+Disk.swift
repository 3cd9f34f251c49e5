import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

extension DownloadTests {
    @Test func cancellingKeepsThePartialAndTheNextRunResumes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("cancel.bin")
        // A checkpoint comes after a second of transfer; the answer stalls at 4.5 MB, so the
        // cancel always finds it unfinished.
        let url = server.url("/cancel.bin?size=6000000&rate=1500000&stall=4500000&stalls=1")
        let session = testSession()
        let task = Task { try await session.download(from: url, to: .file(dest)) }
        #expect(
            await eventually(timeout: 10) {
                (ResumeRecord.decode(bytes(at: dest.path + ".haul"))?.contiguousBytes ?? 0) > 0
            })
        task.cancel()
        let error = await #expect(throws: HaulError.self) { try await task.value }
        #expect(error?.code == .cancelled)
        let saved = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul"))).contiguousBytes
        #expect(saved > 0)
        let (result, _) = await run(session, url, to: .file(dest))
        #expect(result.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 6_000_000))
        #expect(server.requests(path: "/cancel.bin").last?.rangeStart.map { Int64($0) >= saved } == true)
    }

    @Test func diskFullGivesAClearErrorAndAResumablePartial() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("full.bin")
        let url = server.url("/full.bin?size=3000000")
        // The first pwrite past 1 MB fails with ENOSPC (once, as when space frees up later).
        let written = LockedCounter()
        let part = dest.path + ".part"
        let hook = FaultInjection.add { call, count, path in
            guard call == .pwrite, path == part else { return nil }
            return written.add(count) > 1_000_000 && written.fireOnce() ? .noSpace : nil
        }
        let (result, _) = await run(testSession { $0.progressInterval = 0 }, url, to: .file(dest))
        FaultInjection.remove(hook)
        let error = try #require(result.error)
        #expect(error.code == .diskFull)
        #expect(error.message.contains("disk full") && error.message.contains("full.bin.part"))
        let record = try #require(ResumeRecord.decode(bytes(at: dest.path + ".haul")))
        #expect(record.contiguousBytes > 0)
        let (again, _) = await run(testSession(), url, to: .file(dest))
        #expect(again.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(
            server.requests(path: "/full.bin").last?.rangeStart == Int(record.contiguousBytes),
            "\(server.requests(path: "/full.bin").map(\.range))")
    }

    @Test func aSlowSyncOfOneDownloadDoesNotStallAnother() async throws {
        // A's checkpoint syncs its partial; that sync is held (a slow disk) while B, on the same
        // transport, must go on receiving.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let partA = dir.file("slowdisk-a.bin.part")
        let partB = dir.file("slowdisk-b.bin.part")
        let hold = SyncHold([partA])
        defer { hold.remove() }
        let session = testSession()
        let a = Task {
            await run(session, server.url("/slowdisk-a.bin?size=4000000&rate=1000000"), to: .directory(dir.url))
        }
        #expect(await eventually(timeout: 30) { !hold.held.isEmpty })
        let b = Task {
            await run(session, server.url("/slowdisk-b.bin?size=4000000&rate=1000000&seed=2"), to: .directory(dir.url))
        }
        #expect(
            await eventually(timeout: 30) { (fileSize(partB) ?? 0) >= 500_000 },
            "B got \(fileSize(partB) ?? 0) bytes while A's sync was held")
        hold.release()
        let (ra, rb) = (await a.value, await b.value)
        #expect(ra.0.error == nil && rb.0.error == nil)
        expectFile(dir.file("slowdisk-a.bin"), equals: TestContent.bytes(count: 4_000_000))
        expectFile(dir.file("slowdisk-b.bin"), equals: TestContent.bytes(seed: 2, count: 4_000_000))
    }

    @Test func aResumeDoesNotWaitForASyncBeforeItsFirstBytes() async throws {
        // Resuming the same version from where the record ends leaves that record as it is (it
        // stays true while bytes are added after it); it was rewritten and synced on the
        // transport's thread first, so one slow disk held every transfer of the session.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("again.bin")
        let url = server.url("/again.bin?size=3000000&rate=1000000&stall=600000&stalls=1")
        let first = testSession().downloadTask(with: url, to: .file(dest))
        first.resume()
        #expect(await eventually { (first.progress?.completedBytes ?? 0) >= 600_000 })
        let saved = try #require(await first.cancelProducingResumeData()).bytesOnDisk
        let hold = SyncHold([dest.path + ".part"])
        defer { hold.remove() }
        let session = testSession()
        let resumed = Task { await run(session, url, to: .file(dest)) }
        let part = dest.path + ".part"
        #expect(
            await eventually(timeout: 30) { (fileSize(part) ?? 0) >= saved + 300_000 },
            "\(fileSize(part) ?? 0) bytes: the resume's bytes flow")
        hold.release()
        #expect(await resumed.value.0.error == nil)
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(server.requests(path: "/again.bin").last?.rangeStart == Int(saved))
    }

    @Test func slowSyncsDoNotHoldUpSwiftTasks() async throws {
        // On Linux, work items on Dispatch's global queue share threads with Swift's tasks:
        // checkpoints waiting for a slow disk there left no thread for any task.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let parts = (0..<8).map { dir.file("held\($0).bin.part") }
        let hold = SyncHold(Set(parts))
        defer { hold.remove() }
        let session = testSession()
        let downloads = (0..<8).map { i in
            Task {
                await run(
                    session, server.url("/held\(i).bin?size=3000000&rate=1000000&seed=\(i + 1)"),
                    to: .directory(dir.url))
            }
        }
        #expect(await eventually(timeout: 30) { hold.held.count == 8 })
        // Tasks still run while all eight syncs are held.
        let ranWhileHeld = await Task.detached { hold.held.count == 8 }.value
        #expect(ranWhileHeld)
        hold.release()
        for (i, download) in downloads.enumerated() {
            #expect(await download.value.0.error == nil)
            expectFile(dir.file("held\(i).bin"), equals: TestContent.bytes(seed: i + 1, count: 3_000_000))
        }
    }

    /// One connection (the streaming path) and four (a small file comes whole with the probe).
    @Test(arguments: [1, 4])
    func aFileIsSyncedBeforeItIsRenamedEvenWithAChecksum(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("synced-\(connections).bin")
        let part = dest.path + ".part"
        // The sync of this partial fails: the download must fail before the rename, keeping the
        // partial (the checksum check used to close the file first, and then it was never synced).
        // A small file that came whole (4 connections) has no partial: it is written with no
        // name, so a failed sync leaves nothing at all.
        let hook = FaultInjection.add { call, _, path in call == .fsync && path == part ? Errno(EIO) : nil }
        var options = DownloadOptions()
        options.connections = connections
        options.checksums = [try Checksum("sha-256=" + HaulCore.SHA256.hexDigest(of: TestContent.bytes(count: 70000)))]
        let (result, _) = await run(testSession(), server.url("/synced?size=70000"), to: .file(dest), options: options)
        FaultInjection.remove(hook)
        let error = try #require(result.error)
        #expect(error.code == .fileSystem && error.message.contains("sync"), "\(error)")
        #expect(!fileExists(dest.path))
        if connections == 1 {
            expectFile(part, equals: TestContent.bytes(count: 70000))
        } else {
            #expect(dir.contents().isEmpty, "\(dir.contents())")
        }
    }

    @Test(arguments: [1, 4])
    func aDestinationThatAppearsDuringTheDownloadIsNotReplaced(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("appeared-\(connections).bin")
        let part = dest.path + ".part"
        // Another program creates the destination just before the partial is renamed into place.
        let hook = FaultInjection.add { call, _, path in
            if call == .fsync && path == part {
                _ = FileManager.default.createFile(atPath: dest.path, contents: Data("mine".utf8))
            }
            return nil
        }
        var options = DownloadOptions()
        options.connections = connections
        let (result, _) = await run(
            testSession(), server.url("/appeared?size=70000"), to: .file(dest), options: options)
        FaultInjection.remove(hook)
        let error = try #require(result.error)
        #expect(error.code == .destinationExists && error.message.contains("appeared during the download"), "\(error)")
        #expect(bytes(at: dest.path) == Array("mine".utf8))
        expectFile(part, equals: TestContent.bytes(count: 70000))
    }

    @Test func checksumIsVerified() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var good = DownloadOptions()
        good.checksums = [try Checksum("sha-256=" + HaulCore.SHA256.hexDigest(of: TestContent.bytes(count: 70000)))]
        let (ok, _) = await run(
            testSession(), server.url("/sum?size=70000"), to: .file(dir.url.appendingPathComponent("ok")), options: good
        )
        #expect(ok.error == nil)
        var bad = DownloadOptions()
        bad.checksums = [try Checksum("sha-256=" + String(repeating: "0", count: 64))]
        let (no, _) = await run(
            testSession(), server.url("/sum?size=70000"), to: .file(dir.url.appendingPathComponent("bad")), options: bad
        )
        #expect(no.error?.code == .checksumMismatch)
        // Nothing of it is left: its record was written again after the mismatch deleted it.
        #expect(dir.contents() == ["ok"])
    }

    @Test func invalidURLsFailBeforeAnyRequest() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for raw in ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost"] {
            let (result, _) = await run(testSession(), URL(string: raw)!, to: .directory(dir.url))
            #expect(result.error?.code == .invalidURL, "\(raw)")
        }
    }
}
