import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Destinations: server-suggested names, existing files", .fewAtOnce)
struct DestinationTests {
    @Test(arguments: [
        ("benign", "report.pdf"),
        ("quoted", "my \"quoted\" file.txt"),
        ("rfc5987", "naïve café.txt"),
        ("traversal", "evil.txt"),
        ("absolute", "evil.txt"),
        ("slashes", "inner.txt"),
        ("nul", "nulname.txt"),
        ("dots", "cd.bin"),
        // ISO-8859-1 bytes (RFC 6266's filename=) were decoded as UTF-8: "caf� cr�me.txt".
        ("latin1", "café crème.txt"),
    ])
    func suggestedNamesStayInsideTheDirectory(kind: String, expected: String) async throws {
        let server = try TestServer()
        let root = try TemporaryDirectory()
        defer { cleanUp(server, root) }
        let dir = root.url.appendingPathComponent("inside")
        let (result, _) = await run(testSession(), server.url("/cd.bin?size=100&cd=\(kind)"), to: .directory(dir))
        let file = try #require(result.value).fileURL
        #expect(file.lastPathComponent == expected)
        #expect(file.deletingLastPathComponent().standardizedFileURL.path == dir.standardizedFileURL.path)
        #expect(root.contents() == ["inside"])
        expectFile(file.path, equals: TestContent.bytes(count: 100))
    }

    @Test func longSuggestedNameIsCapped() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (result, _) = await run(testSession(), server.url("/x?size=10&cd=long"), to: .directory(dir.url))
        let name = try #require(result.value).fileURL.lastPathComponent
        #expect(name.utf8.count <= 200 && name.hasSuffix(".txt"))
    }

    @Test func nameFallsBackToTheURLPath() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (result, _) = await run(testSession(), server.url("/files/data%20set.csv?size=10"), to: .directory(dir.url))
        #expect(result.value?.fileURL.lastPathComponent == "data set.csv")
    }

    @Test func rerunInADirectoryFindsThePartialByURL() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/named?size=2000000&cd=benign&drop=600000&drops=1")
        let (first, _) = await run(testSession { $0.retry.maxRetries = 0 }, url, to: .directory(dir.url))
        #expect(first.error != nil)
        #expect(dir.contents() == ["report.pdf.haul", "report.pdf.part"])
        let (second, _) = await run(testSession(), url, to: .directory(dir.url))
        #expect(second.value?.fileURL.lastPathComponent == "report.pdf")
        expectFile(dir.file("report.pdf"), equals: TestContent.bytes(count: 2_000_000))
        #expect(server.requests(path: "/named").map(\.rangeStart) == [nil, 600_000])
    }

    @Test func manyDownloadsIntoOneDirectoryListItOnce() async throws {
        // Each download used to list the directory and read every record in it to find its own
        // partial: quadratic in the number of files.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        for i in 0..<30 {
            let (result, _) = await run(
                session, server.url("/many\(i).bin?size=1000&seed=\(i + 1)"), to: .directory(dir.url))
            #expect(result.error == nil)
        }
        #expect(RecordIndex.shared.listings(of: dir.path) == 1)
        #expect(dir.contents().count == 30)
        expectFile(dir.file("many29.bin"), equals: TestContent.bytes(seed: 30, count: 1000))
    }

    @Test func aPartialTheIndexDoesNotKnowIsStillResumedUnderTheSuggestedName() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/unknown?size=2000000&cd=benign&drop=600000&drops=1")
        let (first, _) = await run(testSession { $0.retry.maxRetries = 0 }, url, to: .directory(dir.url))
        #expect(first.error != nil)
        // As if another process had left it after this one listed the directory.
        RecordIndex.shared.removed(destination: dir.file("report.pdf"))
        let (second, _) = await run(testSession(), url, to: .directory(dir.url))
        #expect(second.value?.fileURL.lastPathComponent == "report.pdf")
        expectFile(dir.file("report.pdf"), equals: TestContent.bytes(count: 2_000_000))
        #expect(dir.contents() == ["report.pdf"])
        // The answer named the partial's file: the download asked again from its end.
        #expect(server.requests(path: "/unknown").map(\.rangeStart) == [nil, nil, 600_000])
    }

    @Test func existingCompleteFileIsLeftAloneAndReportedComplete() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("same.bin")
        #expect(FileManager.default.createFile(atPath: dest, contents: Data(TestContent.bytes(count: 5000))))
        let (result, _) = await run(
            testSession(), server.url("/same.bin?size=5000"), to: .file(URL(fileURLWithPath: dest)))
        #expect(result.value?.alreadyComplete == true)
        #expect(dir.contents() == ["same.bin"])
    }

    /// With an expected SHA-256, a file already there with the server's size is the download
    /// only if it matches: a file of that size with other bytes was "already complete" (exit
    /// 0), the checksum never looked at. It is left as it is (not ours to delete); --overwrite
    /// replaces it. Each engine's path: one connection, a small file that comes with the
    /// segmented probe, and a large segmented one.
    @Test(arguments: [(1, 5000), (4, 5000), (4, 3_000_000)])
    func anExistingFileOfTheRightSizeMustMatchTheChecksum(connections: Int, size: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("sum.bin")
        let url = server.url("/sum.bin?size=\(size)")
        let other = Data(TestContent.bytes(seed: 7, count: size))
        #expect(FileManager.default.createFile(atPath: dest, contents: other))
        var options = DownloadOptions()
        options.connections = connections
        options.checksums = [try Checksum("sha-256=" + SHA256.hexDigest(of: TestContent.bytes(count: size)))]
        let (refused, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        let error = try #require(refused.error)
        #expect(error.code == .checksumMismatch, "\(error)")
        #expect(error.message.contains("exists") && error.message.contains("--overwrite"), "\(error.message)")
        #expect(FileManager.default.contents(atPath: dest) == other)
        #expect(dir.contents() == ["sum.bin"])

        options.overwrite = true
        let (replaced, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(replaced.error == nil)
        expectFile(dest, equals: TestContent.bytes(count: size))
        options.overwrite = false
        let (again, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(again.value?.alreadyComplete == true, "the right bytes pass")
    }

    @Test func staleRecordAfterACrashBetweenRenameAndCleanupIsRemoved() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("fin.bin")
        let url = server.url("/fin.bin?size=3000")
        // The record of the partial that was renamed to `dest`.
        #expect(FileManager.default.createFile(atPath: dest, contents: Data(TestContent.bytes(count: 3000))))
        var record = ResumeRecord(
            url: url.absoluteString, etag: "\"e\"", totalLength: 3000, ranges: [ByteRange(0, 3000)])
        record.partial = ResumeRecord.FileIdentity(try #require(try Sys.status(dest)))
        #expect(FileManager.default.createFile(atPath: dest + ".haul", contents: Data(record.encoded())))
        let (result, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)))
        #expect(result.value?.alreadyComplete == true)
        #expect(dir.contents() == ["fin.bin"])
    }

    @Test func existingDifferentFileIsRefusedUnlessOverwriting() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("other.bin")
        let mine = Data("precious".utf8)
        #expect(FileManager.default.createFile(atPath: dest, contents: mine))
        let url = server.url("/other.bin?size=5000")
        let (refused, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)))
        let error = try #require(refused.error)
        #expect(error.code == .destinationExists && error.message.contains("--overwrite"))
        #expect(FileManager.default.contents(atPath: dest) == mine)
        #expect(dir.contents() == ["other.bin"])

        var options = DownloadOptions()
        options.overwrite = true
        let (replaced, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(replaced.error == nil)
        expectFile(dest, equals: TestContent.bytes(count: 5000))
    }

    @Test func completeFileOnDiskWithItsRecordFinishesWithA416() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("done.bin")
        let url = server.url("/done.bin?size=4000")
        // As after a crash between the last write and the rename.
        let record = ResumeRecord(
            url: url.absoluteString, etag: "\"s1-v0-4000\"", totalLength: 4000, ranges: [ByteRange(0, 4000)])
        plantPartial(dest, TestContent.bytes(count: 4000), record: record)
        let (result, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)))
        #expect(result.value?.alreadyComplete == true)
        expectFile(dest, equals: TestContent.bytes(count: 4000))
        #expect(server.requests.map(\.rangeStart) == [4000])
        #expect(dir.contents() == ["done.bin"])
    }

    @Test func partialOfAnotherURLIsNotOverwritten() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("p.bin")
        let record = ResumeRecord(
            url: "http://elsewhere.test/p.bin", etag: "\"x\"", totalLength: 20, ranges: [ByteRange(0, 10)])
        plantPartial(dest, [UInt8](repeating: 1, count: 10), record: record)
        let (result, _) = await run(testSession(), server.url("/p.bin?size=20"), to: .file(URL(fileURLWithPath: dest)))
        #expect(result.error?.code == .destinationExists)
        #expect(result.error?.message.contains("--no-continue") == true)
        #expect(server.requests.isEmpty)
        var fresh = DownloadOptions()
        fresh.resume = false
        let (again, _) = await run(
            testSession(), server.url("/p.bin?size=20"), to: .file(URL(fileURLWithPath: dest)), options: fresh)
        #expect(again.error == nil)
        expectFile(dest, equals: TestContent.bytes(count: 20))
    }

    @Test func missingParentDirectoryIsAClearError() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let (result, _) = await run(
            testSession(), server.url("/x?size=1"), to: .file(URL(fileURLWithPath: "/nonexistent-haul-dir/x.bin")))
        #expect(result.error?.code == .fileSystem)
        #expect(result.error?.message.contains("/nonexistent-haul-dir") == true)
        #expect(server.requests.isEmpty)
    }

    @Test func symlinkPlantedAtThePartialIsNotFollowed() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let elsewhere = try TemporaryDirectory()
        defer { cleanUp(server, dir, elsewhere) }
        let victim = elsewhere.file("victim")
        #expect(FileManager.default.createFile(atPath: victim, contents: Data("keep me".utf8)))
        try FileManager.default.createSymbolicLink(atPath: dir.file("s.bin.part"), withDestinationPath: victim)
        let (result, _) = await run(testSession(), server.url("/s.bin?size=100"), to: .directory(dir.url))
        // Refused: a partial without a record haul wrote is never written.
        #expect(result.error?.code == .destinationExists)
        #expect(contentsOf(victim) == "keep me")
    }
}

/// Two downloads in one process that resolve to the same file: before, both wrote the same
/// `.part` (a `-j 2` run of one URL twice saved a file that matched neither answer).
@Suite("One file, two downloads at once", .fewAtOnce)
struct SameDestinationTests {
    @Test(arguments: [1, 4])
    func theSecondDownloadOfTheSameFileIsRefusedAndTheFirstIsExact(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        // Seconds at the server's pace (each connection's): the second starts while the first writes.
        let url = server.url("/twice-\(connections).bin?size=\(6_000_000 * connections)&rate=2000000")
        let dest = DownloadDestination.file(dir.url.appendingPathComponent("one.bin"))
        let session = testSession()
        async let first = run(session, url, to: dest, options: options)
        // The first has claimed its file by the time the server sends it bytes.
        let deadline = Date().addingTimeInterval(10)
        while server.bytesSent(path: "/twice-\(connections).bin") == 0 && Date() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        let (second, _) = await run(session, url, to: dest, options: options)
        let (done, _) = await first
        #expect(second.error?.code == .destinationInUse, "\(String(describing: second.error))")
        #expect(second.error?.message.contains("one.bin") == true)
        #expect(done.error == nil, "\(String(describing: done.error))")
        expectFile(dir.file("one.bin"), equals: TestContent.bytes(count: 6_000_000 * connections))
        #expect(dir.contents() == ["one.bin"])
    }

    @Test func twoURLsWithTheSameNameInOneDirectoryNeverShareAFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        async let a = run(session, server.url("/a/same.bin?size=6000000&seed=1&rate=2000000"), to: .directory(dir.url))
        let deadline = Date().addingTimeInterval(10)
        while server.bytesSent(path: "/a/same.bin") == 0 && Date() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        let (b, _) = await run(session, server.url("/b/same.bin?size=2000000&seed=2"), to: .directory(dir.url))
        let (resultA, _) = await a
        #expect(b.error?.code == .destinationInUse, "\(String(describing: b.error))")
        #expect(resultA.error == nil)
        expectFile(dir.file("same.bin"), equals: TestContent.bytes(seed: 1, count: 6_000_000))
    }

    @Test func aFileIsFreeAgainOnceItsDownloadEnded() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = DownloadDestination.file(dir.url.appendingPathComponent("again.bin"))
        let (failed, _) = await run(testSession(), server.url("/gone?status=404"), to: dest)
        #expect(failed.error?.code == .httpStatus)
        let (first, _) = await run(testSession(), server.url("/again.bin?size=1000"), to: dest)
        #expect(first.error == nil)
        var options = DownloadOptions()
        options.overwrite = true
        let (second, _) = await run(
            testSession(), server.url("/again.bin?size=2000&seed=2"), to: dest, options: options)
        #expect(second.error == nil)
        expectFile(dir.file("again.bin"), equals: TestContent.bytes(seed: 2, count: 2000))
    }
}

private func contentsOf(_ path: String) -> String {
    String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
}

@Suite("Space that cannot be reserved", .fewAtOnce)
struct ReservationTests {
    /// A segmented download whose file cannot be preallocated (here: a size no file system
    /// takes) fails with the cause and leaves no empty `.part` behind.
    @Test func aFailedReservationLeavesNothingBehind() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = 4
        let (result, _) = await run(
            testSession(), server.url("/huge.bin?size=\(Int64.max - 1)"), to: .directory(dir.url), options: options)
        let error = try #require(result.error)
        // More than any disk has free: refused before the body, naming both figures.
        #expect(error.code == .diskFull && error.message.hasPrefix("not enough space: "), "\(error)")
        #expect(error.message.contains("\(Int64.max - 1) needed"))
        #expect(dir.contents().isEmpty)
    }
}

@Suite("Destinations that are not regular files", .fewAtOnce)
struct NonRegularDestinationTests {
    /// A directory at the destination: refused before any request, even with `overwrite` and even
    /// when the server's size equals the directory's `st_size` (which once read as "already
    /// complete"); nothing inside it or beside it is touched.
    @Test(arguments: [(1, false), (1, true), (4, false), (4, true)])
    func directoryIsRefusedBeforeAnyRequest(connections: Int, overwrite: Bool) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("taken")
        try FileManager.default.createDirectory(atPath: dest, withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: dest + "/keep.txt", contents: Data("precious".utf8)))
        var st = stat()
        #expect(stat(dest, &st) == 0)
        var options = DownloadOptions()
        options.connections = connections
        options.overwrite = overwrite
        let url = server.url("/taken?size=\(st.st_size)")
        let (result, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        let error = try #require(result.error)
        #expect(error.code == .fileSystem && error.message == "\(dest) is a directory", "\(error)")
        #expect(error.errno == EISDIR)
        #expect(server.requests.isEmpty)
        #expect(dir.contents() == ["taken"])
        #expect(FileManager.default.contents(atPath: dest + "/keep.txt") == Data("precious".utf8))
    }

    /// A directory with the server's suggested name inside a target directory: refused when the
    /// name is known (after the response), before any byte is written.
    @Test(arguments: [1, 4])
    func directoryUnderTheSuggestedNameIsRefused(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        try FileManager.default.createDirectory(atPath: dir.file("named.bin"), withIntermediateDirectories: false)
        var options = DownloadOptions()
        options.connections = connections
        options.overwrite = true
        let (result, _) = await run(
            testSession(), server.url("/named.bin?size=3000000"), to: .directory(dir.url), options: options)
        let error = try #require(result.error)
        #expect(error.code == .fileSystem && error.message.hasSuffix("named.bin is a directory"), "\(error)")
        #expect(dir.contents() == ["named.bin"])
    }

    /// A symbolic link to nothing holds the name: refused before any request (it once took
    /// the whole download and then failed as "appeared during the download"), replaced with
    /// `overwrite`; its target is never created.
    @Test(arguments: [1, 4])
    func aDanglingSymlinkIsRefusedUpFrontAndReplacedWithOverwrite(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("link.bin")
        try FileManager.default.createSymbolicLink(atPath: dest, withDestinationPath: dir.file("missing/target"))
        var options = DownloadOptions()
        options.connections = connections
        let url = server.url("/link.bin?size=3000000")
        let (refused, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        let error = try #require(refused.error)
        #expect(error.code == .destinationExists && error.message.contains("symbolic link"), "\(error)")
        #expect(server.requests.isEmpty)
        #expect(dir.contents() == ["link.bin"])
        options.overwrite = true
        let (replaced, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(replaced.error == nil, "\(String(describing: replaced.error))")
        expectFile(dest, equals: TestContent.bytes(count: 3_000_000))
        #expect(dir.contents() == ["link.bin"])
    }

    /// A FIFO where the resume record (or its temporary) goes is not opened for a read or write
    /// that would wait for another process: it counts as no record, and the download finishes
    /// (it once hung in open(2), past a SIGTERM).
    @Test(.timeLimit(.minutes(5)), arguments: [".haul", ".haul.tmp"])
    func aFIFOInPlaceOfTheRecordDoesNotHang(suffix: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("rec.bin")
        #expect(mkfifo(dest + suffix, 0o600) == 0)
        var options = DownloadOptions()
        options.connections = 1
        // A blocked open(2) cannot be cancelled: after 30 s a watchdog opens the FIFO itself
        // (read-write, which never waits), so a regression fails on time instead of hanging.
        let watchdog = Task.detached {
            try? await Task.sleep(nanoseconds: 30_000_000_000)
            for _ in 0..<100 where !Task.isCancelled {
                let fd = open(dest + suffix, O_RDWR | O_NONBLOCK)
                try? await Task.sleep(nanoseconds: 200_000_000)
                if fd >= 0 { close(fd) }
            }
        }
        defer { watchdog.cancel() }
        // Slow enough for a checkpoint (a record write) on the way.
        let url = server.url("/rec.bin?size=3000000&rate=2000000")
        let started = Date()
        let (result, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(Date().timeIntervalSince(started) < 25, "waited on the FIFO")
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: 3_000_000))
    }

    /// A FIFO (or device) at the destination is not replaced by a regular file.
    @Test func fifoIsRefused() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("pipe")
        #expect(mkfifo(dest, 0o600) == 0)
        var options = DownloadOptions()
        options.overwrite = true
        let (result, _) = await run(
            testSession(), server.url("/pipe?size=100"), to: .file(URL(fileURLWithPath: dest)), options: options)
        let error = try #require(result.error)
        #expect(error.code == .fileSystem && error.message.contains("is not a regular file"), "\(error)")
        #expect(server.requests.isEmpty)
        var st = stat()
        #expect(lstat(dest, &st) == 0 && (st.st_mode & S_IFMT) == S_IFIFO)
        #expect(dir.contents() == ["pipe"])
    }
}
