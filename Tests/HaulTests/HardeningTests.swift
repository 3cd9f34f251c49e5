import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// Side files are haul's alone: a download never writes, trusts or deletes a `.part` or `.haul`
/// that haul cannot prove it wrote for that download (docs/resume-record.md, "Binding").
@Suite("Side files: names reserved, records bound to their partial", .fewAtOnce)
struct SideFileTests {
    func options(_ connections: Int) -> DownloadOptions {
        var o = DownloadOptions()
        o.connections = connections
        o.minSplitSize = 1 << 20
        return o
    }

    /// A hostile server serves `setup.sh.part` (bytes of its choice) and `setup.sh.haul` (a record
    /// naming the trusted URL, covering all but the last byte); then `setup.sh` comes from the
    /// trusted server into the same directory. It must be the trusted server's file, whole.
    @Test(arguments: [1, 4])
    func aDownloadCannotForgeAnothersPartial(connections: Int) async throws {
        let hostile = try TestServer()
        let trusted = try TestServer()
        let dir = try TemporaryDirectory()
        defer {
            trusted.shutdown()
            cleanUp(hostile, dir)
        }
        let size = 3_000_000
        let trustedURL = trusted.url("/setup.sh?size=\(size)")
        let forged = ResumeRecord(
            url: trustedURL.absoluteString, etag: "\"s1-v0-\(size)\"", totalLength: Int64(size),
            ranges: [ByteRange(0, Int64(size - 1))])
        let json = String(decoding: forged.encoded(), as: UTF8.self)
        let recordURL = hostile.url("/setup.sh.haul?cd=setup.sh.haul&body=" + percentEncoded(json))
        let session = testSession()
        let (a, _) = await run(
            session, hostile.url("/setup.sh.part?size=\(size)&seed=9"), to: .directory(dir.url),
            options: options(connections))
        let (b, _) = await run(session, recordURL, to: .directory(dir.url), options: options(connections))
        #expect(a.error == nil && b.error == nil, "\(String(describing: a.error)) \(String(describing: b.error))")
        // Saved under names that are no download's side files.
        #expect(a.value?.fileURL.lastPathComponent == "setup.sh.part_")
        #expect(b.value?.fileURL.lastPathComponent == "setup.sh.haul_")
        let (c, _) = await run(session, trustedURL, to: .directory(dir.url), options: options(connections))
        #expect(c.error == nil, "\(String(describing: c.error))")
        expectFile(dir.file("setup.sh"), equals: TestContent.bytes(count: size))
        #expect(trusted.bytesSent(path: "/setup.sh") >= size, "every byte from the trusted server")
    }

    /// A name given for the file (`-o`, ` out=` in a list, a library `.file`) that ends like a
    /// side file is refused before any request.
    @Test(arguments: ["foo.haul", "foo.part", "foo.haul.tmp", "FOO.PART", String(repeating: "n", count: 247)])
    func aDestinationNamedLikeASideFileIsRefused(name: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let (result, _) = await run(
            testSession(), server.url("/x?size=100"), to: .file(dir.url.appendingPathComponent(name)))
        #expect(result.error?.code == .usage, "\(String(describing: result.error))")
        #expect(result.error?.message.contains("side file") == true, "\(String(describing: result.error))")
        #expect(server.requests.isEmpty)
        #expect(dir.contents().isEmpty)
    }

    /// A user's own `notes.part` and `notes.haul` (not haul's) are never deleted by a download
    /// of `notes`: refused, naming the file, unless overwriting.
    @Test(arguments: [1, 4])
    func aUsersOwnFilesAtTheSideFileNamesAreLeftAlone(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let mine = Data("my notes".utf8)
        #expect(FileManager.default.createFile(atPath: dir.file("notes.part"), contents: mine))
        #expect(FileManager.default.createFile(atPath: dir.file("notes.haul"), contents: mine))
        let url = server.url("/notes?size=3000000")
        let (refused, _) = await run(testSession(), url, to: .directory(dir.url), options: options(connections))
        let error = try #require(refused.error)
        #expect(error.code == .destinationExists && error.message.contains("notes.haul"), "\(error)")
        #expect(error.message.contains("--overwrite"))
        #expect(FileManager.default.contents(atPath: dir.file("notes.part")) == mine)
        #expect(FileManager.default.contents(atPath: dir.file("notes.haul")) == mine)
        var overwriting = options(connections)
        overwriting.overwrite = true
        let (replaced, _) = await run(testSession(), url, to: .directory(dir.url), options: overwriting)
        #expect(replaced.error == nil, "\(String(describing: replaced.error))")
        expectFile(dir.file("notes"), equals: TestContent.bytes(count: 3_000_000))
        #expect(dir.contents() == ["notes"])
    }

    /// A record counts only for the partial it was written with: copied next to another file of
    /// that name, it is not trusted.
    @Test(arguments: [1, 4])
    func aRecordBoundToAnotherFileIsNotTrusted(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("b.bin")
        let size = 3_000_000
        let url = server.url("/b.bin?size=\(size)")
        let record = ResumeRecord(
            url: url.absoluteString, etag: "\"s1-v0-\(size)\"", totalLength: Int64(size),
            ranges: [ByteRange(0, Int64(size - 1))])
        plantPartial(dest, [UInt8](repeating: 0x41, count: size - 1), record: record)
        // Another file takes the partial's name; the record stays as it was.
        try FileManager.default.removeItem(atPath: dest + ".part")
        #expect(
            FileManager.default.createFile(atPath: dest + ".part", contents: Data(repeating: 0x42, count: size - 1)))
        let (refused, _) = await run(
            testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options(connections))
        #expect(refused.error?.code == .destinationExists, "\(String(describing: refused.error))")
        #expect(refused.error?.message.contains("b.bin.part") == true)
        #expect(server.requests.isEmpty)
        #expect(fileSize(dest + ".part") == Int64(size - 1), "left alone")
    }

    /// A small download to the name of another URL's partial (cut at half of 3 MB) is refused:
    /// the small file's path judges the record too.
    @Test(arguments: [1, 4])
    func aSmallDownloadDoesNotDestroyAnotherURLsPartial(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("big.iso")
        let first = server.url("/big.iso?size=3000000")
        let record = ResumeRecord(
            url: first.absoluteString, etag: "\"s1-v0-3000000\"", totalLength: 3_000_000,
            ranges: [ByteRange(0, 1_500_000)])
        plantPartial(dest, Array(TestContent.bytes(count: 1_500_000)), record: record)
        let other = server.url("/small.iso?size=3000")
        let (refused, _) = await run(
            testSession(), other, to: .file(URL(fileURLWithPath: dest)), options: options(connections))
        #expect(refused.error?.code == .destinationExists, "\(String(describing: refused.error))")
        #expect(refused.error?.message.contains("--no-continue") == true)
        #expect(server.requests.isEmpty)
        #expect(fileSize(dest + ".part") == 1_500_000)
        #expect(ResumeRecord.decode(bytes(at: dest + ".haul"))?.url == first.absoluteString)
        var fresh = options(connections)
        fresh.resume = false
        let (saved, _) = await run(testSession(), other, to: .file(URL(fileURLWithPath: dest)), options: fresh)
        #expect(saved.error == nil)
        expectFile(dest, equals: TestContent.bytes(count: 3000))
        #expect(dir.contents() == ["big.iso"])
    }

    /// A partial or record temporary that is a hard link to another file is never written
    /// through: refused, and with overwrite replaced by a file of its own.
    @Test(arguments: [1, 4])
    func hardLinksAtTheSideFileNamesAreNotWrittenThrough(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        let elsewhere = try TemporaryDirectory()
        defer { cleanUp(server, dir, elsewhere) }
        let victim = elsewhere.file("victim")
        let record = elsewhere.file("victim2")
        let keep = Data("keep me".utf8)
        #expect(FileManager.default.createFile(atPath: victim, contents: keep))
        #expect(FileManager.default.createFile(atPath: record, contents: keep))
        let dest = dir.file("out.bin")
        try FileManager.default.linkItem(atPath: victim, toPath: dest + ".part")
        try FileManager.default.linkItem(atPath: record, toPath: dest + ".haul.tmp")
        let url = server.url("/out.bin?size=3000000")
        let (refused, _) = await run(
            testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options(connections))
        #expect(refused.error?.code == .destinationExists, "\(String(describing: refused.error))")
        var overwriting = options(connections)
        overwriting.overwrite = true
        let (saved, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: overwriting)
        #expect(saved.error == nil, "\(String(describing: saved.error))")
        expectFile(dest, equals: TestContent.bytes(count: 3_000_000))
        #expect(FileManager.default.contents(atPath: victim) == keep)
        #expect(FileManager.default.contents(atPath: record) == keep)
    }

    /// A record whose ETag carries CR LF (`"v1"\r\nX-Injected: yes` is one Swift Character
    /// between the quote and the X) never puts a second header on the wire; the download
    /// restarts instead of resuming.
    @Test(arguments: [1, 4])
    func lineBreaksInARecordsValidatorNeverReachTheWire(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("inj.bin")
        let size = 3_000_000
        let url = server.url("/inj.bin?size=\(size)")
        let record = ResumeRecord(
            url: url.absoluteString, etag: "\"v1\"\r\nX-Injected: yes", totalLength: Int64(size),
            ranges: [ByteRange(0, 1_000_000)])
        plantPartial(dest, Array(TestContent.bytes(count: 1_000_000)), record: record)
        let (result, _) = await run(
            testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options(connections))
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: size))
        #expect(server.requests.allSatisfy { $0.header("X-Injected") == nil })
        // Restarted from the first byte (a plain GET, or the probe's range from 0), not resumed.
        #expect([nil, 0].contains(server.requests.first?.rangeStart), "\(server.requests.map(\.range))")
        #expect(server.requests.first?.header("If-Range") == nil)
    }

    /// Cancelling a task that never ran leaves a user's own files at the side-file names alone.
    @Test func cancellingATaskThatNeverRanDeletesNothing() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let mine = Data("mine".utf8)
        #expect(FileManager.default.createFile(atPath: dir.file("t.bin.part"), contents: mine))
        #expect(FileManager.default.createFile(atPath: dir.file("t.bin.haul"), contents: mine))
        let task = testSession().downloadTask(
            with: server.url("/t.bin?size=100"), to: .file(dir.url.appendingPathComponent("t.bin")))
        task.cancel()
        _ = try? await task.finished()
        #expect(FileManager.default.contents(atPath: dir.file("t.bin.part")) == mine)
        #expect(FileManager.default.contents(atPath: dir.file("t.bin.haul")) == mine)
    }

    @Test func headerValuesAreJudgedOnTheirBytes() {
        #expect(!HTTPHeaders.isSendable("\"v1\"\r\nX-Injected: yes"))
        #expect(!HTTPHeaders.isSendable("a\rb") && !HTTPHeaders.isSendable("a\nb") && !HTTPHeaders.isSendable("a\0b"))
        #expect(HTTPHeaders.isSendable("\"v1\"") && HTTPHeaders.isSendable("caf\u{E9}"))
        #expect(HTTPHeaders.problem(name: "X", value: "a\r\nb") != nil)
        var headers = HTTPHeaders([("ETag", "\"v1\"\r\nX: y"), ("Last-Modified", "Mon\u{0}")])
        #expect(headers.etag == nil && headers.lastModified == nil, "never stored")
        headers = HTTPHeaders([("ETag", "W/\"w\"")])
        #expect(headers.etag == "W/\"w\"" && headers.strongETag == nil)
    }

    @Test func sideFileNamesAreReserved() throws {
        #expect(SafeFileName.sanitize("setup.sh.part") == "setup.sh.part_")
        #expect(SafeFileName.sanitize("setup.sh.haul") == "setup.sh.haul_")
        #expect(SafeFileName.sanitize("x.haul.tmp") == "x.haul.tmp_")
        #expect(SafeFileName.sanitize("X.Part") == "X.Part_")
        #expect(SafeFileName.sanitize("part") == "part")
        #expect(SafeFileName.sanitize("report.partial") == "report.partial")
        #expect(SafeFileName.suggestedName(contentDisposition: nil, url: URL(string: "http://h/a.haul")!) == "a.haul_")
        let long = try #require(SafeFileName.sanitize(String(repeating: "x", count: 300) + ".part"))
        #expect(long.utf8.count == SafeFileName.maxBytes && long.hasSuffix(".part_"))
        // A cut that leaves a side-file ending (the extension past 16 bytes is not kept).
        let cutToOne = try #require(
            SafeFileName.sanitize(String(repeating: "a", count: 191) + ".haul.tmp" + String(repeating: "b", count: 20)))
        #expect(!SafeFileName.isSideFileName(cutToOne), "\(cutToOne)")
    }
}

/// Answers whose framing does not add up are errors, never files; a claim of a large file
/// reserves only what its bytes justify.
@Suite("Framing and reservations a server cannot abuse", .fewAtOnce)
struct FramingTests {
    @Test(arguments: ["0x25", "99999999999999999999999", "-5", "37 38", "+37"])
    func aContentLengthThatIsNotADecimalNumberIsAnInvalidAnswer(length: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = 1
        let (result, _) = await run(
            testSession(), server.url("/cl.bin?size=37&length=" + percentEncoded(length)),
            to: .file(dir.url.appendingPathComponent("cl.bin")), options: options)
        let error = try #require(result.error)
        #expect(error.code == .invalidResponse && error.message.contains("Content-Length"), "\(error)")
        #expect(!fileExists(dir.file("cl.bin")))
    }

    /// A `.part` longer than its record's total, the record covering all of it: exactly the
    /// file's bytes are put in place.
    @Test(arguments: [1, 4])
    func aPartialLongerThanItsTotalIsCutToIt(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("long.bin")
        let size = 3_000_000
        let url = server.url("/long.bin?size=\(size)")
        let record = ResumeRecord(
            url: url.absoluteString, etag: "\"s1-v0-\(size)\"", totalLength: Int64(size),
            ranges: [ByteRange(0, Int64(size))])
        plantPartial(
            dest, Array(TestContent.bytes(count: size)) + [UInt8](repeating: 0x58, count: 4096), record: record)
        var options = DownloadOptions()
        options.connections = connections
        let (result, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: size))
    }

    /// A 206 that claims a 200 MB file and sends 1000 bytes (then closes) leaves no 200 MB of reserved
    /// disk: at most the bytes received plus 64 MiB.
    @Test func aFewBytesDoNotReserveTheDisk() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = 4
        // Three runs: a rerun resumes the partial, which is already sparse at the claimed total
        // (the first rerun reserved all of it: nothing looked missing).
        for attempt in 1...3 {
            let (result, _) = await run(
                testSession { $0.retry.maxRetries = 1 }, server.url("/claim.bin?size=1000&lie=199999000"),
                to: .directory(dir.url), options: options)
            #expect(result.error != nil)
            var st = stat()
            #expect(stat(dir.file("claim.bin.part"), &st) == 0)
            let allocated = Int64(st.st_blocks) * 512
            let received = Int64(server.bytesSent(path: "/claim.bin"))
            #expect(allocated <= received + 64 << 20 + 1 << 20, "run \(attempt): \(allocated) bytes allocated")
        }
    }
}

@Suite("Answers that end a download", .fewAtOnce)
struct FinalAnswerTests {
    /// A 401, 403, 404 or 410 to the first request is the answer, with one connection and with
    /// several (whose probe asks with Range): it is not asked again without Range.
    @Test(arguments: [401, 403, 404, 410], [1, 4])
    func aMissingFileIsAskedForOnce(status: Int, connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = DownloadOptions()
        options.connections = connections
        let (result, _) = await run(
            testSession(), server.url("/gone?status=\(status)"), to: .directory(dir.url), options: options)
        let error = try #require(result.error)
        #expect(error.code == .httpStatus && error.httpStatus == status, "\(error)")
        #expect(error.message.hasPrefix("HTTP \(status) "))
        #expect(server.requests.count == 1)
        #expect(dir.contents().isEmpty)
    }
}

private func percentEncoded(_ s: String) -> String {
    s.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? s
}

/// A note is written on the notes queue, later: by then the partial may be gone or replaced,
/// by this object or another (a task's discard, a retry's new object).
@Suite("Notes that come late", .fewAtOnce)
struct LateNoteTests {
    func started(_ dest: String) throws -> PartialFile {
        let partial = PartialFile(destination: dest)
        try partial.open(at: 0)
        let bytes = [UInt8](repeating: 7, count: 4096)
        try bytes.withUnsafeBytes { try partial.write($0) }
        try partial.checkpoint(
            ResumeRecord(url: "http://127.0.0.1/n.bin", totalLength: 8192, ranges: [ByteRange(0, 4096)]))
        return partial
    }

    /// Holds the notes queue until `release` is called.
    func holdNotes() -> DispatchSemaphore {
        let gate = DispatchSemaphore(value: 0)
        PartialFile.notes.async { _ = gate.wait(timeout: .now() + 60) }
        return gate
    }

    @Test func aNoteQueuedBeforeAnotherObjectsDiscardDoesNotBringTheRecordBack() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let dest = dir.file("n.bin")
        let partial = try started(dest)
        let gate = holdNotes()
        partial.note(written: [ByteRange(0, 4096)])
        PartialFile(destination: dest).discard()  // as DownloadTask.cancel() does
        gate.signal()
        PartialFile.notes.sync {}
        #expect(dir.contents() == [])
    }

    @Test func aNoteQueuedBeforeARestartDoesNotClaimTheNewPartial() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let dest = dir.file("n.bin")
        let old = try started(dest)
        let gate = holdNotes()
        old.note(written: [ByteRange(0, 4096)])
        old.close()
        // A retry's new object restarts the file (a 200 to its Range).
        let new = PartialFile(destination: dest)
        _ = try DownloadStore.prepareSideFiles(
            of: new, for: URL(string: "http://127.0.0.1/n.bin")!, resume: false, overwrite: false)
        try new.open(at: 0)
        try new.checkpoint(
            ResumeRecord(url: "http://127.0.0.1/n.bin", totalLength: 8192, ranges: []), syncingData: false)
        gate.signal()
        PartialFile.notes.sync {}
        let fresh = PartialFile(destination: dest)
        guard case .partial(let record) = try fresh.inspect() else {
            Issue.record("the new partial is not bound to its record: \(try fresh.inspect())")
            return
        }
        #expect((record.written ?? []).isEmpty && record.ranges.isEmpty, "\(record)")
    }
}

/// Resume data names a destination and claims bytes; it comes from wherever the app stored it.
@Suite("Resume data that does not match the partial", .fewAtOnce)
struct ResumeDataBindingTests {
    /// A user's own `.part` with no record (another program's download, say) is not bound to a
    /// record by resume data that was not made from it: the task refuses it, and it is kept.
    @Test func resumeDataDoesNotAdoptAPartialItWasNotMadeFrom() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("setup.exe")
        let planted = [UInt8](repeating: 0x41, count: 2_000_000)
        #expect(FileManager.default.createFile(atPath: dest + ".part", contents: Data(planted)))
        let url = server.url("/setup.exe?size=3000000")
        let forged = """
            {"version":1,"url":"\(url.absoluteString)","destination":"file://\(dest)","bytesOnDisk":2000000,
            "totalBytes":3000000}
            """
        let task = testSession().downloadTask(withResumeData: try ResumeData(data: Data(forged.utf8)))
        task.resume()
        await #expect(throws: HaulError.self) { try await task.finished() }
        #expect(task.error?.code == .destinationExists, "\(String(describing: task.error))")
        expectFile(dest + ".part", equals: planted)
        #expect(dir.contents() == ["setup.exe.part"])
        #expect(server.requests.isEmpty)
    }

    /// Resume data made from a partial continues it even when its record was removed: the data
    /// names the partial it was made from, and the file there is still that one.
    @Test func resumeDataContinuesItsOwnPartialWhoseRecordWasRemoved() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.url.appendingPathComponent("own.bin")
        let url = server.url("/own.bin?size=3000000&stall=1000000&stalls=1")
        let task = testSession().downloadTask(with: url, to: .file(dest))
        task.resume()
        #expect(await eventually(timeout: 60) { (task.progress?.completedBytes ?? 0) > 300_000 })
        let data = try #require(await task.cancelProducingResumeData())
        #expect(unlink(dest.path + ".haul") == 0)
        let fresh = testSession().downloadTask(withResumeData: try ResumeData(data: data.encoded()))
        fresh.resume()
        _ = try await fresh.finished()
        expectFile(dest.path, equals: TestContent.bytes(count: 3_000_000))
        #expect(server.requests(path: "/own.bin").last?.rangeStart == Int(data.bytesOnDisk))
    }
}

@Suite("Written ranges and the mount", .fewAtOnce)
struct MountTrustTests {
    /// inspect() trusts a record's written ranges only through the mount it was written through.
    @Test func aRecordOfAnotherMountIsTrustedForItsSyncedRangesOnly() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let dest = dir.file("m.bin")
        var record = ResumeRecord(
            url: "http://127.0.0.1/m.bin", etag: "\"e\"", totalLength: 8192, ranges: [ByteRange(0, 1024)])
        record.written = [ByteRange(0, 4096)]
        plantPartial(dest, [UInt8](repeating: 1, count: 4096), record: record)
        let mount = try #require(try Sys.status(dest + ".part")).mount
        for (mountID, expected) in [(mount, Int64(4096)), (mount.map { $0 &+ 1 }, 1024)] {
            var planted = try #require(ResumeRecord.decode(bytes(at: dest + ".haul")))
            planted.mountID = mountID
            try Sys.writeFileAtomically(dest + ".haul", planted.encoded())
            guard case .partial(let trusted) = try PartialFile(destination: dest).inspect() else {
                Issue.record("not bound")
                return
            }
            #expect(trusted.contiguousBytes == expected, "mount \(String(describing: mountID))")
        }
    }
}

@Suite("A partial is never left without its record", .fewAtOnce)
struct RecordFirstTests {
    /// A small file stopped before it is put in place (here: the rename, or for a file that came
    /// whole with the probe the link of its unnamed file, fails; a kill -9 there is the same):
    /// streamed, it leaves a partial with its record, which the next run takes as haul's own
    /// instead of refusing it (exit 5); whole, it leaves nothing.
    @Test(arguments: [1, 4])
    func aSmallFileStoppedBeforeItIsInPlaceLeavesNothingToRefuse(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("small.bin")
        let hook = FaultInjection.add { call, _, path in
            (call == .rename || call == .link) && path == dest ? Errno(EIO) : nil
        }
        var options = DownloadOptions()
        options.connections = connections
        let url = server.url("/small.bin?size=3000")
        let (failed, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        FaultInjection.remove(hook)
        #expect(failed.error != nil)
        if connections == 1 {
            #expect(fileExists(dest + ".part") && fileExists(dest + ".haul"), "\(dir.contents())")
        } else {
            #expect(dir.contents().isEmpty, "\(dir.contents())")
        }
        let (result, _) = await run(testSession(), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(result.error == nil, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: 3000))
        #expect(dir.contents() == ["small.bin"])
    }
}
