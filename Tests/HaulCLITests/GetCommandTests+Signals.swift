import Foundation
import HaulTestSupport
import HaulTestTraits
import Testing

@testable import HaulCore

extension GetCommandTests {
    /// A closed terminal (or a dropped ssh session) sends SIGHUP: it stops like Ctrl-C, with a
    /// checkpoint of what was written, instead of killing the process (exit 129) with up to a
    /// second of bytes not yet claimed by the record.
    @Test func hangupStopsLikeCtrlCAndKeepsTheCheckpoint() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/hup.bin?size=6000000&rate=3000000&stall=4000000&stalls=1")
        let p = try CLI.start(["get", "-x", "1", "-d", dir.path, url.absoluteString])
        // Stopped by the stall at 4 MB, after the first periodic checkpoint (at about 3 MB).
        #expect(
            await eventually { (ResumeRecord.decode(contents(dir.file("hup.bin.haul")))?.contiguousBytes ?? 0) > 0 })
        #expect(await eventually { server.bytesSent(path: "/hup.bin") >= 4_000_000 })
        try await Task.sleep(nanoseconds: 300_000_000)  // for haul to read and write them
        p.signal(SIGHUP)
        let r = await CLI.finish(p)
        #expect(r.status == 130, "\(r.stderr)")
        #expect(r.stderr.contains("interrupted"), "\(r.stderr)")
        // The stop's own checkpoint: the record claims every byte of the partial.
        let record = try #require(ResumeRecord.decode(contents(dir.file("hup.bin.haul"))))
        #expect(record.contiguousBytes == 4_000_000)
    }

    /// Under `nohup` SIGHUP was ignored before haul started: it stays ignored, and the download
    /// goes on. (Passes without the SIGHUP handling too; it guards what that handling must not
    /// take away.)
    @Test func underNohupAHangupIsIgnored() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/nohup.bin?size=3000000&rate=3000000")
        let p = try ChildProcess(
            "nohup", [CLI.binary.path, "get", "-q", "-x", "1", "-d", dir.path, url.absoluteString])
        #expect(await eventually { server.bytesSent(path: "/nohup.bin") > 0 })
        p.signal(SIGHUP)
        let r = await CLI.finish(p)
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("nohup.bin"), equals: TestContent.bytes(count: 3_000_000))
    }

    /// A parent may start haul with signals blocked (a blocked mask survives exec): the main
    /// thread unblocks them while it waits, so a SIGTERM still stops the download cleanly.
    /// (Dispatch's threads block every signal; a main thread that kept the inherited mask left
    /// the signal pending for ever.)
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), "needs python3"))
    func aSignalBlockedWhenHaulStartedStillStopsIt() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let url = server.url("/blocked.bin?size=6000000&rate=1000000")
        let blockThenRun =
            "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT}); os.execv(sys.argv[1], sys.argv[1:])"
        let p = try ChildProcess(
            "/usr/bin/python3",
            ["-c", blockThenRun, CLI.binary.path, "get", "-x", "1", "-d", dir.path, url.absoluteString])
        #expect(await eventually { server.bytesSent(path: "/blocked.bin") > 0 })
        p.signal(SIGTERM)
        let r = await CLI.finish(p, timeout: 30)
        #expect(r.status == 130, "\(r.stderr)")
        #expect(r.stderr.contains("interrupted"), "\(r.stderr)")
    }

    @Test func killDashNineAtSeveralPointsThenRerunYieldsTheExactFile() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let size = 16_000_000
        let args = [
            "get", "-q", "-x", "1", "-d", dir.path, server.url("/k9.bin?size=\(size)&rate=4000000").absoluteString,
        ]
        var saved: [Int64] = []
        // What a rerun in this boot trusts: the synced ranges and those noted as written since.
        func trusted() -> ResumeRecord? {
            ResumeRecord.decode(contents(dir.file("k9.bin.haul")))?.trusted(onBoot: BootID.current)
        }
        func checkpointed() -> Int64 { trusted()?.contiguousBytes ?? 0 }
        for _ in 0..<2 {
            // Kill as soon as the record claims more than it did at the previous kill.
            let threshold = checkpointed() + 1
            let p = try CLI.start(args)
            #expect(await eventually { checkpointed() >= threshold })
            p.signal(SIGKILL)
            _ = await CLI.finish(p)
            saved.append(try #require(trusted()).contiguousBytes)
        }
        let r = try await CLI.run(args)
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("k9.bin"), equals: TestContent.bytes(count: size))
        #expect(dir.contents() == ["k9.bin"])
        let starts = server.requests(path: "/k9.bin").map { $0.rangeStart.map(Int64.init) ?? 0 }
        try #require(starts.count == 3, "\(starts)")  // indexing a shorter list would crash the run
        // Each rerun asks for the bytes after the last checkpoint, never from 0; at most ~1 s of
        // transfer (4 MB at this rate) is fetched again.
        for (i, start) in starts.dropFirst().enumerated() {
            #expect(start == saved[i])
        }
        #expect(starts[2] > starts[1] && starts[1] > 0)
    }

    @Test func killDashNineDuringASegmentedDownloadResumesEachRange() async throws {
        let server = try TestServer()
        let dir = try TemporaryDirectory()
        defer { cleanUp(server, dir) }
        let size = 16 << 20
        let args = [
            "get", "-q", "-x", "4", "-d", dir.path, server.url("/seg9.bin?size=\(size)&rate=1000000").absoluteString,
        ]
        func written() -> [ByteRange] {
            ResumeRecord.decode(contents(dir.file("seg9.bin.haul")))?.trusted(onBoot: BootID.current).ranges ?? []
        }
        let p = try CLI.start(args)
        #expect(await eventually { written().count == 4 && written().allSatisfy { $0.count > 0 } })
        p.signal(SIGKILL)
        _ = await CLI.finish(p)
        let saved = written()
        let before = server.requests(path: "/seg9.bin").count
        let r = try await CLI.run(args)
        #expect(r.status == 0, "\(r.stderr)")
        expectFile(dir.file("seg9.bin"), equals: TestContent.bytes(count: size))
        let starts = Set(server.requests(path: "/seg9.bin").dropFirst(before).compactMap(\.rangeStart).map(Int64.init))
        #expect(starts.isSuperset(of: Set(saved.map(\.end))), "\(starts.sorted()) vs \(saved)")
        #expect(dir.contents() == ["seg9.bin"])
    }

    @Test func hostileServerNamesStayInsideDir() async throws {
        let server = try TestServer()
        let root = try TemporaryDirectory()
        defer { cleanUp(server, root) }
        let dir = root.file("in")
        for kind in ["traversal", "absolute", "slashes", "nul"] {
            let r = try await CLI.run([
                "get", "-q", "-d", dir, server.url("/h-\(kind)?size=10&cd=\(kind)").absoluteString,
            ])
            #expect(r.status == 0 || r.status == 5, "\(kind): \(r.stderr)")
        }
        #expect(root.contents() == ["in"])
        #expect(
            Set(try FileManager.default.contentsOfDirectory(atPath: dir)) == ["evil.txt", "inner.txt", "nulname.txt"])
    }

    @Test func demoRunsAndVerifiesTheChecksum() async throws {
        let r = try await CLI.run(["demo", "--size", "8"], timeout: 120)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("identical"))
        #expect(r.stdout.contains("Range: bytes="))
        #expect(r.stdout.contains("paused"))
    }

    @Test(arguments: [
        ("data", "content exact"), ("stream", "the server could send only"), ("task", "the file is exact"),
        ("manager", "8 of 8 done"),
    ])
    func demoModes(mode: String, says: String) async throws {
        let r = try await CLI.run(["demo", mode, "--size", "8"], timeout: 120)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(r.stdout.contains(says), "\(r.stdout)")
    }

    @Test func netPrintsTheStateAndJSON() async throws {
        let r = try await CLI.run(["net"])
        #expect(r.status == 0)
        #expect(r.stdout.hasPrefix("satisfied: ") || r.stdout.hasPrefix("unsatisfied: "), "\(r.stdout)")
        #expect(r.stdout.contains("loopback"))
        let j = try await CLI.run(["net", "--json"])
        let object = try #require(
            (try? JSONSerialization.jsonObject(with: Data(j.stdout.utf8))) as? [String: Any])
        #expect(["satisfied", "unsatisfied"].contains(object["status"] as? String ?? ""))
    }

    @Test func versionAndHelp() async throws {
        let v = try await CLI.run(["version"])
        #expect(v.status == 0 && v.stdout.hasPrefix("haul 0.1.0 (libcurl/"))
        let h = try await CLI.run(["help", "get"])
        #expect(h.status == 0 && h.stdout.contains("--no-continue"))
    }
}
