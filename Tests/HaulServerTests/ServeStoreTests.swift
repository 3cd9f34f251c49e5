import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore
@testable import HaulServer

/// The daemon's store: what it keeps, across a reopen, and what it refuses.
@Suite("haul serve's store (SQLite, WAL)")
struct ServeStoreTests {
    static func new(_ url: String, name: String? = nil) -> NewDownload {
        NewDownload(url: URL(string: url)!, name: name)
    }

    @Test func downloadsAreKeptInQueueOrderAcrossAReopen() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/serve.sqlite"
        do {
            let store = try ServeStore(path: path)
            let added = try store.add([Self.new("http://h/a", name: "a.iso"), Self.new("http://h/b")], now: 100)
            #expect(added.map(\.position) == [1, 2] && added.allSatisfy { $0.state == .queued })
            var urgent = Self.new("http://h/c")
            urgent.priority = 5
            _ = try store.add([urgent], now: 101)
            try #require(try store.setState(added[0].id, .running, now: 102))
            try store.setSetting("speedLimit", "1000000")
            try store.setSetting("speedLimit", "2000000")
        }
        let store = try ServeStore(path: path)
        let list = try store.list()
        #expect(list.map(\.url) == ["http://h/c", "http://h/a", "http://h/b"])
        #expect(list[1].name == "a.iso" && list[1].state == .running && list[1].added == 100)
        #expect(try store.setting("speedLimit") == "2000000")
        // A restart queues what was running again.
        #expect(try store.recover() == 1)
        #expect(try store.download(list[1].id)?.state == .queued)
        #expect(try store.list(states: [.queued]).count == 3)
        #expect(try store.list(limit: 1, offset: 1).map(\.url) == ["http://h/a"])
    }

    @Test func endsHaveATimeAndAReasonAndRemovalsAreGone() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try ServeStore(path: dir.path + "/s.sqlite")
        let d = try store.add([Self.new("http://h/a")], now: 1)[0]
        try store.setState(d.id, .failed, error: "HTTP 404 Not Found from http://h/a", now: 7)
        let failed = try #require(try store.download(d.id))
        #expect(failed.state == .failed && failed.finished == 7 && failed.error == "HTTP 404 Not Found from http://h/a")
        #expect(try store.remove(d.id))
        #expect(try store.download(d.id) == nil)
        #expect(try !store.remove(d.id))
        #expect(try !store.setState(999, .paused, now: 8))
    }

    @Test func credentialsInAURLAreNeverStored() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/s.sqlite"
        let store = try ServeStore(path: path)
        let d = try store.add([Self.new("http://alice:s3cret@h/a")], now: 1)[0]
        #expect(!d.url.contains("s3cret") && !d.url.contains("alice"))
        #expect(try store.download(d.id)?.url == d.url)
        for file in [path, path + "-wal"] {
            let bytes = FileManager.default.contents(atPath: file) ?? Data()
            #expect(bytes.range(of: Data("s3cret".utf8)) == nil, "\(file)")
        }
    }

    @Test func theStoreIsThisUsersAloneAndWriteAhead() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/s.sqlite"
        // One made 0644 by an earlier run (or by hand) is closed to others first.
        _ = FileManager.default.createFile(atPath: path, contents: Data())
        chmod(path, 0o644)
        let store = try ServeStore(path: path)
        _ = try store.add([Self.new("http://h/a")], now: 1)
        #expect(try store.database.query("PRAGMA journal_mode").first?.first?.text == "wal")
        #expect(try store.database.query("PRAGMA synchronous").first?.first?.integer == 2)  // FULL
        for file in [path, path + "-wal", path + "-shm"] {
            var st = stat()
            #expect(lstat(file, &st) == 0 && st.st_mode & 0o077 == 0, "\(file)")
        }
    }

    @Test func eventsAreNumberedAndReadFromANumber() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try ServeStore(path: dir.path + "/s.sqlite")
        let first = try store.append(event: "added", download: 1, body: "{}")
        let second = try store.append(event: "state", download: 1, body: "{\"state\":\"running\"}")
        _ = try store.append(event: "network", download: nil, body: "{}")
        #expect(second == first + 1)
        let after = try store.events(since: first)
        #expect(after.map(\.kind) == ["state", "network"] && after[1].download == nil)
        #expect(try store.events(since: first, limit: 1).map(\.seq) == [second])
    }

    @Test func aStoreFromANewerHaulOrBehindALinkIsRefused() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/s.sqlite"
        do {
            let store = try ServeStore(path: path)
            try store.database.execute("PRAGMA user_version = 99")
        }
        #expect(throws: ServeError.self) { try ServeStore(path: path) }
        symlink(path, dir.path + "/link.sqlite")
        #expect(throws: ServeError.self) { try ServeStore(path: dir.path + "/link.sqlite") }
        _ = FileManager.default.createFile(atPath: dir.path + "/junk.sqlite", contents: Data("not a database".utf8))
        #expect(throws: ServeError.self) { try ServeStore(path: dir.path + "/junk.sqlite") }
    }

    @Test func aFailedAddAddsNothing() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try ServeStore(path: dir.path + "/s.sqlite")
        #expect(throws: ServeError.self) {
            try store.database.transaction { () throws(ServeError) in
                _ = try store.add([Self.new("http://h/a")], now: 1)
            }
        }
        // The nested BEGIN failed before anything; and a statement that fails midway rolls back.
        #expect(throws: ServeError.self) {
            try store.database.transaction { () throws(ServeError) in
                try store.database.query("INSERT INTO settings (key, value) VALUES ('k', 'v')")
                try store.database.query("INSERT INTO no_such_table VALUES (1)")
            }
        }
        #expect(try store.list().isEmpty && store.setting("k") == nil)
    }
}
