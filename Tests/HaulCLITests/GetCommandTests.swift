import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("haul get, run as a process", .serialized, .fewAtOnce)
struct GetCommandTests {
    @Test func downloadsIntoTheCurrentDirectoryByDefault() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await CLI.run(["get", server.url("/files/hello.bin?size=300000").absoluteString], in: dir.path)
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("hello.bin"), equals: TestContent.bytes(count: 300_000))
        #expect(r.stderr.contains("saved") && r.stderr.contains("hello.bin"))
        #expect(dir.contents() == ["hello.bin"])
    }

    /// In a working directory that was removed, a relative destination is refused before any
    /// request: it was resolved against `/` (an empty working directory), and the file saved there.
    @Test func aRemovedWorkingDirectoryIsNotTakenForTheRoot() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let name = "gone-\(UInt32.random(in: 0...UInt32.max)).bin"
        let url = server.url("/\(name)?size=1000").absoluteString
        let gone = dir.file("gone")
        func inRemoved(_ args: [String]) async throws -> CLIRun {
            let quoted = args.map { "'\($0)'" }.joined(separator: " ")
            let script = "mkdir '\(gone)' && cd '\(gone)' && rmdir '\(gone)' && exec '\(CLI.binary.path)' \(quoted)"
            return try await CLI.run(["-c", script], executable: URL(fileURLWithPath: "/bin/sh"))
        }
        for args in [["get", url], ["get", "-d", "sub", url]] {
            let r = try await inRemoved(args)
            #expect(r.status == 2, "\(args): \(r.stderr)")
            #expect(r.stderr.contains("cannot tell the working directory (was it removed?)"), "\(r.stderr)")
        }
        let serve = try await inRemoved(["serve", "--dir", "downloads"])
        #expect(serve.status == 2 && serve.stderr.contains("for --dir downloads"), "\(serve.stderr)")
        #expect(server.requests(path: "/\(name)").isEmpty)
        #expect(!FileManager.default.fileExists(atPath: "/" + name))
        #expect(!FileManager.default.fileExists(atPath: "/sub/" + name))
        // An absolute -d still works there.
        let absolute = try await inRemoved(["get", "-q", "-d", dir.path, url])
        #expect(absolute.status == 0, "\(absolute.stderr)")
        expectFile(dir.file(name), equals: TestContent.bytes(count: 1000))
    }

    @Test func byDefaultALargeFileUsesFourConnectionsAndASmallOneASingleRequest() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let big = 8 << 20
        let r = try await CLI.run([
            "get", "-q", "-d", dir.path, server.url("/big.bin?size=\(big)&rate=4000000&hold=4").absoluteString,
        ])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("big.bin"), equals: TestContent.bytes(count: big))
        #expect(server.maxConcurrentRequests() == 4, "server's view")
        // Four 2 MiB shares, the probe's answer being the first (a quick connection may also
        // steal half of a range).
        let starts = Set(server.requests(path: "/big.bin").compactMap(\.rangeStart))
        #expect(starts.isSuperset(of: [0, 2 << 20, 4 << 20, 6 << 20]), "\(starts.sorted())")
        let small = try await CLI.run([
            "get", "-q", "-d", dir.path, server.url("/small.bin?size=100000").absoluteString,
        ])
        #expect(small.status == 0, "\(small.stderr)")
        expectFile(dir.file("small.bin"), equals: TestContent.bytes(count: 100_000))
        #expect(server.requests(path: "/small.bin").map(\.range) == ["bytes=0-2097151"], "one request")
        #expect(dir.contents() == ["big.bin", "small.bin"])
    }

    /// A small file (written whole, unnamed until it is synced) and a large one (a partial)
    /// get the same mode: the umask's, or under a directory's default ACL the ACL's (the kernel
    /// then ignores the umask). Run under umask 077.
    @Test func smallAndLargeFilesGetTheModeTheUmaskOrADefaultACLGives() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let plain = dir.file("plain")
        let shared = dir.file("acl")
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: false)
        // Where the temporary directory's file system has no POSIX ACLs (ramfs, NFS), only the
        // umask's half can be run.
        let acls = try DefaultACL.set(shared, user: 6, group: 4, other: 4)
        let urls = ["/small.bin?size=100000", "/large.bin?size=3145728"].map { "'\(server.url($0).absoluteString)'" }
        for (directory, expected) in [(plain, 0o600)] + (acls ? [(shared, 0o644)] : []) {
            let command =
                "umask 077 && exec '\(CLI.binary.path)' get -q -d '\(directory)' " + urls.joined(separator: " ")
            let r = try await CLI.run(["-c", command], executable: URL(fileURLWithPath: "/bin/sh"))
            #expect(r.status == 0, "\(r.stderr)")
            for name in ["small.bin", "large.bin"] {
                var st = stat()
                #expect(stat(directory + "/" + name, &st) == 0)
                let mode = Int(st.st_mode & 0o777)
                #expect(mode == expected, "\(directory)/\(name): \(String(mode, radix: 8))")
            }
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs util-linux's script"))
    func onATerminalTheLineIsRedrawnInPlaceWithASpinnerThatTurns() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/tty.bin?size=1500000&rate=1000000").absoluteString
        // script(1) gives haul a pseudo-terminal and copies what it draws to our stdout.
        let r = try await CLI.run(
            ["-qec", "'\(CLI.binary.path)' get -x 1 -o '\(dir.file("tty.bin"))' '\(url)'", "/dev/null"],
            executable: URL(fileURLWithPath: "/usr/bin/script"))
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        expectFile(dir.file("tty.bin"), equals: TestContent.bytes(count: 1_500_000))
        let redraws = r.stdout.components(separatedBy: "\r\u{1B}[2K").dropFirst().map { String($0.prefix(2)) }
        let frames = Set(redraws.compactMap { $0.first }.filter { "|/-\\".contains($0) })
        #expect(frames.count == 4, "the spinner turned: \(redraws.prefix(12))")
        #expect(redraws.contains { $0.hasPrefix("|") || $0.hasPrefix("/") }, "a spinner before the line")
        #expect(r.stdout.contains("saved \(dir.file("tty.bin"))"))
    }

    @Test func severalURLsRunInTurnAndTheFirstFailureSetsTheExitCode() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await CLI.run([
            "get", "-q", "-d", dir.path, server.url("/one.bin?size=100").absoluteString,
            server.url("/missing?status=404").absoluteString, server.url("/two.bin?size=200").absoluteString,
        ])
        #expect(r.status == 4)
        #expect(r.stderr.contains("HTTP 404"))
        #expect(dir.contents() == ["one.bin", "two.bin"])
        expectFile(dir.file("two.bin"), equals: TestContent.bytes(count: 200))
    }

    @Test func outputFileAndQuiet() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await CLI.run(["get", "-q", "-o", dir.file("x.out"), server.url("/a?size=1000").absoluteString])
        #expect(r.status == 0)
        #expect(r.stderr.isEmpty && r.stdout.isEmpty)
        expectFile(dir.file("x.out"), equals: TestContent.bytes(count: 1000))
    }

    @Test(arguments: [
        (["get"], "needs a URL"),
        (["get", "notaurl"], "invalid URL"),
        (["get", "ftp://host/x"], "invalid URL"),
        (["get", "--bogus", "http://h/x"], "unknown option --bogus"),
        (["get", "--retries", "-1", "http://h/x"], "--retries"),
        (["get", "--timeout", "soon", "http://h/x"], "--timeout"),
        (["get", "-o", "a", "-d", "b", "http://h/x"], "either -o or -d"),
        (["get", "-o", "a", "http://h/x", "http://h/y"], "one file"),
        (["get", "-H", "novalue", "http://h/x"], "Name: value"),
        // get and upload parse -H alike: a CR LF in the value is refused by name (get blamed the
        // header's name, upload took it).
        (["get", "-H", "X-A: 1\r\nX-Injected: 2", "http://h/x"], "header X-A has a line break or NUL in its value"),
        (["upload", "http://h/x", "-F", "a=b", "-H", "X-A: 1\r\nX-B: 2"], "header X-A has a line break"),
        (["upload", "http://h/x", "-F", "a=b", "-H", "X A: 1"], "header name 'X A' is not valid"),
        (["get", "--checksum", "md5=abc", "http://h/x"], "md5 checksum needs 32 hex digits, not 'abc'"),
        (
            ["get", "--checksum", "crc32=abcd", "http://h/x"],
            "'crc32' is not an algorithm (sha-256, sha-512, sha-1, md5)"
        ),
        (["get", "--checksum", "md5=" + String(repeating: "0", count: 32) + ",", "http://h/x"], "an empty checksum"),
        (
            [
                "get", "--checksum", "md5=" + String(repeating: "0", count: 32), "--checksum",
                "MD5=" + String(repeating: "1", count: 32), "http://h/x",
            ],
            "two different md5 checksums: no file can have both"
        ),
        (["get", "-x", "17", "http://h/x"], "at most 16"),
        // A trailing slash names a directory: "-o out/new/" saved a file called "new".
        (
            ["get", "-o", "out/new/", "http://h/x"],
            "-o out/new/ ends with '/': -o names a file (-d out/new for a directory)"
        ),
        // Empty: "-o ''" failed as "<cwd> is a directory" (exit 5), "-d ''" meant the current one.
        (["get", "-o", "", "http://h/x"], "-o needs a file name"),
        (["get", "-d", "", "http://h/x"], "-d needs a directory"),
        // The command runs on libcurl only (URLSession is the library's HaulFoundation module).
        (["get", "--transport", "urlsession", "http://h/x"], "--transport urlsession is not in the command"),
        (["get", "--transport", "nghttp", "http://h/x"], "unknown --transport nghttp"),
        (["get", "--limit-rate", "fast", "http://h/x"], "--limit-rate"),
        // Sizes past 2^63 bytes crashed converting to Int64 (exit 132).
        (["get", "--limit-rate", "1e300G", "http://h/x"], "--limit-rate expects a rate like 500K or 2M"),
        (["get", "-k", "99999999999999999999K", "http://h/x"], "--min-split-size expects a size"),
        (["demo", "--size", "99999999999999"], "--size is at most 65536 (MiB), got 99999999999999"),
        // An empty path after @ or < named the current directory, or read "".
        (["upload", "http://h/x", "-F", "a=@"], "-F 'a=@' names no file"),
        (["upload", "http://h/x", "-F", "a=<"], "-F 'a=<' names no file"),
        (["upload", "http://h/x", "-F", "a=@;type=text/plain"], "-F 'a=@;type=text/plain' names no file"),
        (["upload", "http://h/x", "-T", "/nonexistent/x"], "cannot read -T /nonexistent/x: no such file"),
        (["frobnicate"], "unknown command"),
        (["get", "-o", "-", "--json", "http://h/x"], "--json does not apply to -o -"),
        (
            ["get", "--checksum", "sha-256=" + String(repeating: "0", count: 64), "http://h/x", "http://h/y"],
            "--checksum is the digest of one file"
        ),
        (["get", "-o", "-", "-x4", "http://h/x"], "-x does not apply to -o -"),
        (["get", "-o", "-", "-k", "2M", "http://h/x"], "--min-split-size does not apply"),
        (["get", "mirror.example.org:8080/isos/a.iso"], "did you mean https://mirror.example.org:8080/isos/a.iso?"),
        (["get", "ftp://h/x"], "invalid URL 'ftp://h/x' (only http:// and https:// URLs)"),
        // What the user (or a list file) gave is quoted with its control characters escaped: an
        // escape sequence does not reach the terminal, a newline does not make a second line.
        (["get", "ht\u{1B}[31mtp://x\nnext"], "invalid URL 'ht\\x1B[31mtp://x\\x0Anext'"),
    ])
    func usageErrorsAreOneLineWithExitCode2(args: [String], mentions: String) async throws {
        let r = try await CLI.run(args)
        #expect(r.status == 2)
        let lines = r.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(r.stderr)")
        #expect(r.stderr.hasPrefix("haul: error: ") && r.stderr.contains(mentions), "\(r.stderr)")
    }

    /// A list's checksum= and --checksum add up, and two different digests of one algorithm
    /// between them are refused before any request.
    @Test func aListsChecksumAndTheCommandLinesMustAgree() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let list = dir.file("list")
        let md5 = String(repeating: "0", count: 32)
        #expect(
            FileManager.default.createFile(
                atPath: list, contents: Data("http://h/x\n checksum=md5=\(md5)\n".utf8)))
        let r = try await CLI.run(["get", "-i", list, "--checksum", "md5=" + String(repeating: "1", count: 32)])
        #expect(r.status == 2)
        #expect(
            r.stderr
                == "haul: error: --checksum and a list's checksum=: two different md5 checksums: no file can have both\n",
            "\(r.stderr)")
    }

    /// A rate of 0 is no limit, as in curl and aria2 (it was a usage error, while the library
    /// took 0 as "hold every byte").
    @Test func aRateOfZeroIsNoLimit() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/norate.bin?size=300000").absoluteString
        let r = try await CLI.run(
            ["get", "-q", "--limit-rate", "0", "--max-overall-rate", "0", "-o", dir.file("n.bin"), url])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("n.bin"), equals: TestContent.bytes(count: 300_000))
        let negative = try await CLI.run(["get", "--limit-rate", "-1", url])
        #expect(negative.status == 2)
    }

    @Test func dashOWritesTheBodyToStandardOutputContinuingAfterADrop() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let url = server.url("/out.bin?size=3000000&drop=1000000&drops=1").absoluteString
        let r = try await CLI.run(["get", "-q", "--retry-delay", "0.05", "-o", "-", url])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty)
        #expect(TestContent.difference(r.stdoutBytes, TestContent.bytes(count: 3_000_000)) == nil)
        #expect(server.requests(path: "/out.bin").map(\.rangeStart) == [nil, 1_000_000], "one connection, continued")
    }

    @Test func dashOStopsWithExit6RatherThanSpliceAFileThatChanged() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let url = server.url("/moving.bin?size=3000000&drop=1000000&drops=1&change=1").absoluteString
        let r = try await CLI.run(["get", "--retry-delay", "0.05", "-o", "-", url])
        #expect(r.status == 6, "\(r.stderr)")
        #expect(r.stderr.contains("changed on the server"), "\(r.stderr)")
        #expect(TestContent.difference(r.stdoutBytes, TestContent.bytes(count: 1_000_000)) == nil, "first version only")
    }

    @Test func dashOHoldsTheRateLimit() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let size = 2_500_000
        let url = server.url("/paced?size=\(size)").absoluteString
        let started = Date()
        let r = try await CLI.run(["get", "-q", "--limit-rate", "1M", "-o", "-", url])
        let seconds = Date().timeIntervalSince(started)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(TestContent.difference(r.stdoutBytes, TestContent.bytes(count: size)) == nil)
        // At 1 MiB/s, with at most a quarter of a second's worth ahead: at least 2.1 s.
        #expect(seconds >= 2.0, "took \(seconds) s")
    }

    @Test func ctrlCWhileDashOIsPacedSaysInterruptedAndExits130() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let url = server.url("/slowout?size=3000000").absoluteString
        let p = try CLI.start(["get", "--limit-rate", "100K", "-o", "-", url])
        #expect(await eventually { server.bytesSent(path: "/slowout") > 0 })
        try await Task.sleep(nanoseconds: 300_000_000)  // reading at 100 KB/s: mostly waiting
        p.signal(SIGINT)
        let r = await CLI.finish(p, timeout: 20)
        #expect(r.status == 130, "\(r.stderr)")
        #expect(r.stderr.hasSuffix("haul: interrupted\n"), "\(r.stderr)")
    }

    /// `-o FIFO` (as `-o /dev/null`) writes into it as `-o -` writes to stdout; a partial file
    /// and a rename into place would have replaced it with a regular file.
    @Test func dashONamingAFIFOWritesIntoItAndLeavesItAFIFO() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let fifo = dir.file("pipe")
        #expect(mkfifo(fifo, 0o600) == 0)
        // The reader is a process of its own, so a FIFO that is never opened for writing ends
        // with its timeout instead of a blocked test.
        let reader = try ChildProcess("cat", [fifo])
        let url = server.url("/piped.bin?size=3000000&drop=1000000&drops=1").absoluteString
        let r = try await CLI.run(["get", "--retry-delay", "0.05", "-o", fifo, url])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("haul: wrote 2.9 MiB from \(url) to \(fifo) in "), "\(r.stderr)")
        #expect(await reader.finish(timeout: 10) == 0)
        #expect(TestContent.difference(Array(reader.stdout), TestContent.bytes(count: 3_000_000)) == nil)
        var st = stat()
        #expect(lstat(fifo, &st) == 0 && (st.st_mode & S_IFMT) == S_IFIFO)
        #expect(dir.contents() == ["pipe"])
    }

    @Test(arguments: [false, true])
    func dashONamingADirectoryIsExit5AndTouchesNothing(overwrite: Bool) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("keep.txt"), contents: Data("precious".utf8)))
        let r = try await CLI.run(
            ["get", "-o", dir.path, server.url("/d.bin?size=3000000").absoluteString]
                + (overwrite ? ["--overwrite"] : []))
        #expect(r.status == 5)
        #expect(r.stderr == "haul: error: \(dir.path) is a directory\n")
        #expect(server.requests.isEmpty)
        #expect(dir.contents() == ["keep.txt"])
    }

    @Test func dashOWithAnErrorStatusWritesNothingAndExits4() async throws {
        let server = try TestServer()
        defer { server.shutdown() }
        let r = try await CLI.run(["get", "-o", "-", server.url("/gone?status=404").absoluteString])
        #expect(r.status == 4)
        #expect(r.stdoutBytes.isEmpty)
        #expect(r.stderr.contains("HTTP 404"))
    }

    @Test func httpErrorExitsWith4AndNamesTheStatus() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await CLI.run(["get", "-d", dir.path, server.url("/nope?status=404").absoluteString])
        #expect(r.status == 4)
        #expect(r.stderr == "haul: error: HTTP 404 Not Found from \(server.url("/nope?status=404").absoluteString)\n")
        #expect(dir.contents().isEmpty)
    }

    @Test func refusedConnectionExitsWith3() async throws {
        let refusing = try RefusingPort()
        let url = refusing.url("/x")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await CLI.run(["get", "-d", dir.path, url.absoluteString])
        #expect(r.status == 3)
        #expect(r.stderr.contains("cannot connect to 127.0.0.1"))
        withExtendedLifetime(refusing) {}
    }

    @Test func existingFileIsRefusedWithExit5AndNamesOverwrite() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(FileManager.default.createFile(atPath: dir.file("f.bin"), contents: Data("mine".utf8)))
        let r = try await CLI.run(["get", "-d", dir.path, server.url("/f.bin?size=100").absoluteString])
        #expect(r.status == 5)
        #expect(r.stderr.contains("--overwrite"))
        #expect(contents(dir.file("f.bin")) == Array("mine".utf8))
        let again = try await CLI.run([
            "get", "-q", "--overwrite", "-d", dir.path, server.url("/f.bin?size=100").absoluteString,
        ])
        #expect(again.status == 0)
        expectFile(dir.file("f.bin"), equals: TestContent.bytes(count: 100))
        let third = try await CLI.run(["get", "-d", dir.path, server.url("/f.bin?size=100").absoluteString])
        #expect(third.status == 0 && third.stderr.contains("already complete"))
    }

    @Test func jsonEventsAreOneObjectPerLine() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = "http://user:secret@127.0.0.1:\(server.port)/j.bin?size=3000000&rate=6000000&drop=1000000&drops=1"
        // One connection: the retry makes a second `start` (segmented downloads retry a range).
        let r = try await CLI.run(["get", "-x", "1", "--json", "--retry-delay", "0.05", "-d", dir.path, url])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty)
        let events = r.stdout.split(separator: "\n").map {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] ?? [:]
        }
        let kinds = events.map { $0["event"] as? String ?? "?" }
        #expect(kinds.first == "start" && kinds.last == "done")
        #expect(kinds.contains("retry"))
        #expect(kinds.filter { $0 == "start" }.count == 2)
        // At most 10 progress events per second of transfer (~0.5 s here), plus slack.
        #expect(kinds.filter { $0 == "progress" }.count <= 15)
        #expect(events.last?["bytes"] as? Int == 3_000_000)
        #expect(!r.stdout.contains("secret"))
    }

    @Test func diskFullExitsWith5AndTheRerunResumes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/full.bin?size=4000000").absoluteString
        let r = try await CLI.run(
            ["get", "-x", "1", "-d", dir.path, url], environment: ["HAUL_INJECT_ENOSPC_AFTER": "1500000"])
        #expect(r.status == 5)
        #expect(r.stderr.contains("disk full"))
        let record = try #require(ResumeRecord.decode(contents(dir.file("full.bin.haul"))))
        #expect(record.contiguousBytes > 0)
        let again = try await CLI.run(["get", "-x", "1", "-d", dir.path, url])
        #expect(again.status == 0)
        expectFile(dir.file("full.bin"), equals: TestContent.bytes(count: 4_000_000))
        #expect(server.requests(path: "/full.bin").last?.rangeStart == Int(record.contiguousBytes))
    }

    @Test func aRerunIntoADirectoryResumesAServerNamedPartialWithItsFirstRequest() async throws {
        // The name comes from Content-Disposition; the new process finds the partial by the URL
        // in its record (listing the directory once) and asks for the missing bytes at once.
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/cdnamed?size=2000000&cd=benign&drop=600000&drops=1").absoluteString
        let first = try await CLI.run(["get", "-q", "-x", "1", "--retries", "0", "-d", dir.path, url])
        #expect(first.status == 3, "\(first.stderr)")
        #expect(dir.contents() == ["report.pdf.haul", "report.pdf.part"])
        let again = try await CLI.run(["get", "-q", "-x", "1", "-d", dir.path, url])
        #expect(again.status == 0, "\(again.stderr)")
        expectFile(dir.file("report.pdf"), equals: TestContent.bytes(count: 2_000_000))
        #expect(server.requests(path: "/cdnamed").map(\.rangeStart) == [nil, 600_000])
    }

    @Test func interruptKeepsThePartialAndTheSameCommandResumes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // The first answer stops after 4 MB (`stall`), so Ctrl-C always finds it unfinished; the
        // rate lets the first checkpoint (after a second of transfer) happen before.
        let url = server.url("/int.bin?size=6000000&rate=3000000&stall=4000000&stalls=1")
        let args = ["get", "-x", "1", "-d", dir.path, url.absoluteString]
        let p = try CLI.start(args)
        #expect(
            await eventually { (ResumeRecord.decode(contents(dir.file("int.bin.haul")))?.contiguousBytes ?? 0) > 0 })
        p.signal(SIGINT)
        let r = await CLI.finish(p)
        #expect(r.status == 130)
        #expect(
            r.stderr.contains("interrupted") && r.stderr.contains("int.bin.part")
                && r.stderr.contains("again to resume"))
        let saved = try #require(ResumeRecord.decode(contents(dir.file("int.bin.haul")))).contiguousBytes
        let again = try await CLI.run(args)
        #expect(again.status == 0)
        expectFile(dir.file("int.bin"), equals: TestContent.bytes(count: 6_000_000))
        let last = try #require(server.requests(path: "/int.bin").last?.rangeStart)
        #expect(Int64(last) >= saved)
    }

}

/// A real full disk: a small tmpfs the test mounts (root only; skipped elsewhere).
@Suite("haul get on a full tmpfs", .enabled(if: getuid() == 0, "mounting a tmpfs needs root"), .fewAtOnce)
struct FullDiskTests {
    static func mount(_ args: [String]) async throws -> Int32 {
        try await ChildProcess("/bin/mount", args).finish(timeout: 20) ?? -1
    }

    @Test func diskFullKeepsAResumablePartialAndTheRerunFinishesOnceThereIsRoom() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory("haul-tmpfs")
        guard try await Self.mount(["-t", "tmpfs", "-o", "size=2m", "tmpfs", dir.path]) == 0 else {
            server.shutdown()
            dir.remove()
            Issue.record("tmpfs mount refused although running as root")
            return
        }
        // Whatever the body throws, the unmount is awaited before the directory goes (a defer
        // could not wait without blocking a thread).
        var failure: (any Error)?
        do {
            let url = server.url("/big.bin?size=4000000").absoluteString
            let full = try await CLI.run(["get", "-x", "1", "-d", dir.path, url])
            #expect(full.status == 5)
            let lastLine = full.stderr.split(separator: "\n").last.map(String.init) ?? ""
            #expect(lastLine.hasPrefix("haul: error: disk full"), "\(full.stderr)")
            #expect(lastLine.contains("big.bin.part"))
            let record = try #require(ResumeRecord.decode(contents(dir.file("big.bin.haul"))))
            #expect(record.contiguousBytes > 1_000_000)
            #expect(!FileManager.default.fileExists(atPath: dir.file("big.bin")))

            #expect(try await Self.mount(["-o", "remount,size=16m", dir.path]) == 0)
            let again = try await CLI.run(["get", "-x", "1", "-d", dir.path, url])
            #expect(again.status == 0, "\(again.stderr)")
            expectFile(dir.file("big.bin"), equals: TestContent.bytes(count: 4_000_000))
            #expect(server.requests(path: "/big.bin").last?.rangeStart == Int(record.contiguousBytes))
        } catch {
            failure = error
        }
        server.shutdown()
        #expect(await (try? ChildProcess("/bin/umount", [dir.path]))?.finish(timeout: 20) == 0)
        dir.remove()
        if let failure { throw failure }
    }
}
