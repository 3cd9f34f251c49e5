import Haul
import HaulCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A download the daemon keeps: what was asked, where it stands.
package struct StoredDownload: Equatable, Sendable {
    package enum State: String, Sendable, CaseIterable {
        /// `waiting`: stopped, bytes kept, until the network allows it again.
        case queued, running, paused, waiting, completed, failed, cancelled

        /// Still to do after a restart.
        package var isUnfinished: Bool { !isEnded }
        /// Completed, failed or cancelled.
        package var isEnded: Bool { self == .completed || self == .failed || self == .cancelled }
    }

    package var id: Int64
    /// The URL, without user name or password (never stored).
    package var url: String
    /// The file's name under the root, or nil for the server's suggestion.
    package var name: String?
    /// The folder under the root, or nil for the root itself.
    package var subfolder: String?
    /// The per-download choices as the API took them (JSON; never headers with credentials).
    package var options: String
    package var state: State
    package var priority: Int64
    /// Its place in the queue (smaller first, within a priority).
    package var position: Int64
    /// When it was added and when it ended, seconds since 1970.
    package var added: Double
    package var finished: Double?
    /// Why it failed, in one line.
    package var error: String?
    /// The file it writes (its partial until it completes), once known: a path under the root.
    package var file: String?
    /// Bytes done and the size, as of its last change of state.
    package var done: Int64 = 0
    package var total: Int64?
    /// Which file haul finished writing there (device, inode, birth, size), for "remove with
    /// files": nil for a file found already complete (not haul's to delete).
    package var owned: String?
    /// The background session that added it (``HaulConfiguration/background(identifier:)``), or nil.
    package var session: String?
    /// Whether its session was told of its end (each end is told once; a change of state
    /// clears it).
    package var told = false
}

/// The orders the list is given in (`GET /api/v1/downloads?sort=`).
package enum ListOrder: String, Sendable, CaseIterable {
    /// The queue's: priority, then position.
    case queue
    /// When added, when ended (unfinished ones last, either way round), the size (unknown ones
    /// last, either way round), the name given (the URL's where none was; ASCII case ignored).
    case added, finished, total, name

    /// The ORDER BY of this order, the other way round when `descending`; ties by id.
    func clause(descending: Bool) -> String {
        let (up, down) = descending ? ("DESC", "ASC") : ("ASC", "DESC")
        switch self {
        case .queue: return "priority \(down), position \(up), id \(up)"
        case .added: return "added \(up), id \(up)"
        case .finished: return "finished IS NULL, finished \(up), id \(up)"
        case .total: return "total IS NULL, total \(up), id \(up)"
        case .name: return "COALESCE(name, url) COLLATE NOCASE \(up), id \(up)"
        }
    }
}

/// What the API asks to add.
package struct NewDownload: Equatable, Sendable {
    package var url: URL
    package var name: String?
    package var subfolder: String?
    package var options: String = "{}"
    package var priority: Int64 = 0
    /// The background session adding it, or nil.
    package var session: String?

    package init(url: URL, name: String? = nil, subfolder: String? = nil, session: String? = nil) {
        self.url = url
        self.name = name
        self.subfolder = subfolder
        self.session = session
    }
}

/// The daemon's queue, history, settings and numbered events in SQLite (WAL, synchronous FULL:
/// a change that returned survives `kill -9` and a power loss). One owner: the daemon's store
/// actor, or a test.
package final class ServeStore {
    package let database: SQLiteDatabase
    /// The schema this code reads and writes (`PRAGMA user_version`): 2 added the background
    /// sessions (`downloads.session`, `downloads.told`, `events.session`).
    static let schema: Int64 = 2

    package init(path: String) throws(ServeError) {
        database = try SQLiteDatabase(path: path)
        let mode = try database.query("PRAGMA journal_mode=WAL").first?.first?.text
        guard mode?.lowercased() == "wal" else {
            throw ServeError(
                .internalError, "the store \(path) cannot use a write-ahead log (journal mode \(mode ?? "?"))")
        }
        try database.execute("PRAGMA synchronous=FULL")
        // The polling form reads the positions a move changed out of its event (json_each).
        do throws(ServeError) { _ = try database.query("SELECT json_extract('[1]', '$[0]')") } catch {
            throw ServeError(
                .internalError, "libsqlite3 lacks the JSON functions (need 3.38, or 3.37 built with JSON1)")
        }
        let version = try database.query("PRAGMA user_version").first?.first?.integer ?? 0
        if version > Self.schema {
            throw ServeError(.internalError, "the store \(path) was made by a newer haul (schema \(version))")
        }
        if version < Self.schema { try create(from: version) }
    }

    /// Makes the tables of schema 1 where there are none, then adds what each later schema added.
    private func create(from version: Int64) throws(ServeError) {
        try database.transaction { () throws(ServeError) in
            try database.execute(
                """
                CREATE TABLE IF NOT EXISTS downloads (
                    id INTEGER PRIMARY KEY AUTOINCREMENT, url TEXT NOT NULL, name TEXT, subfolder TEXT,
                    options TEXT NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL,
                    position INTEGER NOT NULL, added REAL NOT NULL, finished REAL, error TEXT, file TEXT,
                    done INTEGER NOT NULL DEFAULT 0, total INTEGER, owned TEXT);
                CREATE INDEX IF NOT EXISTS downloads_order ON downloads (priority DESC, position);
                CREATE TABLE IF NOT EXISTS events (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT, download INTEGER, kind TEXT NOT NULL, body TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                """)
            if version < 2 {
                try database.execute(
                    """
                    ALTER TABLE downloads ADD COLUMN session TEXT;
                    ALTER TABLE downloads ADD COLUMN told TEXT;
                    ALTER TABLE events ADD COLUMN session TEXT;
                    CREATE INDEX IF NOT EXISTS downloads_session ON downloads (session, state);
                    """)
            }
            try database.execute("PRAGMA user_version = \(Self.schema)")
        }
    }

    private static let columns =
        "id, url, name, subfolder, options, state, priority, position, added, finished, error, file, done, total, owned, session, told"

    private static func download(_ row: [SQLiteDatabase.Value]) throws(ServeError) -> StoredDownload {
        guard row.count == 17, let id = row[0].integer, let url = row[1].text, let options = row[4].text,
            let state = row[5].text.flatMap(StoredDownload.State.init(rawValue:)), let priority = row[6].integer,
            let position = row[7].integer, let added = row[8].real
        else { throw ServeError(.internalError, "the store has a row it cannot read") }
        return StoredDownload(
            id: id, url: url, name: row[2].text, subfolder: row[3].text, options: options, state: state,
            priority: priority, position: position, added: added, finished: row[9].real, error: row[10].text,
            file: row[11].text, done: row[12].integer ?? 0, total: row[13].integer, owned: row[14].text,
            session: row[15].text, told: row[16].text != nil)
    }

    /// Adds `new` at the end of the queue, all or none; the URLs are stored without credentials.
    package func add(_ new: [NewDownload], now: Double) throws(ServeError) -> [StoredDownload] {
        try database.transaction { () throws(ServeError) -> [StoredDownload] in
            var next = try nextPosition()
            var added: [StoredDownload] = []
            for item in new {
                let url = ResumeRecord.redacted(item.url)
                try database.query(
                    "INSERT INTO downloads (url, name, subfolder, options, state, priority, position, added, session) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                    [
                        .text(url), item.name.map { .text($0) } ?? .null, item.subfolder.map { .text($0) } ?? .null,
                        .text(item.options), .integer(item.priority), .integer(next), .real(now),
                        item.session.map { .text($0) } ?? .null,
                    ])
                added.append(
                    StoredDownload(
                        id: database.lastInsertID, url: url, name: item.name, subfolder: item.subfolder,
                        options: item.options, state: .queued, priority: item.priority, position: next, added: now,
                        session: item.session))
                if next < Int64.max { next += 1 }
            }
            return added
        }
    }

    /// Moves queued download `id` as the manager moves it (``DownloadManager/QueueMove``): the
    /// priority it takes and the new position of each queued download whose position changed;
    /// nil when `id` is not queued. The top and the bottom change only `id`'s own position.
    package func move(
        _ id: Int64, _ move: DownloadManager.QueueMove
    ) throws(ServeError) -> (priority: Int64, positions: [(id: Int64, position: Int64)])? {
        try database.transaction { () throws(ServeError) -> (Int64, [(id: Int64, position: Int64)])? in
            let queued = try list(states: [.queued], limit: Self.everything)
            guard let (order, moved) = move.apply(to: queued.map { ($0.id, Int($0.priority)) }, moving: id) else {
                return nil
            }
            var positions: [(id: Int64, position: Int64)]
            switch move {
            case .top:
                let least = try minPosition()
                positions = [(id, least == Int64.min ? least : least - 1)]
            case .bottom: positions = [(id, try nextPosition())]
            case .up, .down:
                // The queued downloads' positions, given out again in the new order.
                let old = Dictionary(uniqueKeysWithValues: queued.map { ($0.id, $0.position) })
                positions = zip(order, queued.map(\.position).sorted()).filter { old[$0.0] != $0.1 }
                    .map { (id: $0.0, position: $0.1) }
            }
            try database.query(
                "UPDATE downloads SET priority = ? WHERE id = ?", [.integer(Int64(moved)), .integer(id)])
            for (row, position) in positions {
                try database.query(
                    "UPDATE downloads SET position = ? WHERE id = ?", [.integer(position), .integer(row)])
            }
            return (Int64(moved), positions)
        }
    }

    /// Puts `id` at the back of its priority: where the manager puts a download it resumes.
    package func sendToBack(_ id: Int64) throws(ServeError) {
        try database.query(
            "UPDATE downloads SET position = ? WHERE id = ?", [.integer(try nextPosition()), .integer(id)])
    }

    /// One past the greatest position (a row planted at `Int64.max` is not passed: ties sort by id).
    private func nextPosition() throws(ServeError) -> Int64 {
        let greatest = try database.query("SELECT COALESCE(MAX(position), 0) FROM downloads").first?.first?.integer ?? 0
        return greatest == Int64.max ? greatest : greatest + 1
    }

    /// The least position of any download (running and ended ones too: a top that ties none).
    private func minPosition() throws(ServeError) -> Int64 {
        try database.query("SELECT COALESCE(MIN(position), 0) FROM downloads").first?.first?.integer ?? 0
    }

    /// A `limit` for every row.
    static let everything = Int(Int32.max)

    /// How many downloads the list holds.
    package func count() throws(ServeError) -> Int {
        Int(try database.query("SELECT COUNT(*) FROM downloads").first?.first?.integer ?? 0)
    }

    /// The events kept: older ones are removed as new ones come (a client further behind
    /// starts again from the list).
    static let keptEvents: Int64 = 10_000

    /// One download, or nil.
    package func download(_ id: Int64) throws(ServeError) -> StoredDownload? {
        try database.query("SELECT \(Self.columns) FROM downloads WHERE id = ?", [.integer(id)]).first.map(
            Self.download)
    }

    /// Downloads in queue order (priority, then position) or `order`, of `states`, of background
    /// session `session` and changed after event `since` when given.
    package func list(
        states: Set<StoredDownload.State>? = nil, session: String? = nil, changedSince since: Int64? = nil,
        order: ListOrder = .queue, descending: Bool = false, limit: Int = 1000, offset: Int = 0
    ) throws(ServeError) -> [StoredDownload] {
        let wanted = states.map { $0.map(\.rawValue).sorted() } ?? StoredDownload.State.allCases.map(\.rawValue)
        let marks = Array(repeating: "?", count: wanted.count).joined(separator: ", ")
        var ofSession = session == nil ? "" : " AND session = ?"
        // Changed: named by an event, or moved by another's move (its `positions`).
        if since != nil {
            ofSession +=
                " AND (id IN (SELECT download FROM events WHERE seq > ?) OR id IN (SELECT json_extract(p.value, '$[0]') FROM events, json_each(events.body, '$.positions') AS p WHERE events.seq > ? AND events.kind = 'moved'))"
        }
        let rows = try database.query(
            "SELECT \(Self.columns) FROM downloads WHERE state IN (\(marks))\(ofSession) ORDER BY \(order.clause(descending: descending)) LIMIT ? OFFSET ?",
            wanted.map { .text($0) } + (session.map { [.text($0)] } ?? [])
                + (since.map { [.integer($0), .integer($0)] } ?? [])
                + [.integer(Int64(max(0, limit))), .integer(Int64(max(0, offset)))])
        var out: [StoredDownload] = []
        for row in rows { out.append(try Self.download(row)) }
        return out
    }

    /// What a background session that attaches is to know: its downloads that are unfinished or
    /// whose end it was not told of, the untold ends first (in the order they ended), at most
    /// `limit`.
    package func unsettled(session: String, limit: Int) throws(ServeError) -> [StoredDownload] {
        let rows = try database.query(
            """
            SELECT \(Self.columns) FROM downloads WHERE session = ? AND (told IS NULL OR state NOT IN ('completed', 'failed', 'cancelled'))
            ORDER BY finished IS NULL, finished, priority DESC, position, id LIMIT ?
            """, [.text(session), .integer(Int64(max(0, limit)))])
        var out: [StoredDownload] = []
        for row in rows { out.append(try Self.download(row)) }
        return out
    }

    /// How many downloads ``unsettled(session:limit:)`` would give without a limit.
    package func unsettledCount(session: String) throws(ServeError) -> Int {
        Int(
            try database.query(
                "SELECT COUNT(*) FROM downloads WHERE session = ? AND (told IS NULL OR state NOT IN ('completed', 'failed', 'cancelled'))",
                [.text(session)]
            ).first?.first?.integer ?? 0)
    }

    /// Records that `id`'s session was told of its end, by the caller that names itself
    /// `claim`: true when this call did, or an earlier one with the same claim (a caller that
    /// lost the answer may ask again), false when another claim was told first; nil when `id`
    /// is not an ended download of `session`.
    package func tell(_ id: Int64, session: String, claim: String) throws(ServeError) -> Bool? {
        try database.query(
            "UPDATE downloads SET told = ?1 WHERE id = ?2 AND session = ?3 AND (told IS NULL OR told = ?1) AND state IN ('completed', 'failed', 'cancelled')",
            [.text(claim), .integer(id), .text(session)])
        if database.changes > 0 { return true }
        guard let item = try download(id), item.session == session, item.state.isEnded else { return nil }
        return false
    }

    /// Sets a download's state (and, for an end, when and why); false when there is no such id.
    @discardableResult
    package func setState(
        _ id: Int64, _ state: StoredDownload.State, error: String? = nil, now: Double
    ) throws(ServeError) -> Bool {
        let ended = state.isUnfinished ? SQLiteDatabase.Value.null : .real(now)
        // Each end is told once: a change of state (a failed download resumed, a cancel that
        // turned out completed) is untold.
        try database.query(
            "UPDATE downloads SET told = CASE WHEN state = ?1 THEN told ELSE NULL END, state = ?1, error = ?2, finished = ?3 WHERE id = ?4",
            [.text(state.rawValue), error.map { .text($0) } ?? .null, ended, .integer(id)])
        return database.changes > 0
    }

    /// Records where a download writes and how far it got (at a change of state, not per byte).
    package func setProgress(_ id: Int64, file: String?, done: Int64, total: Int64?) throws(ServeError) {
        try database.query(
            "UPDATE downloads SET file = COALESCE(?, file), done = ?, total = ? WHERE id = ?",
            [file.map { .text($0) } ?? .null, .integer(done), total.map { .integer($0) } ?? .null, .integer(id)])
    }

    /// Records which file haul finished writing for `id` (nil: none of its own).
    package func setOwned(_ id: Int64, _ identity: String?) throws(ServeError) {
        try database.query(
            "UPDATE downloads SET owned = ? WHERE id = ?", [identity.map { .text($0) } ?? .null, .integer(id)])
    }

    /// Removes a download from the list; false when there is no such id.
    @discardableResult
    package func remove(_ id: Int64) throws(ServeError) -> Bool {
        try database.query("DELETE FROM downloads WHERE id = ?", [.integer(id)])
        return database.changes > 0
    }

    /// After a restart: what was running is queued again (its partial file resumes it).
    @discardableResult
    package func recover() throws(ServeError) -> Int64 {
        try database.query("UPDATE downloads SET state = 'queued' WHERE state IN ('running', 'waiting')")
        return database.changes
    }

    /// Appends an event (a change the page and the reattached sessions are told of); its number.
    /// It carries the download's session, so append a removal before the row goes.
    package func append(event kind: String, download: Int64?, body: String) throws(ServeError) -> Int64 {
        try database.query(
            "INSERT INTO events (download, kind, body, session) VALUES (?, ?, ?, (SELECT session FROM downloads WHERE id = ?))",
            [download.map { .integer($0) } ?? .null, .text(kind), .text(body), download.map { .integer($0) } ?? .null])
        let seq = database.lastInsertID
        if seq % 1000 == 0 {
            try database.query("DELETE FROM events WHERE seq <= ?", [.integer(seq - Self.keptEvents)])
        }
        return seq
    }

    /// The downloads removed after event `since` (of background session `session` when given).
    package func removed(since: Int64, session: String? = nil) throws(ServeError) -> [Int64] {
        try database.query(
            "SELECT DISTINCT download FROM events WHERE seq > ? AND kind = 'removed'\(session == nil ? "" : " AND session = ?") AND download NOT IN (SELECT id FROM downloads) ORDER BY download",
            [.integer(since)] + (session.map { [.text($0)] } ?? [])
        ).compactMap { $0.first?.integer }
    }

    /// The number of the latest event (0 before the first).
    package func latestEvent() throws(ServeError) -> Int64 {
        try database.query("SELECT COALESCE(MAX(seq), 0) FROM events").first?.first?.integer ?? 0
    }

    /// The number of the oldest event kept (the next one's, when none is kept).
    package func oldestEvent() throws(ServeError) -> Int64 {
        let oldest = try database.query("SELECT MIN(seq) FROM events").first?.first?.integer
        if let oldest { return oldest }
        return try latestEvent() + 1
    }

    /// Events after number `since`, oldest first, at most `limit`; only those of background
    /// session `session`'s downloads when given.
    package func events(
        since: Int64, session: String? = nil, limit: Int = 1000
    ) throws(ServeError) -> [(seq: Int64, download: Int64?, kind: String, body: String)] {
        try database.query(
            "SELECT seq, download, kind, body FROM events WHERE seq > ?\(session == nil ? "" : " AND session = ?") ORDER BY seq LIMIT ?",
            [.integer(since)] + (session.map { [.text($0)] } ?? []) + [.integer(Int64(max(0, limit)))]
        ).compactMap { row in
            guard let seq = row[0].integer, let kind = row[2].text, let body = row[3].text else { return nil }
            return (seq, row[1].integer, kind, body)
        }
    }

    /// A setting, or nil.
    package func setting(_ key: String) throws(ServeError) -> String? {
        try database.query("SELECT value FROM settings WHERE key = ?", [.text(key)]).first?.first?.text
    }

    package func setSetting(_ key: String, _ value: String) throws(ServeError) {
        try database.query(
            "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [.text(key), .text(value)])
    }
}
