import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

/// `-N` at the seams: what is at the destination, what is waiting beside it, and what is kept
/// of a server's answer.
@Suite("Revalidation (-N): links, partials, the store's directory", .fewAtOnce)
struct RevalidationEdgeTests {
    typealias R = RevalidationTests

    @Test(arguments: [1, 4])
    func aSymbolicLinkAtTheDestinationIsNotReplaced(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let target = dir.file("elsewhere.txt")
        let mine = Array("the link's own file".utf8)
        try Data(mine).write(to: URL(fileURLWithPath: target))
        let dest = dir.file("link.bin")
        try FileManager.default.createSymbolicLink(atPath: dest, withDestinationPath: target)
        let (result, _) = await run(
            R.session(dir), server.url("/link-\(connections)?size=5000"), to: .file(URL(fileURLWithPath: dest)),
            options: R.options(connections: connections))
        #expect(result.error?.code == .destinationExists, "\(String(describing: result))")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dest) == target, "still the link")
        expectFile(target, equals: mine)
        // Of the server's size: refused too, not taken for "already complete" by its size.
        let (same, _) = await run(
            R.session(dir), server.url("/link-\(connections)?size=\(mine.count)"),
            to: .file(URL(fileURLWithPath: dest)), options: R.options(connections: connections))
        #expect(same.error?.code == .destinationExists, "\(String(describing: same))")
        #expect(same.error?.message.contains("symbolic link") == true)
        expectFile(target, equals: mine)
    }

    /// A `-N` run into a directory that was cut short leaves a partial of the new version beside
    /// the old file; the next run continues it and replaces the file.
    @Test(arguments: [1, 4])
    func intoADirectoryAWaitingPartialOfANewVersionReplacesTheFile(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let files = dir.url.appendingPathComponent("files")
        try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
        let dest = files.appendingPathComponent("r.bin").path
        // The old file (all 0x41), and the server's version half fetched beside it, in two ranges.
        try Data(repeating: 0x41, count: R.size).write(to: URL(fileURLWithPath: dest))
        let url = server.url("/r-\(connections)?size=\(R.size)&cd=r.bin")
        let newer = TestContent.bytes(count: R.size)
        var planted = [UInt8](repeating: 0, count: R.size)
        planted.replaceSubrange(0..<1_000_000, with: newer[0..<1_000_000])
        planted.replaceSubrange(2_000_000..<2_500_000, with: newer[2_000_000..<2_500_000])
        let record = ResumeRecord(
            url: url.absoluteString, etag: "\"s1-v0-\(R.size)\"", lastModified: HTTPDate.format(R.versionZeroDate),
            totalLength: Int64(R.size), ranges: [ByteRange(0, 1_000_000), ByteRange(2_000_000, 2_500_000)])
        plantPartial(dest, planted, record: record)
        let (result, _) = await run(
            R.session(dir), url, to: .directory(files), options: R.options(connections: connections))
        let done = try #require(result.value, "\(String(describing: result.error))")
        #expect(done.fileURL.path == dest && !done.notModified)
        expectFile(dest, equals: newer)
        // After the one-byte probe, only the gaps: nothing before 1 MB, nothing of 2-2.5 MB.
        let starts = server.requests(path: "/r-\(connections)").dropFirst().map { $0.rangeStart ?? 0 }
        #expect(!starts.isEmpty && starts.allSatisfy { (1_000_000..<2_000_000).contains($0) || $0 >= 2_500_000 })
        #expect(try FileManager.default.contentsOfDirectory(atPath: files.path) == ["r.bin"])
    }

    @Test func aFileAskedAboutByItsTimeDoesNotTakeTheServersETag() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("mine.bin")
        try Data("my own copy".utf8).write(to: URL(fileURLWithPath: dest))
        try Sys.setModified(dest, seconds: R.versionZeroDate + 60)
        let url = server.url("/mine-time?size=5000")
        for _ in 0..<2 {
            let (kept, _) = await run(
                R.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: R.options(connections: 1))
            #expect(kept.value?.notModified == true, "\(String(describing: kept.error))")
        }
        // A 304 to If-Modified-Since says nothing of which bytes this file holds.
        let asked = server.requests(path: "/mine-time")
        #expect(asked.count == 2 && asked.allSatisfy { $0.header("If-None-Match") == nil })
    }

    @Test func withOverwriteTheFileIsDownloadedAnewWithoutAsking() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("anew.bin")
        try Data("my own copy".utf8).write(to: URL(fileURLWithPath: dest))
        try Sys.setModified(dest, seconds: R.versionZeroDate + 60)
        var options = R.options(connections: 1)
        options.overwrite = true
        let url = server.url("/anew?size=5000")
        let (result, _) = await run(R.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        #expect(result.value?.notModified == false, "\(String(describing: result.error))")
        expectFile(dest, equals: TestContent.bytes(count: 5000))
        let asked = try #require(server.requests(path: "/anew").first)
        #expect(asked.header("If-Modified-Since") == nil && asked.header("If-None-Match") == nil)
        // Its validators are kept for the next run.
        _ = await run(R.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: R.options(connections: 1))
        #expect(server.requests(path: "/anew").last?.header("If-None-Match") == "\"s1-v0-5000\"")
    }

    @Test func aFileChangedWhileTheServerWasAskedKeepsNoValidators() throws {
        let f = try SavedValidators()
        defer { f.dir.remove() }
        let (dir, store, file, url) = (f.dir, f.store, f.file, f.url)
        let asked = try #require(store.condition(for: url, target: .file(file)))
        #expect(asked.etag == "\"e1\"")
        // Written to between the question and the 304.
        try Data([9, 9, 9]).write(to: URL(fileURLWithPath: file))
        store.saveUnchanged(url, target: .file(file), asked: asked, etag: "\"e1\"", lastModified: nil)
        #expect(store.condition(for: url, target: .file(file))?.etag == nil)
        #expect(Sys.listDirectory(dir.file("state")).isEmpty, "the entry of the old bytes is gone")
    }

    @Test func aStoreDirectoryOthersCanOnlyReadIsClosedToThemAndUsed() throws {
        let f = try SavedValidators(openDirectory: true)
        defer { f.dir.remove() }
        let (dir, store, file, url) = (f.dir, f.store, f.file, f.url)
        #expect(store.condition(for: url, target: .file(file))?.etag == "\"e1\"")
        #expect(
            try #require(try FileManager.default.attributesOfItem(atPath: dir.file("state"))[.posixPermissions] as? Int)
                == 0o700)
    }

    @Test func a304NamingAnotherETagDropsTheEntry() throws {
        let f = try SavedValidators()
        defer { f.dir.remove() }
        let (_, store, file, url) = (f.dir, f.store, f.file, f.url)
        let asked = try #require(store.condition(for: url, target: .file(file)))
        store.saveUnchanged(url, target: .file(file), asked: asked, etag: "W/\"e1\"", lastModified: nil)
        #expect(store.condition(for: url, target: .file(file))?.etag == "W/\"e1\"", "the same, weakly")
        let again = try #require(store.condition(for: url, target: .file(file)))
        store.saveUnchanged(url, target: .file(file), asked: again, etag: "\"other\"", lastModified: nil)
        #expect(store.condition(for: url, target: .file(file))?.etag == nil)
    }

    @Test func aStoreDirectoryOthersCanWriteIsNotTrusted() throws {
        let f = try SavedValidators()
        defer { f.dir.remove() }
        let (dir, store, file, url) = (f.dir, f.store, f.file, f.url)
        #expect(store.condition(for: url, target: .file(file))?.etag == "\"e1\"")
        #expect(chmod(dir.file("state"), 0o777) == 0)
        #expect(store.condition(for: url, target: .file(file))?.etag == nil)
        #expect(chmod(dir.file("state"), 0o700) == 0)
        let entry = try #require(Sys.listDirectory(dir.file("state")).first)
        #expect(chmod(dir.file("state/" + entry), 0o666) == 0)
        #expect(store.condition(for: url, target: .file(file))?.etag == nil)
    }

    @Test func withoutAHomeTheStoreIsNotInASharedDirectory() {
        let found = ValidatorStore.defaultDirectory([:])
        #expect(found.map { !$0.hasPrefix("/tmp") } ?? true, "\(String(describing: found))")
        #expect(ValidatorStore.defaultDirectory(["HOME": "relative"]).map { $0.hasPrefix("/") } ?? true)
        #expect(ValidatorStore.defaultDirectory(["HOME": "/home/u"]) == "/home/u/.local/state/haul/validators")
    }

    @Test func aFilesTimeIsSetOnTheLinkNotThroughIt() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let target = dir.file("t.bin")
        try Data([1]).write(to: URL(fileURLWithPath: target))
        let before = try #require(try Sys.status(target)).modified
        try FileManager.default.createSymbolicLink(atPath: dir.file("l"), withDestinationPath: target)
        try Sys.setModified(dir.file("l"), seconds: 1000)
        #expect(try #require(try Sys.status(target)).modified == before)
    }
}
