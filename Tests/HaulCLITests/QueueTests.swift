import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

@Suite("haul get -j / -i: several downloads at once", .serialized, .fewAtOnce)
struct QueueTests {
    @Test func runsAtMostJAtOnceAndSavesEverything() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let urls = (1...6).map { server.url("/q\($0).bin?size=300000&rate=1000000&seed=\($0)&hold=3").absoluteString }
        let r = try await CLI.run(["get", "-q", "-j", "3", "-d", dir.path] + urls)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.maxConcurrentRequests() == 3)
        for i in 1...6 { expectFile(dir.file("q\(i).bin"), equals: TestContent.bytes(seed: i, count: 300_000)) }
    }

    /// A URL listed twice for the same place (a list merged with the command line, a glob that
    /// matched twice) is downloaded once, with a note; the second copy failed the run (exit 5:
    /// "was saved … earlier in this run", or with -j "is being downloaded by another download").
    /// The same URL with its own out= is another download (aria2's rule).
    @Test(arguments: [1, 2])
    func aURLListedTwiceForTheSamePlaceIsDownloadedOnce(jobs: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/twice.bin?size=300000").absoluteString
        let list = dir.file("list.txt")
        #expect(FileManager.default.createFile(atPath: list, contents: Data("\(url)\n\(url)\n out=copy.bin\n".utf8)))
        let r = try await CLI.run(["get", "-j", "\(jobs)", "-d", dir.path, url, "-i", list])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("haul: \(url) is listed more than once; downloading it once"), "\(r.stderr)")
        #expect(r.stderr.contains("2 of 2 downloads saved"), "\(r.stderr)")
        expectFile(dir.file("twice.bin"), equals: TestContent.bytes(count: 300_000))
        expectFile(dir.file("copy.bin"), equals: TestContent.bytes(count: 300_000))
    }

    /// `--json` ids are the URLs' places in the command line and the list, a repeated URL's
    /// included (its place is skipped, not given to the next URL), and events name the URL.
    @Test func jsonIdsKeepTheirPlacesWhenARepeatedURLIsSkipped() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let a = server.url("/ida.bin?size=100").absoluteString
        let b = server.url("/idb.bin?size=100").absoluteString
        let r = try await CLI.run(["get", "--json", "-j", "2", "-d", dir.path, a, a, b])
        #expect(r.status == 0, "\(r.stderr)")
        let done = r.stdout.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }.filter { $0["event"] as? String == "done" }
        let ids = Dictionary(
            uniqueKeysWithValues: done.compactMap { e in (e["url"] as? String).map { ($0, e["id"] as? Int) } })
        #expect(ids == [a: 1, b: 3], "\(r.stdout)")
    }

    /// With -j a file already complete said "saved" and its `done` event "bytes":0, where one
    /// download says "is already complete" with its size.
    @Test func anAlreadyCompleteFileSaysSoWithJ() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        #expect(
            FileManager.default.createFile(atPath: dir.file("had.bin"), contents: Data(TestContent.bytes(count: 4096))))
        let url = server.url("/had.bin?size=4096").absoluteString
        let human = try await CLI.run(["get", "-j", "2", "-d", dir.path, url])
        #expect(human.status == 0, "\(human.stderr)")
        #expect(human.stderr.contains("haul: \(dir.file("had.bin")) is already complete (4.0 KiB)"), "\(human.stderr)")
        let json = try await CLI.run(["get", "--json", "-j", "2", "-d", dir.path, url])
        #expect(json.stdout.contains("\"bytes\":4096,\"alreadyComplete\":true"), "\(json.stdout)")
    }

    /// With -j, a download's start, retries and restarts were not reported at all (no JSON
    /// event, no note): only its end was. They carry the download's id now.
    @Test func jRunsReportEachDownloadsStartAndRetries() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let calm = server.url("/calm.bin?size=2000").absoluteString
        let flaky = server.url("/flaky.bin?size=3000000&drop=1000000&drops=1").absoluteString
        let args = ["get", "-x", "1", "--retry-delay", "0.05", "-j", "2", "-d", dir.path, calm, flaky]
        let json = try await CLI.run(args + ["--json"])
        #expect(json.status == 0, "\(json.stderr)")
        let events = json.stdout.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        let starts = events.filter { $0["event"] as? String == "start" }.compactMap { $0["id"] as? Int }
        #expect(Set(starts) == [1, 2], "\(json.stdout)")
        let retries = events.filter { $0["event"] as? String == "retry" }
        #expect(retries.count == 1 && retries.first?["id"] as? Int == 2, "\(json.stdout)")
        // Again on a terminal's terms (notes), into another directory; a new target for the
        // server, whose drop counts requests by path and query.
        let other = dir.file("human")
        let human = try await CLI.run(
            ["get", "-x", "1", "--retry-delay", "0.05", "-j", "2", "-d", other, calm, flaky + "&again=1"])
        #expect(human.status == 0, "\(human.stderr)")
        #expect(human.stderr.contains("haul: #2 flaky.bin: connection to 127.0.0.1 lost"), "\(human.stderr)")
        #expect(human.stderr.contains("retry 1 in"), "\(human.stderr)")
    }

    /// `-q` and `--json` runs (no live display) take small files the express way
    /// (docs/small-downloads.md): every URL is asked once, a larger file's first range too (the
    /// engine goes on from the answer), and a failed one is reported as ever. (`-j` holding for
    /// them: ``runsAtMostJAtOnceAndSavesEverything()``, whose files are small.)
    @Test(arguments: ["-q", "--json"])
    func withoutALiveDisplayEveryURLIsAskedOnce(mode: String) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        var urls = (1...12).map { server.url("/s\($0).bin?size=\(1000 * $0)&seed=\($0)&hold=1").absoluteString }
        urls.append(server.url("/large.bin?size=5000000&seed=20").absoluteString)
        urls.append(server.url("/missing.bin?status=404").absoluteString)
        let r = try await CLI.run(["get", mode, "-j", "3", "-d", dir.path] + urls)
        #expect(r.status == 4, "the 404's exit code: \(r.stderr)")
        #expect((mode == "-q" ? r.stderr : r.stdout).contains("404"), "\(r.stderr)")
        for i in 1...12 {
            expectFile(dir.file("s\(i).bin"), equals: TestContent.bytes(seed: i, count: 1000 * i))
            #expect(server.requests(path: "/s\(i).bin").count == 1)
        }
        expectFile(dir.file("large.bin"), equals: TestContent.bytes(seed: 20, count: 5_000_000))
        let probes = server.requests(path: "/large.bin").filter { $0.header("Range") == "bytes=0-2097151" }
        #expect(probes.count == 1, "\(server.requests(path: "/large.bin").map { $0.header("Range") ?? "-" })")
        #expect(server.requests(path: "/missing.bin").count == 1)
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: dir.path)).count == 13, "no side files")
        guard mode == "--json" else { return }
        let events = r.stdout.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        let started = events.filter { $0["event"] as? String == "start" }.compactMap { $0["id"] as? Int }
        let done = events.filter { $0["event"] as? String == "done" }.compactMap { $0["id"] as? Int }
        #expect(Set(started) == Set(1...13) && started.count == 13, "\(r.stdout)")
        #expect(Set(done) == Set(1...13) && done.count == 13, "\(r.stdout)")
        let failed = events.filter { $0["event"] as? String == "error" }.compactMap { $0["id"] as? Int }
        #expect(failed == [14], "\(r.stdout)")
    }

    @Test func theConnectionCapPerHostHoldsForAllDownloadsAndRangesTogether() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // Three 6 MiB files, each split by default into the probe's 2 MiB and four 1 MiB
        // ranges: up to fifteen connections wanted.
        let size = 6 << 20
        let urls = (1...3).map { server.url("/c\($0).bin?size=\(size)&rate=3000000&seed=\($0)&hold=5").absoluteString }
        let r = try await CLI.run(["get", "-q", "-j", "3", "--max-connections-per-host", "5", "-d", dir.path] + urls)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(server.maxConcurrentRequests() == 5, "server's view")
        for i in 1...3 { expectFile(dir.file("c\(i).bin"), equals: TestContent.bytes(seed: i, count: size)) }
    }

    @Test func inputFileWithPerURLOptions() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let list = """
            # a comment
            \(server.url("/a.bin?size=1000").absoluteString)
              out=renamed.bin
            \(server.url("/b.bin?size=2000").absoluteString)
              dir=\(dir.file("sub"))

            \(server.url("/c.bin?size=3000").absoluteString)
            """
        #expect(FileManager.default.createFile(atPath: dir.file("list.txt"), contents: Data(list.utf8)))
        let r = try await CLI.run(["get", "-q", "-j", "2", "-d", dir.path, "-i", dir.file("list.txt")])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("renamed.bin"), equals: TestContent.bytes(count: 1000))
        expectFile(dir.file("sub/b.bin"), equals: TestContent.bytes(count: 2000))
        expectFile(dir.file("c.bin"), equals: TestContent.bytes(count: 3000))
    }

    @Test func jsonEventsCarryAnIdAndAFailureSetsTheExitCode() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let r = try await CLI.run([
            "get", "--json", "-j", "2", "-d", dir.path, server.url("/ok.bin?size=100").absoluteString,
            server.url("/missing?status=404").absoluteString,
        ])
        #expect(r.status == 4)
        let events = r.stdout.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(events.contains { $0["event"] as? String == "done" && $0["id"] as? Int == 1 })
        #expect(events.contains { $0["event"] as? String == "error" && $0["id"] as? Int == 2 })
    }

    @Test func theSameFileTwiceInOneRunIsDownloadedOnceAndTheDuplicateRefused() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // Before, both wrote dup.bin.part and the file saved matched neither answer. Two URLs
        // (the same one twice is now one download).
        let url = server.url("/dup.bin?size=6000000&rate=2000000").absoluteString
        let r = try await CLI.run(["get", "-q", "-j", "2", "-d", dir.path, url, url + "&again=1"])
        #expect(r.status == 5, "\(r.stderr)")
        #expect(r.stderr.contains("dup.bin is being downloaded by another download"), "\(r.stderr)")
        expectFile(dir.file("dup.bin"), equals: TestContent.bytes(count: 6_000_000))
        #expect(dir.contents() == ["dup.bin"])
    }

    /// Two URLs whose files have one name, one after the other: the second was "already
    /// complete" when its size matched the first's (its file never saved, "2 of 2 downloads
    /// saved"), and with --overwrite it replaced the first. Like two at once (above), the second
    /// is refused now, before it writes anything, naming the URL the file came from (with `-q`,
    /// while the first is still being saved, as a download in progress).
    @Test func aSecondURLWithTheSameFileNameInOneRunIsRefusedNotTakenAsComplete() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let first = server.url("/a/same.bin?size=10000&seed=1").absoluteString
        let second = server.url("/b/same.bin?size=10000&seed=2").absoluteString
        // -j 2: the first is done long before the slow one, so the second starts after it.
        let slow = server.url("/slow.bin?size=200000&rate=400000").absoluteString
        for (extra, urls) in [
            ([], [first, second]), (["--overwrite"], [first, second]), (["-x", "1"], [first, second]),
            (["-j", "2"], [first, slow, second]),
            // The express way (-q): the first's claim is kept as the engine's is.
            (["-j", "2", "-q"], [first, slow, second]),
        ] {
            for name in ["same.bin", "slow.bin"] { try? FileManager.default.removeItem(atPath: dir.file(name)) }
            let r = try await CLI.run(["get", "-d", dir.path] + extra + urls)
            #expect(r.status == 5, "\(extra) \(r.stderr)")
            // The express way frees a download's place once its transfer has ended, so the
            // second may start while the first's file is still being saved (its claim held).
            #expect(
                r.stderr.contains("haul: error: \(dir.file("same.bin")) was saved from \(first) earlier in this run")
                    || (extra.contains("-q")
                        && r.stderr.contains(
                            "haul: error: \(dir.file("same.bin")) is being downloaded by another download in this process"
                        )),
                "\(extra) \(r.stderr)")
            #expect(
                extra.contains("-q")
                    || r.stderr.contains("\(urls.count - 1) of \(urls.count) downloads saved, 1 failed"),
                "\(extra) \(r.stderr)")
            expectFile(dir.file("same.bin"), equals: TestContent.bytes(seed: 1, count: 10000))
        }
    }

    @Test func ctrlCWithADownloadStillQueuedExitsAndTheSameCommandFinishes() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        // Before, the command hung after Ctrl-C: the manager's wait for idle never ended while a
        // download was queued (here q3, behind two that stall).
        let urls = (1...3).map {
            server.url("/q\($0)c.bin?size=3000000&seed=\($0)&stall=1000000&stalls=1").absoluteString
        }
        // One connection each: with ranges, the slow-connection watch replaced a stalled one
        // after 3 s and the downloads could end before the test's Ctrl-C (seen once under the
        // full suite's load: exit 0, all three saved).
        let args = ["get", "-x", "1", "-j", "2", "-d", dir.path] + urls
        let p = try CLI.start(args)
        #expect(
            await eventually {
                server.bytesSent(path: "/q1c.bin") >= 1_000_000 && server.bytesSent(path: "/q2c.bin") >= 1_000_000
            })
        p.signal(SIGINT)
        let r = await CLI.finish(p, timeout: 20)
        #expect(r.status == 130, "\(r.stderr)")
        #expect(r.stderr.contains("interrupted"), "\(r.stderr)")
        #expect(server.requests(path: "/q3c.bin").isEmpty)
        // The rerun finds q3's first answer stalled too (the server's first request of it): with
        // ranges (-x 4, the last -x counts) the stalled one is replaced after about 3 s.
        let again = try await CLI.run(args + ["-q", "-x", "4"])
        #expect(again.status == 0, "\(again.stderr)")
        for i in 1...3 { expectFile(dir.file("q\(i)c.bin"), equals: TestContent.bytes(seed: i, count: 3_000_000)) }
    }

    @Test func eachURLOfAListMayCarryItsOwnChecksum() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let good = SHA256.hexDigest(of: TestContent.bytes(seed: 1, count: 5000))
        let wrong = SHA256.hexDigest(of: TestContent.bytes(seed: 9, count: 5000))
        let list = """
            \(server.url("/ok.bin?size=5000&seed=1").absoluteString)
              checksum=sha-256=\(good)
            \(server.url("/bad.bin?size=5000&seed=2").absoluteString)
              checksum=sha-256=\(wrong)
            \(server.url("/free.bin?size=100").absoluteString)
            """
        #expect(FileManager.default.createFile(atPath: dir.file("list.txt"), contents: Data(list.utf8)))
        let r = try await CLI.run(["get", "-q", "-j", "2", "-d", dir.path, "-i", dir.file("list.txt")])
        #expect(r.status == 6, "\(r.stderr)")
        #expect(r.stderr.contains("SHA-256 of \(dir.file("bad.bin"))"), "\(r.stderr)")
        expectFile(dir.file("ok.bin"), equals: TestContent.bytes(seed: 1, count: 5000))
        expectFile(dir.file("free.bin"), equals: TestContent.bytes(count: 100))
        #expect(!FileManager.default.fileExists(atPath: dir.file("bad.bin")), "a mismatch is deleted")
    }

    /// Two haul processes on one file (a cron job that overlaps the previous run): the second
    /// is refused, and the first's file is exact.
    @Test func aSecondProcessDownloadingTheSameFileIsRefused() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/shared.bin?size=6000000&rate=2000000").absoluteString
        let first = try CLI.start(["get", "-q", "-x", "1", "-d", dir.path, url])
        #expect(await eventually { server.bytesSent(path: "/shared.bin") > 0 })
        let second = try await CLI.run(["get", "-q", "-x", "1", "-d", dir.path, url])
        #expect(second.status == 5, "\(second.stderr)")
        #expect(second.stderr.contains("being downloaded by another haul process"), "\(second.stderr)")
        let r = await CLI.finish(first)
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("shared.bin"), equals: TestContent.bytes(count: 6_000_000))
        #expect(dir.contents() == ["shared.bin"])
    }

    @Test func dashIDashReadsTheListFromStandardInput() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let list = [
            server.url("/in1.bin?size=1000").absoluteString, "  out=first.bin",
            server.url("/in2.bin?size=2000").absoluteString,
        ]
        let command =
            "printf '%s\\n' \(list.map { "'\($0)'" }.joined(separator: " ")) | '\(CLI.binary.path)' get -q -d '\(dir.path)' -i -"
        let r = try await CLI.run(["-c", command], executable: URL(fileURLWithPath: "/bin/sh"))
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("first.bin"), equals: TestContent.bytes(count: 1000))
        expectFile(dir.file("in2.bin"), equals: TestContent.bytes(count: 2000))
    }

    /// Several URLs end with one line that counts them, in order and with -j; the exit code is
    /// the first failure's. The plain (not a terminal) total line has no spinner.
    @Test(arguments: [1, 3])
    func severalURLsEndWithASummaryLine(jobs: Int) async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let urls = [
            server.url("/s1.bin?size=1000"), server.url("/missing?status=404"), server.url("/s2.bin?size=2000"),
        ].map(\.absoluteString)
        let r = try await CLI.run(["get", "-j", "\(jobs)", "-d", dir.path] + urls)
        #expect(r.status == 4, "\(r.stderr)")
        #expect(r.stderr.hasSuffix("haul: 2 of 3 downloads saved, 1 failed\n"), "\(r.stderr)")
        #expect(!r.stderr.contains("/ /") && !r.stderr.contains("| |"), "\(r.stderr)")
        let quiet = try await CLI.run(["get", "-q", "-j", "\(jobs)", "-d", dir.path] + urls)
        #expect(quiet.status == 4 && quiet.stderr == "haul: error: HTTP 404 Not Found from \(urls[1])\n")
        let one = try await CLI.run(["get", "-d", dir.path, urls[0]])
        #expect(one.status == 0 && !one.stderr.contains("downloads saved"), "\(one.stderr)")
    }

    /// One URL listed twice with other `dir=` or `out=` goes to each place (the options were
    /// once kept by URL, so the last entry's applied to both and the first place got nothing).
    @Test func theSameURLListedTwiceWithOtherOptionsGoesToEachPlace() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/twice.bin?size=5000").absoluteString
        let list = "\(url)\n dir=\(dir.file("a"))\n\(url)\n dir=\(dir.file("b"))\n\(url)\n out=renamed.bin\n"
        #expect(FileManager.default.createFile(atPath: dir.file("list.txt"), contents: Data(list.utf8)))
        for jobs in ["1", "2"] {
            for name in ["a", "b"] { try? FileManager.default.removeItem(atPath: dir.file(name)) }
            try? FileManager.default.removeItem(atPath: dir.file("renamed.bin"))
            let r = try await CLI.run(["get", "-q", "-j", jobs, "-d", dir.path, "-i", dir.file("list.txt")])
            #expect(r.status == 0, "\(r.stderr)")
            for path in ["a/twice.bin", "b/twice.bin", "renamed.bin"] {
                expectFile(dir.file(path), equals: TestContent.bytes(count: 5000))
            }
        }
    }

    /// `-d DIR` and `dir=DIR` are created when missing, also for an entry with `out=` (which
    /// failed with "directory … does not exist" while the same list without `out=` worked).
    @Test func missingDirectoriesAreCreatedForEntriesWithOut() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/mkdir.bin?size=3000").absoluteString
        let list = "\(url)\n out=first.bin\n\(url)\n dir=\(dir.file("new/deeper"))\n out=second.bin\n"
        #expect(FileManager.default.createFile(atPath: dir.file("list.txt"), contents: Data(list.utf8)))
        let r = try await CLI.run(["get", "-q", "-d", dir.file("fresh"), "-i", dir.file("list.txt")])
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("fresh/first.bin"), equals: TestContent.bytes(count: 3000))
        expectFile(dir.file("new/deeper/second.bin"), equals: TestContent.bytes(count: 3000))
        // -o names a file whose directory must exist, as with curl and wget (a typo is not a tree).
        let o = try await CLI.run(["get", "-q", "-o", dir.file("absent/x.bin"), url])
        #expect(o.status == 5)
        #expect(o.stderr == "haul: error: directory \(dir.file("absent")) does not exist\n")
        #expect(server.requests.count == 2, "the -o run asked nothing")
    }

    @Test func badListIsAUsageError() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(FileManager.default.createFile(atPath: dir.file("l"), contents: Data("  out=x\n".utf8)))
        let r = try await CLI.run(["get", "-i", dir.file("l")])
        #expect(r.status == 2 && r.stderr.contains("l:1"), "\(r.stderr)")
        // out= names a file inside its directory: a list from elsewhere cannot write outside it.
        // A "/" followed by a combining mark is one Character and still a "/" to the kernel.
        for out in ["../escape.bin", "/etc/evil", "a/../../b", "sub/", "../\u{301}/../\u{301}x", "/\u{301}x"] {
            let list = "http://127.0.0.1:1/x\n out=\(out)\n"
            #expect(FileManager.default.createFile(atPath: dir.file("o"), contents: Data(list.utf8)))
            let refused = try await CLI.run(["get", "-d", dir.path, "-i", dir.file("o")])
            #expect(refused.status == 2, "\(out): \(refused.stderr)")
            #expect(
                refused.stderr
                    == "haul: error: \(dir.file("o")):2: out=\(out) is not a file name inside the directory (use dir=)\n"
            )
        }
    }
}
