import Foundation
import Haul
import HaulCore
import HaulTestSupport
import Testing

/// Events collected from a download, in order.
final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var _events: [DownloadEvent] = []
    func append(_ e: DownloadEvent) { lock.withLock { _events.append(e) } }
    var events: [DownloadEvent] { lock.withLock { _events } }
    var progress: [TransferProgress] {
        events.compactMap { if case .progress(let p) = $0 { return p } else { return nil } }
    }
    var retries: [(Int, HaulError, Double)] {
        events.compactMap { if case .retrying(let a, let e, let d) = $0 { return (a, e, d) } else { return nil } }
    }
    var restarts: [String] { events.compactMap { if case .restarted(let r) = $0 { return r } else { return nil } } }
    /// `.completed` and `.failed`: a task reports exactly one.
    var ends: [DownloadEvent] {
        events.filter {
            switch $0 {
            case .completed, .failed: return true
            default: return false
            }
        }
    }
    var suspensions: Int { events.filter { if case .suspended = $0 { return true } else { return false } }.count }
}

/// The size of the file at `path`, nil when there is none.
func fileSize(_ path: String) -> Int64? { (try? Sys.fileSize(path)) ?? nil }

/// A session with quick retries for tests.
func testSession(_ adjust: (inout HaulConfiguration) -> Void = { _ in }) -> HaulSession {
    var c = HaulConfiguration()
    c.cache = nil  // the HTTP cache's tests give theirs; no test writes to the user's
    c.retry.initialDelay = 0.05
    c.retry.maxDelay = 0.2
    c.timeout.idle = 5
    adjust(&c)
    return HaulSession(configuration: c)
}

func bytes(at path: String) -> [UInt8] {
    (FileManager.default.contents(atPath: path)).map { Array($0) } ?? []
}

func fileExists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

/// Leaves `<dest>.part` holding `bytes` and a record bound to it, as an interrupted download of
/// haul's own would.
func plantPartial(_ dest: String, _ content: [UInt8], record: ResumeRecord) {
    #expect(FileManager.default.createFile(atPath: dest + ".part", contents: Data(content)))
    var record = record
    record.partial = (try? Sys.status(dest + ".part"))?.map(ResumeRecord.FileIdentity.init)
    record.bootID = BootID.current
    #expect((try? Sys.writeFileAtomically(dest + ".haul", record.encoded())) != nil)
    #expect(ResumeRecord.decode(bytes(at: dest + ".haul"))?.partial != nil, "planted")
}

/// Runs a download, returning its result or error and the events.
func run(
    _ session: HaulSession, _ url: URL, to destination: DownloadDestination,
    options: DownloadOptions = DownloadOptions()
) async -> (Result<DownloadResult, HaulError>, EventLog) {
    let log = EventLog()
    do {
        let r = try await session.download(from: url, to: destination, options: options) { log.append($0) }
        return (.success(r), log)
    } catch {
        return (.failure(error), log)
    }
}

extension Result {
    var error: Failure? { if case .failure(let e) = self { return e } else { return nil } }
    var value: Success? { if case .success(let v) = self { return v } else { return nil } }
}

/// Records an issue unless the file holds exactly `expected` (without printing megabytes).
func expectFile(_ path: String, equals expected: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    if let difference = TestContent.difference(file: path, expected: expected) {
        Issue.record(Comment(rawValue: difference), sourceLocation: sourceLocation)
    }
}

extension Trait where Self == ConditionTrait {
    /// Leaves a test out of the ThreadSanitizer run (`HAUL_TSAN`, set by `.ci/run`), saying why:
    /// speeds and heavy work there say nothing and slow the timing tests beside them.
    static func skippedUnderThreadSanitizer(_ why: Comment) -> Self {
        .disabled(if: ProcessInfo.processInfo.environment["HAUL_TSAN"] != nil, why)
    }
}

/// A validator store in a temporary directory that has saved ETag `"e1"` for `url` and `file`
/// (three bytes), as a download with `-N` leaves it.
struct SavedValidators {
    let dir: TemporaryDirectory
    let store: ValidatorStore
    let file: String
    let url = URL(string: "http://127.0.0.1:1/f.bin")!

    /// - Parameter openDirectory: the store's directory is made 0755 first (readable by others,
    ///   as a first version of the store made it).
    init(openDirectory: Bool = false) throws {
        dir = try TemporaryDirectory()
        store = ValidatorStore(directory: dir.file("state"))
        if openDirectory {
            #expect(mkdir(dir.file("state"), 0o755) == 0 && chmod(dir.file("state"), 0o755) == 0)
        }
        file = dir.file("f.bin")
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: file))
        store.save(url, target: .file(file), path: file, etag: "\"e1\"", lastModified: nil, settingTime: false)
    }
}
