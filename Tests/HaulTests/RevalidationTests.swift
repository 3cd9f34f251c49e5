import Foundation
import Haul
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("Revalidation (-N): conditional GET for a file already there", .fewAtOnce)
struct RevalidationTests {
    static let size = 3_000_000
    /// The test server's Last-Modified of version 0, in seconds since 1970.
    static let versionZeroDate: Int64 = 1_767_225_600

    static func session(_ dir: TemporaryDirectory) -> HaulSession {
        testSession { $0.stateDirectory = dir.url.appendingPathComponent("state") }
    }

    static func options(connections: Int) -> DownloadOptions {
        var options = DownloadOptions()
        options.connections = connections
        options.revalidatesExistingFile = true
        return options
    }

    static func status(_ path: String) throws -> Sys.FileStatus { try #require(try Sys.status(path)) }

    @Test(arguments: [1, 4])
    func aFileTheServerStillHasIsKeptAsItIs(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let path = "/same-\(connections)?size=\(Self.size)"
        let dest = dir.url.appendingPathComponent("same.bin")
        let options = Self.options(connections: connections)
        let (first, _) = await run(Self.session(dir), server.url(path), to: .file(dest), options: options)
        #expect(first.value?.notModified == false, "\(String(describing: first.error))")
        expectFile(dest.path, equals: TestContent.bytes(count: Self.size))
        let saved = try Self.status(dest.path)
        #expect(saved.modified == Self.versionZeroDate * 1_000_000_000, "its time is the server's Last-Modified")

        let asked = server.requests(path: "/same-\(connections)").count
        let (second, _) = await run(Self.session(dir), server.url(path), to: .file(dest), options: options)
        let result = try #require(second.value, "\(String(describing: second.error))")
        #expect(result.notModified && result.alreadyComplete)
        let requests = server.requests(path: "/same-\(connections)").dropFirst(asked)
        #expect(requests.count == 1)
        #expect(requests.first?.header("If-None-Match") == "\"s1-v0-\(Self.size)\"")
        #expect(requests.first?.header("If-Modified-Since") == HTTPDate.format(Self.versionZeroDate))
        let kept = try Self.status(dest.path)
        #expect(kept.inode == saved.inode && kept.changed == saved.changed, "not written again")
        #expect(dir.contents().sorted() == ["same.bin", "state"])
    }

    @Test(arguments: [1, 4])
    func aNewVersionReplacesTheFile(connections: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/new-\(connections)?size=\(Self.size)&change=1")
        let dest = dir.url.appendingPathComponent("new.bin")
        // change=1 counts requests: the first download takes one, so that it is all version 0.
        _ = await run(Self.session(dir), url, to: .file(dest), options: Self.options(connections: 1))
        expectFile(dest.path, equals: TestContent.bytes(count: Self.size))
        let options = Self.options(connections: connections)
        let (second, _) = await run(Self.session(dir), url, to: .file(dest), options: options)
        let result = try #require(second.value, "\(String(describing: second.error))")
        #expect(!result.notModified && !result.alreadyComplete)
        expectFile(dest.path, equals: TestContent.bytes(version: 1, count: Self.size))
        #expect(try Self.status(dest.path).modified == (Self.versionZeroDate + 3600) * 1_000_000_000)
        #expect(server.requests(path: "/new-\(connections)")[1].header("If-None-Match") == "\"s1-v0-\(Self.size)\"")

        // Without revalidation the same file is refused, as ever: another size is not replaced.
        let (plain, _) = await run(
            Self.session(dir), server.url("/new-\(connections)?size=100"), to: .file(dest),
            options: DownloadOptions())
        #expect(plain.error?.code == .destinationExists)
    }

    @Test func aServerThatIgnoresConditionsIsJudgedByItsETag() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/deaf?size=\(Self.size)&cond=0")
        let dest = dir.url.appendingPathComponent("deaf.bin")
        for connections in [1, 4] {
            let options = Self.options(connections: connections)
            _ = await run(Self.session(dir), url, to: .file(dest), options: options)
            let saved = try Self.status(dest.path)
            let (again, _) = await run(Self.session(dir), url, to: .file(dest), options: options)
            #expect(again.value?.notModified == true, "\(connections): \(String(describing: again.error))")
            #expect(try Self.status(dest.path).changed == saved.changed)
        }
    }

    @Test func aFileHaulDidNotSaveIsAskedAboutByItsTime() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("mine.bin")
        let mine = Array("my own copy".utf8)
        try Data(mine).write(to: URL(fileURLWithPath: dest))
        // Newer than the server's file: up to date, whatever its size.
        try Sys.setModified(dest, seconds: Self.versionZeroDate + 60)
        let url = server.url("/mine?size=5000")
        let (kept, _) = await run(
            Self.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: Self.options(connections: 4))
        #expect(kept.value?.notModified == true, "\(String(describing: kept.error))")
        #expect(
            server.requests(path: "/mine").last?.header("If-Modified-Since")
                == HTTPDate.format(Self.versionZeroDate + 60))
        #expect(server.requests(path: "/mine").last?.header("If-None-Match") == nil)
        expectFile(dest, equals: mine)
        // Older: the server's replaces it.
        try Sys.setModified(dest, seconds: Self.versionZeroDate - 60)
        let (replaced, _) = await run(
            Self.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: Self.options(connections: 4))
        #expect(replaced.value?.notModified == false, "\(String(describing: replaced.error))")
        expectFile(dest, equals: TestContent.bytes(count: 5000))
    }

    @Test func validatorsAreNotUsedForAFileChangedSince() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let dest = dir.file("edited.bin")
        let url = server.url("/edited?size=5000")
        let options = Self.options(connections: 1)
        _ = await run(Self.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        // The same size and time, other bytes: only its change time tells.
        let edited = [UInt8](repeating: 0x41, count: 5000)
        let fd = try Sys.open(dest, O_WRONLY)
        try edited.withUnsafeBytes { try Sys.pwriteAll(fd, $0, at: 0) }
        Sys.close(fd)
        try Sys.setModified(dest, seconds: Self.versionZeroDate)
        _ = await run(Self.session(dir), url, to: .file(URL(fileURLWithPath: dest)), options: options)
        let last = try #require(server.requests(path: "/edited").last)
        #expect(last.header("If-None-Match") == nil, "the ETag was of another file")
        #expect(last.header("If-Modified-Since") == HTTPDate.format(Self.versionZeroDate))
    }

    @Test func intoADirectoryTheSavedFileIsAskedAbout() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let files = dir.url.appendingPathComponent("files")
        let url = server.url("/named?size=4000&cd=report.txt")
        let options = Self.options(connections: 4)
        let (first, _) = await run(Self.session(dir), url, to: .directory(files), options: options)
        #expect(first.value?.fileURL.lastPathComponent == "report.txt", "\(String(describing: first.error))")
        let (second, _) = await run(Self.session(dir), url, to: .directory(files), options: options)
        #expect(second.value?.notModified == true, "\(String(describing: second.error))")
        #expect(second.value?.fileURL.lastPathComponent == "report.txt")
        #expect(server.requests(path: "/named").last?.header("If-None-Match") == "\"s1-v0-4000\"")
    }

    @Test func aStoredEntryThatCouldInjectAHeaderIsIgnored() throws {
        let f = try SavedValidators()
        defer { f.dir.remove() }
        let (dir, store, file, url) = (f.dir, f.store, f.file, f.url)
        #expect(store.condition(for: url, target: .file(file))?.etag == "\"e1\"")
        let entry = try #require(Sys.listDirectory(dir.file("state")).first)
        let text = try String(contentsOfFile: dir.file("state/" + entry), encoding: .utf8)
        try text.replacingOccurrences(of: "\\\"e1\\\"", with: "x\\r\\nX-Evil: 1").write(
            toFile: dir.file("state/" + entry), atomically: false, encoding: .utf8)
        let condition = try #require(store.condition(for: url, target: .file(file)))
        #expect(condition.etag == nil && condition.headers.allSatisfy { $0.0 == "If-Modified-Since" })
    }
}
