import CHaulSQLite
import HaulCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One SQLite connection, used by one owner at a time (opened without SQLite's own mutex): the
/// daemon's store. Statements are prepared per call; the store is small and its calls few.
package final class SQLiteDatabase {
    private let db: OpaquePointer

    /// Opens (creating, mode 0600) the database at `path`, which must not be a symbolic link.
    package init(path: String) throws(ServeError) {
        var reason = [CChar](repeating: 0, count: 512)
        guard haul_sqlite_load(&reason, reason.count) == 0 else {
            throw ServeError(.internalError, String(nulTerminated: reason))
        }
        // Made (or made again) 0600 first: SQLite would make it 0644 less the umask, and gives
        // its -wal and -shm files the database's own mode. (Not umask(2): it is the whole
        // process's.) One that is not this user's regular file is refused.
        let usable: Bool
        do throws(Errno) {
            let fd = try Sys.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
            defer { Sys.close(fd) }
            let status = try Sys.status(fd: fd)
            usable = status.isRegular && status.isOwnAndPrivate && fchmod(fd, 0o600) == 0
        } catch {
            throw ServeError(.internalError, "cannot open \(path): \(error)")
        }
        guard usable else {
            throw ServeError(.internalError, "\(path) is not a file of this user's that only it may write")
        }
        var handle: OpaquePointer?
        let flags =
            Int32(HAUL_SQLITE_OPEN_READWRITE | HAUL_SQLITE_OPEN_CREATE | HAUL_SQLITE_OPEN_NOMUTEX)
            | Int32(HAUL_SQLITE_OPEN_NOFOLLOW)
        let rc = haul_sqlite_open(path, flags, &handle)
        guard let handle else { throw ServeError(.internalError, "cannot open \(path): SQLite error \(rc)") }
        db = handle
        guard rc == HAUL_SQLITE_OK else {
            let message = Self.message(handle)
            _ = haul_sqlite_close(handle)
            throw ServeError(.internalError, "cannot open \(path): \(message)")
        }
        _ = haul_sqlite_busy_timeout(db, 5000)
    }

    deinit { _ = haul_sqlite_close(db) }

    private static func message(_ db: OpaquePointer) -> String {
        haul_sqlite_errmsg(db).map { String(cString: $0) } ?? "unknown error"
    }

    /// A value bound to a `?` or read from a column.
    package enum Value: Equatable, Sendable {
        case integer(Int64)
        case real(Double)
        case text(String)
        case null

        package var integer: Int64? { if case .integer(let v) = self { v } else { nil } }
        package var text: String? { if case .text(let v) = self { v } else { nil } }
        package var real: Double? {
            switch self {
            case .real(let v): v
            case .integer(let v): Double(v)
            default: nil
            }
        }
    }

    /// Runs statements that take no parameters and return no rows (the schema, pragmas).
    package func execute(_ sql: String) throws(ServeError) {
        guard haul_sqlite_exec(db, sql) == HAUL_SQLITE_OK else { throw failure(sql) }
    }

    /// Runs one statement with `bindings` and returns its rows.
    @discardableResult
    package func query(_ sql: String, _ bindings: [Value] = []) throws(ServeError) -> [[Value]] {
        var statement: OpaquePointer?
        guard haul_sqlite_prepare(db, sql, &statement) == HAUL_SQLITE_OK, let statement else { throw failure(sql) }
        defer { _ = haul_sqlite_finalize(statement) }
        for (index, value) in bindings.enumerated() {
            let i = Int32(index + 1)
            let rc: Int32
            switch value {
            case .integer(let v): rc = haul_sqlite_bind_int64(statement, i, v)
            case .real(let v): rc = haul_sqlite_bind_double(statement, i, v)
            case .null: rc = haul_sqlite_bind_null(statement, i)
            case .text(let v):
                var text = v
                rc = text.withUTF8 { b in
                    b.withMemoryRebound(to: CChar.self) {
                        haul_sqlite_bind_text(statement, i, $0.baseAddress, Int32(b.count))
                    }
                }
            }
            guard rc == HAUL_SQLITE_OK else { throw failure(sql) }
        }
        var rows: [[Value]] = []
        while true {
            let rc = haul_sqlite_step(statement)
            if rc == HAUL_SQLITE_DONE { return rows }
            guard rc == HAUL_SQLITE_ROW else { throw failure(sql) }
            rows.append((0..<haul_sqlite_column_count(statement)).map { column(statement, $0) })
        }
    }

    private func column(_ statement: OpaquePointer, _ i: Int32) -> Value {
        switch haul_sqlite_column_type(statement, i) {
        case Int32(HAUL_SQLITE_INTEGER): return .integer(haul_sqlite_column_int64(statement, i))
        case Int32(HAUL_SQLITE_FLOAT): return .real(haul_sqlite_column_double(statement, i))
        case Int32(HAUL_SQLITE_NULL): return .null
        default:
            var length: Int32 = 0
            guard let text = haul_sqlite_column_text(statement, i, &length) else { return .null }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: Int(length)), as: UTF8.self))
        }
    }

    /// Rows the last statement changed.
    package var changes: Int64 { haul_sqlite_changes(db) }
    /// The row id the last insert made.
    package var lastInsertID: Int64 { haul_sqlite_last_insert_rowid(db) }

    /// Runs `body` in one transaction (`BEGIN IMMEDIATE`), rolled back when it throws.
    package func transaction<T>(_ body: () throws(ServeError) -> T) throws(ServeError) -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private func failure(_ sql: String) -> ServeError {
        let verb = sql.prefix { $0 != " " && $0 != "\n" }
        return ServeError(.internalError, "the store failed (\(verb)): \(Self.message(db))")
    }
}
