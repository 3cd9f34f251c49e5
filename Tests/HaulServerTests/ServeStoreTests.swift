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

    @Test func anEndIsToldOnceAndADownloadGoingAgainMakesItsNextEndNews() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try ServeStore(path: dir.path + "/s.sqlite")
        let (me, you) = ("0123456789abcdef", "fedcba9876543210")
        var mine = Self.new("http://h/a")
        mine.session = "com.example.a"
        let theirs = NewDownload(url: URL(string: "http://h/b")!, session: "com.example.b")
        let added = try store.add([mine, mine, mine, theirs, Self.new("http://h/none")], now: 1)
        let (a, a2, a3, b, none) = (added[0].id, added[1].id, added[2].id, added[3].id, added[4].id)
        #expect(try store.tell(a, session: "com.example.a", claim: me) == nil)  // not ended
        // The untold ends come first, in the order they ended, whatever their place in the queue.
        try store.setState(a3, .completed, now: 2)
        try store.setState(a, .failed, error: "x", now: 3)
        try store.setState(none, .completed, now: 2)
        #expect(try store.unsettled(session: "com.example.a", limit: 10).map(\.id) == [a3, a, a2])
        #expect(try store.unsettled(session: "com.example.a", limit: 1).map(\.id) == [a3])
        #expect(try store.tell(none, session: "com.example.a", claim: me) == nil)  // no session
        #expect(try store.tell(a3, session: "com.example.b", claim: me) == nil)  // another session's
        #expect(try store.tell(a3, session: "com.example.a", claim: me) == true)
        // The same claim again (an answer lost on the way) is still told; another one is not.
        #expect(try store.tell(a3, session: "com.example.a", claim: me) == true)
        #expect(try store.tell(a3, session: "com.example.a", claim: you) == false)
        #expect(try store.download(a3)?.told == true)
        #expect(try store.unsettled(session: "com.example.a", limit: 10).map(\.id) == [a, a2])
        #expect(try store.unsettledCount(session: "com.example.a") == 2)
        #expect(try store.unsettled(session: "com.example.b", limit: 10).map(\.id) == [b])
        // The same end set again stays told; a failed download resumed and failed again is news.
        try store.setState(a3, .completed, now: 4)
        #expect(try store.download(a3)?.told == true)
        #expect(try store.tell(a, session: "com.example.a", claim: you) == true)
        try store.setState(a, .queued, now: 5)
        #expect(try store.download(a)?.told == false)
        #expect(try store.tell(a, session: "com.example.a", claim: you) == nil)
        try store.setState(a, .failed, error: "y", now: 6)
        #expect(try store.tell(a, session: "com.example.a", claim: me) == true)
        #expect(try store.list(session: "com.example.a").map(\.id) == [a, a2, a3])
        // Events carry the session: a removal's too, appended before its row goes.
        _ = try store.append(event: "state", download: b, body: "{}")
        _ = try store.append(event: "removed", download: a, body: "{}")
        try store.remove(a)
        _ = try store.append(event: "network", download: nil, body: "{}")
        #expect(try store.events(since: 0, session: "com.example.a").map(\.kind) == ["removed"])
        #expect(try store.events(since: 0).map(\.kind) == ["state", "removed", "network"])
    }

    @Test func aStoreOfSchemaOneIsCarriedOverWithItsDownloads() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/s.sqlite"
        do {
            // Schema 1 as the first haul serve wrote it.
            let old = try SQLiteDatabase(path: path)
            try old.execute(
                """
                CREATE TABLE downloads (
                    id INTEGER PRIMARY KEY AUTOINCREMENT, url TEXT NOT NULL, name TEXT, subfolder TEXT,
                    options TEXT NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL,
                    position INTEGER NOT NULL, added REAL NOT NULL, finished REAL, error TEXT, file TEXT,
                    done INTEGER NOT NULL DEFAULT 0, total INTEGER, owned TEXT);
                CREATE INDEX downloads_order ON downloads (priority DESC, position);
                CREATE TABLE events (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT, download INTEGER, kind TEXT NOT NULL, body TEXT NOT NULL);
                CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                INSERT INTO downloads (url, options, state, priority, position, added, finished)
                    VALUES ('http://h/old', '{}', 'completed', 0, 1, 10, 20);
                INSERT INTO events (download, kind, body) VALUES (1, 'state', '{}');
                PRAGMA user_version = 1;
                """)
        }
        let store = try ServeStore(path: path)
        let old = try #require(try store.list().first)
        #expect(old.url == "http://h/old" && old.state == .completed && old.session == nil && !old.told)
        #expect(try store.events(since: 0).count == 1)
        #expect(try store.database.query("PRAGMA user_version").first?.first?.integer == 2)
        var new = Self.new("http://h/new")
        new.session = "s"
        #expect(try store.add([new], now: 30).first?.session == "s")
        #expect(try ServeStore(path: path).list(session: "s").map(\.url) == ["http://h/new"])
    }

    @Test func theListSortsEveryWayWithTheUnknownLast() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try ServeStore(path: dir.path + "/s.sqlite")
        let added = try store.add(
            [
                Self.new("http://h/b", name: "Zeta.iso"), Self.new("http://h/a", name: "alpha.iso"),
                Self.new("http://h/c"),
            ],
            now: 1)
        let (zeta, alpha, c) = (added[0].id, added[1].id, added[2].id)
        try store.setState(alpha, .completed, now: 5)
        try store.setState(zeta, .failed, error: "x", now: 3)
        try store.setProgress(zeta, file: nil, done: 0, total: 900)
        try store.setProgress(alpha, file: nil, done: 0, total: 100)
        func order(_ o: ListOrder, descending: Bool = false) throws -> [Int64] {
            try store.list(order: o, descending: descending).map(\.id)
        }
        #expect(try order(.finished) == [zeta, alpha, c] && order(.finished, descending: true) == [alpha, zeta, c])
        #expect(try order(.total) == [alpha, zeta, c] && order(.total, descending: true) == [zeta, alpha, c])
        // Case ignored: alpha.iso, http://h/c, Zeta.iso.
        #expect(try order(.name) == [alpha, c, zeta] && order(.name, descending: true) == [zeta, c, alpha])
        #expect(try order(.added, descending: true) == [c, alpha, zeta])
    }
}
