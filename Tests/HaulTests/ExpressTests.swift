import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// The express way of a small file (`haul get -j` without a live display,
/// docs/small-downloads.md): saved in callbacks, or declined with nothing left behind and the
/// answer so far handed to the full engine, which never asks twice.
@Suite("Express downloads of small files", .fewAtOnce)
struct ExpressTests {
    /// The options `haul get` gives a download: four connections. Not the claim kept to the end
    /// of the process (`haul get`'s run): the test runner is one process, and a later test's
    /// directory can reuse a removed one's inode, which a kept claim is bound to.
    private static var options: DownloadOptions {
        var o = DownloadOptions()
        o.connections = 4
        return o
    }

    /// Starts `url` the express way and waits (bounded) for its end; nil when it was not started.
    private func express(
        _ session: HaulSession, _ url: URL, into dir: URL, options: DownloadOptions = Self.options
    ) async throws -> HaulSession.ExpressEnd? {
        let ended = OneShot<HaulSession.ExpressEnd>()
        weak let download = session.startExpress(url, into: dir, options: options) { ended.fulfill($0) }
        guard download != nil || ended.isFulfilled else { return nil }
        let end = try await Self.value(of: ended)
        // Nothing keeps a saved one: no callback of its transfer, no reference cycle. (A declined
        // one lives as long as the transfer its answer holds, which the engine takes or cancels.)
        if case .saved? = end {
            for _ in 0..<500 where download != nil { try await Task.sleep(nanoseconds: 10_000_000) }
            #expect(download == nil, "a saved express download is let go")
        }
        return end
    }

    /// The value of `shot` once set, looked at every 10 ms for at most 30 s (nil after that).
    private static func value<T: Sendable>(of shot: OneShot<T>) async throws -> T? {
        for _ in 0..<3000 where !shot.isFulfilled { try await Task.sleep(nanoseconds: 10_000_000) }
        return shot.isFulfilled ? await shot.value() : nil
    }

    private func declinedOptions(_ end: HaulSession.ExpressEnd?) -> DownloadOptions? {
        guard case .declined(let options)? = end else { return nil }
        return options
    }

    @Test func aSmallFileIsSavedWithOneRequestAndNothingBesideIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/small.bin?size=5000")
        let end = try await express(testSession(), url, into: dir.url)
        guard case .saved(let result, let start)? = end else {
            Issue.record("not saved: \(String(describing: end))")
            return
        }
        #expect(result.bytes == 5000 && !result.alreadyComplete)
        #expect(result.fileURL.path == dir.file("small.bin"))
        #expect(start.offset == 0 && start.totalBytes == 5000 && start.destination == result.fileURL)
        expectFile(dir.file("small.bin"), equals: TestContent.bytes(count: 5000))
        #expect(dir.contents() == ["small.bin"])
        #expect(server.requests.count == 1)
        // The same request the engine's probe makes.
        #expect(server.requests.first?.header("Range") == "bytes=0-2097151")
        #expect(DestinationClaims.shared.isClaimed(dir.file("small.bin")) == false, "released")
    }

    @Test func theServersNameIsTakenAsTheEngineTakesIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let end = try await express(testSession(), server.url("/dl?size=300&cd=traversal"), into: dir.url)
        guard case .saved(let result, _)? = end else {
            Issue.record("not saved: \(String(describing: end))")
            return
        }
        #expect(result.fileURL.path == dir.file("evil.txt"))
        #expect(dir.contents() == ["evil.txt"])
    }

    @Test func aLargerFileGoesToTheEngineWithItsFirstRangeAskedOnce() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        let url = server.url("/big.bin?size=5000000")
        let end = try await express(session, url, into: dir.url)
        let options = try #require(declinedOptions(end), "declined: \(String(describing: end))")
        #expect(options.prefetched != nil)
        #expect(dir.contents().isEmpty, "nothing of its own left")
        let (result, _) = await run(session, url, to: .directory(dir.url), options: options)
        #expect(result.value?.bytes == 5_000_000, "\(String(describing: result.error))")
        expectFile(dir.file("big.bin"), equals: TestContent.bytes(count: 5_000_000))
        let probes = server.requests.filter { $0.header("Range") == "bytes=0-2097151" }
        #expect(probes.count == 1, "the held answer is the engine's probe: \(server.requests.map(\.target))")
    }

    @Test func anErrorStatusIsTheEnginesToReportWithoutAskingAgain() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        let url = server.url("/gone.bin?status=404")
        let options = try #require(declinedOptions(try await express(session, url, into: dir.url)))
        let (result, _) = await run(session, url, to: .directory(dir.url), options: options)
        #expect(result.error?.httpStatus == 404, "\(String(describing: result.error))")
        #expect(server.requests.count == 1)
        #expect(dir.contents().isEmpty)
    }

    @Test func aFileAlreadyThereIsLeftAloneAndTheEngineJudgesIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let mine = Array("not the server's".utf8)
        #expect(FileManager.default.createFile(atPath: dir.file("a.bin"), contents: Data(mine)))
        let session = testSession()
        let url = server.url("/a.bin?size=4000")
        let options = try #require(declinedOptions(try await express(session, url, into: dir.url)))
        expectFile(dir.file("a.bin"), equals: mine)
        let (result, _) = await run(session, url, to: .directory(dir.url), options: options)
        #expect(result.error?.code == .destinationExists, "\(String(describing: result.error))")
        expectFile(dir.file("a.bin"), equals: mine)
        #expect(server.requests.count == 1)
    }

    @Test func aPartialOfTheURLIsTheEnginesToContinueAndNothingIsAsked() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/p.bin?size=4000")
        let content = TestContent.bytes(count: 4000)
        plantPartial(
            dir.file("p.bin"), Array(content[0..<1000]),
            record: ResumeRecord(
                url: url.absoluteString, etag: "\"s1-v0-4000\"", totalLength: 4000, ranges: [ByteRange(0, 1000)]))
        let end = try await express(testSession(), url, into: dir.url)
        guard case .declined(let options)? = end else {
            Issue.record("not declined: \(String(describing: end))")
            return
        }
        #expect(options.prefetched == nil)
        #expect(server.requests.isEmpty)
    }

    /// Saves `name` the express way into `dir`, which lists the directory for the process's
    /// record index: what is made in it after this is not in that listing.
    private func listByASave(_ session: HaulSession, _ server: TestServer, into dir: TemporaryDirectory) async throws {
        let end = try await express(session, server.url("/listing.bin?size=100"), into: dir.url)
        guard case .saved? = end else {
            throw HaulError(.fileSystem, "the listing save declined: \(String(describing: end))")
        }
        #expect(RecordIndex.shared.listings(of: dir.path) == 1)
        #expect(!RecordIndex.shared.listedFree(dir.file("listing.bin")), "a file saved is not free")
    }

    /// A file made at the name after the directory was listed is found by the link, which never
    /// replaces: the save declines with its answer, and the engine judges the file.
    @Test func aFileMadeAfterTheListingIsFoundByTheLinkAndLeftAlone() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        try await listByASave(session, server, into: dir)
        let mine = Array("not the server's".utf8)
        #expect(FileManager.default.createFile(atPath: dir.file("late.bin"), contents: Data(mine)))
        if Sys.readDirectory(dir.path, { _ in })?.foldsCase == false {
            #expect(RecordIndex.shared.listedFree(dir.file("late.bin")), "not looked at: the link finds it")
        }
        let url = server.url("/late.bin?size=4000")
        let options = try #require(declinedOptions(try await express(session, url, into: dir.url)))
        #expect(options.prefetched != nil, "the answer goes to the engine")
        expectFile(dir.file("late.bin"), equals: mine)
        let (result, _) = await run(session, url, to: .directory(dir.url), options: options)
        #expect(result.error?.code == .destinationExists, "\(String(describing: result.error))")
        expectFile(dir.file("late.bin"), equals: mine)
        #expect(server.requests(path: "/late.bin").count == 1)
        #expect(dir.contents() == ["late.bin", "listing.bin"])
    }

    /// Side files another program makes after the listing are not looked at by the save, which
    /// never touches them: the file is saved beside them, and they are left as they were.
    @Test func sideFilesMadeAfterTheListingAreLeftAsTheyWere() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // A directory that folds case keeps no names, and every name is looked at.
        guard Sys.readDirectory(dir.path, { _ in })?.foldsCase == false else { return }
        let session = testSession()
        try await listByASave(session, server, into: dir)
        let part = Array("another program's partial".utf8)
        let record = Array("not a record".utf8)
        #expect(FileManager.default.createFile(atPath: dir.file("side.bin.part"), contents: Data(part)))
        #expect(FileManager.default.createFile(atPath: dir.file("side.bin.haul"), contents: Data(record)))
        let end = try await express(session, server.url("/side.bin?size=3000"), into: dir.url)
        guard case .saved? = end else {
            Issue.record("not saved: \(String(describing: end))")
            return
        }
        expectFile(dir.file("side.bin"), equals: TestContent.bytes(count: 3000))
        expectFile(dir.file("side.bin.part"), equals: part)
        expectFile(dir.file("side.bin.haul"), equals: record)
    }

    /// A partial this process left after the listing (its record is noted in the index) is
    /// judged as ever: another URL's answer naming the same file declines, and the partial stays.
    @Test func aPartialThisProcessLeftAfterTheListingIsJudged() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        try await listByASave(session, server, into: dir)
        let cut = server.url("/cut?size=2000000&cd=benign&drop=600000&drops=1")
        let (first, _) = await run(testSession { $0.retry.maxRetries = 0 }, cut, to: .directory(dir.url))
        #expect(first.error != nil)
        let partial = bytes(at: dir.file("report.pdf.part"))
        #expect(partial.count == 600_000)
        let other = server.url("/other?size=3000&cd=benign")
        let options = try #require(declinedOptions(try await express(session, other, into: dir.url)))
        #expect(options.prefetched != nil)
        #expect(!FileManager.default.fileExists(atPath: dir.file("report.pdf")))
        expectFile(dir.file("report.pdf.part"), equals: partial)
    }

    /// A directory is made (or found) once per process the express way; one removed after that
    /// fails the next save's create, which declines with the answer, and the engine makes the
    /// directory again and saves the file from that answer without asking twice.
    @Test func aDirectoryRemovedDuringARunIsMadeAgainByTheEngine() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let sub = dir.url.appendingPathComponent("sub")
        let session = testSession()
        guard case .saved? = try await express(session, server.url("/one.bin?size=3000"), into: sub) else {
            Issue.record("the first was not saved")
            return
        }
        try FileManager.default.removeItem(at: sub)
        let url = server.url("/two.bin?size=3000")
        let options = try #require(declinedOptions(try await express(session, url, into: sub)))
        #expect(options.prefetched != nil, "the answer goes to the engine")
        #expect(!FileManager.default.fileExists(atPath: sub.path))
        let (result, _) = await run(session, url, to: .directory(sub), options: options)
        #expect(result.value?.bytes == 3000, "\(String(describing: result.error))")
        expectFile(sub.path + "/two.bin", equals: TestContent.bytes(count: 3000))
        #expect(server.requests.filter { $0.target.hasPrefix("/two.bin") }.count == 1)
    }

    @Test func anAnswerNobodyTakesIsCancelledWithItsOptions() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = try #require(
            declinedOptions(try await express(testSession(), server.url("/held.bin?size=5000000"), into: dir.url)))
        let task = try #require(options.prefetched?.task)
        let ended = OneShot<Result<Void, TransportError>>()
        task.onFinish { ended.fulfill($0) }
        #expect(ended.isFulfilled == false, "held, paused after its head")
        options.prefetched = nil  // the last reference
        let result = try await Self.value(of: ended)
        guard case .failure(let error)? = result else {
            Issue.record("not cancelled: \(String(describing: result))")
            return
        }
        #expect(error.kind == .cancelled)
    }

    /// The express request is the engine's probe request: netrc's credentials go with it.
    @Test func netrcCredentialsGoWithTheExpressRequest() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let netrc = dir.file("netrc")
        try Data("machine 127.0.0.1 login alice password one\n".utf8).write(to: URL(fileURLWithPath: netrc))
        let out = dir.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: false)
        let session = testSession { $0.netrcFile = netrc }
        let end = try await express(session, server.url("/secret.bin?size=100&auth=alice:one"), into: out)
        guard case .saved(let result, _)? = end else {
            Issue.record("not saved: \(String(describing: end))")
            return
        }
        #expect(result.bytes == 100)
        let basic = "Basic " + Data("alice:one".utf8).base64EncodedString()
        #expect(server.requests(path: "/secret.bin").map { $0.header("Authorization") } == [basic])
    }

    /// `-k` as large as a byte count goes: the probe's limit is 8 MiB, not an overflow.
    @Test func theLargestSplitSizeIsNoOverflow() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var options = Self.options
        options.minSplitSize = .max
        let end = try await express(testSession(), server.url("/k.bin?size=3000"), into: dir.url, options: options)
        guard case .saved? = end else {
            Issue.record("not saved: \(String(describing: end))")
            return
        }
        #expect(server.requests.first?.header("Range") == "bytes=0-8388607")
        let (result, _) = await run(
            testSession(), server.url("/k2.bin?size=3000000"), to: .directory(dir.url), options: options)
        #expect(result.value?.bytes == 3_000_000, "\(String(describing: result.error))")
    }

    /// A declined answer lets its body go once the engine has taken it (a manager keeps its
    /// items' options to the end of a run).
    @Test func aTakenAnswerHoldsNoBody() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(
            FileManager.default.createFile(atPath: dir.file("t.bin"), contents: Data(TestContent.bytes(count: 9000))))
        let session = testSession()
        let url = server.url("/t.bin?size=9000")
        let options = try #require(declinedOptions(try await express(session, url, into: dir.url)))
        weak let fetch = options.prefetched?.take().map { $0.0 }
        #expect(fetch == nil, "taken, the answer is held by nothing")
        #expect(options.prefetched?.task == nil)
    }

    @Test func optionsTheExpressWayCannotHonourTakeTheEngine() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let session = testSession()
        let url = server.url("/x.bin?size=100")
        var variants: [DownloadOptions] = []
        for change in [
            { (o: inout DownloadOptions) in o.connections = 1 },
            { (o: inout DownloadOptions) in o.overwrite = true },
            { (o: inout DownloadOptions) in
                o.checksums = [try! Checksum("sha-256=" + String(repeating: "0", count: 64))]
            },
            { (o: inout DownloadOptions) in o.revalidatesExistingFile = true },
            { (o: inout DownloadOptions) in o.checksReachability = true },
        ] {
            var o = Self.options
            change(&o)
            variants.append(o)
        }
        for options in variants {
            #expect(try await express(session, url, into: dir.url, options: options).map { _ in 1 } == nil)
        }
        let timed = testSession { $0.timeout.resource = 60 }
        #expect(try await express(timed, url, into: dir.url).map { _ in 1 } == nil)
        #expect(server.requests.isEmpty)
    }
}
