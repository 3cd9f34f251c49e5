#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One request chain: receives the response and body on the transport's thread. Its state is
/// mutated only there while the transfer runs, and read by the engine after `finished()`
/// returns, which orders the accesses; hence `@unchecked Sendable`.
final class Attempt: TransportHandler, @unchecked Sendable {
    let downloader: FileDownloader
    var machine: DownloadStateMachine
    /// The destination, once claimed: known before the request, or named by the answer.
    var place: DownloadStore.Place?
    var destination: String? { place?.destination }
    var partial: PartialFile?
    var action: ResumeStateMachine.Action?
    var failure: HaulError?
    var existingComplete: DownloadOutcome?
    var receivedBytes: Int64 = 0
    /// Leading body bytes still to compare with the partial instead of writing them.
    private var toCompare: Int64 = 0
    var connectRefused = false
    /// The destination turned out to hold a partial of this URL: ask again with Range.
    var askAgain = false
    /// The periodic checkpoint running on a Dispatch worker, if any (at most one), and the
    /// error of the last one. Off the transport's thread: its fsync on a slow disk would hold
    /// every transfer of the process, this one's cancel included (tested).
    private let inFlight = Locked<(done: OneShot<Void>?, error: HaulError?)>((nil, nil))

    /// The hashes of the bytes written and the digests the server vouched for, carried from one
    /// attempt to the next.
    var hashing: Hashing

    init(downloader: FileDownloader, machine: DownloadStateMachine, place: DownloadStore.Place?, hashing: Hashing) {
        self.downloader = downloader
        self.machine = machine
        self.place = place
        self.hashing = hashing
    }

    struct Hashing {
        /// Every byte of the partial from the first, in order, while they cover it; nil when no
        /// digest is expected or the bytes could not be hashed in order (a final pass then reads
        /// the file).
        var hashes: MultiHasher?
        /// The digests the answers vouched for the file with (`Repr-Digest`): those of the whole
        /// answer that started the partial, and of each answer that continued it in this process
        /// (they are not kept in the record).
        var vouched: [Checksum] = []

        /// What the finished file of `bytes` bytes is checked against.
        func verification(of bytes: Int64, _ options: EngineOptions) -> Verification {
            let computed = hashes.flatMap { $0.covers(exactly: bytes) ? $0.digests() : nil } ?? [:]
            return Verification(options.expected(vouched: vouched), computed: computed)
        }
    }

    /// The most bytes a resume reads again to bring the record's hashes up to its offset, on the
    /// transport's thread (which holds every transfer of the process meanwhile: about 10 ms at
    /// this limit for libcrypto's SHA-256 from the page cache; about 64 ms per algorithm with
    /// Haul's own code, more from a cold disk). Usually that is the bytes
    /// noted after the last checkpoint (a kill -9), less than a block after a reboot; a record
    /// without hashes (an older haul's) means from byte 0. Beyond, the file is hashed at the end
    /// instead, on a worker.
    static let catchUpLimit: Int64 = 16 << 20

    func transportDidReceive(response: TransportResponse) -> Bool {
        let action = machine.resume.responseReceived(
            status: response.status, headers: response.headers, url: response.url)
        self.action = action
        guard case .write(let offset, let discard, let validators) = action else { return false }
        // A 206 for a partial without a validator starts before the resume offset: its first
        // bytes are compared with the disk, not written.
        toCompare = response.status == 206 ? machine.resume.overlapBytes : 0
        if discard {
            downloader.emit(.restarted(reason: "server sent the whole file (HTTP 200) instead of the range asked for"))
        }
        do {
            return try begin(offset: offset, validators: validators, response: response)
        } catch {
            failure = error
            return false
        }
    }

    private func begin(
        offset: Int64, validators: ResumeStateMachine.Validators, response: TransportResponse
    )
        throws(HaulError) -> Bool
    {
        if place == nil, case .directory(let dir) = downloader.target {
            let name = SafeFileName.suggestedName(
                contentDisposition: response.headers["Content-Disposition"], url: downloader.url)
            let dest = dir + "/" + name
            let claimed = try downloader.store.claim(dest)
            place = claimed
            machine.resume = ResumeStateMachine(record: claimed.record, origin: downloader.url)
            if machine.resume.resumeOffset > 0 {
                // A partial of this URL exists under the suggested name: ask again with Range.
                askAgain = true
                self.action = nil
                return false
            }
        }
        guard let place else { return false }
        let destination = place.destination
        let vouched = Checksum.vouched(by: response.headers, status: response.status)
        if machine.resume.record == nil,
            let size = try place.fileInPlace(serverSize: offset == 0 ? validators.totalLength : nil)
        {
            hashing.vouched = vouched  // a file already there is checked against them too
            existingComplete = DownloadOutcome(path: destination, bytes: size, alreadyComplete: true)
            action = nil
            return false
        }
        let file = partial ?? place.makePartial()
        partial = file
        let previous = machine.resume.record
        try file.open(at: offset)
        startHashing(file, at: offset, vouched: vouched)
        machine.resume.accept(offset: offset, validators: validators, url: downloader.url, finalURL: response.url)
        downloader.reporter.begin(at: offset, total: machine.resume.record?.totalLength)
        if let previous, !previous.claimsTheSame(as: machine.resume.record) || previous.partial != file.boundIdentity {
            // The record on disk describes other bytes now (a restart from zero, or another
            // version): replace it before writing anything.
            try checkpoint()
        } else if previous != nil {
            // A resume of the same version from where the record ends: the record stays true
            // while bytes are added after it, so no sync holds up the transfer's thread here.
            machine.checkpointed(at: monotonicSeconds())
        } else if let record = stampedRecord(file) {
            // A fresh download's record is written before its first byte: a partial without one
            // is never trusted (a kill before an asynchronous first record would leave a partial
            // the next run refuses). It claims no bytes, so nothing is synced: a small write here.
            try file.checkpoint(record, syncingData: false)
            machine.checkpointed(at: monotonicSeconds())
        }
        downloader.emit(
            .started(
                status: response.status, url: response.url, destination: destination, offset: offset,
                totalBytes: validators.totalLength))
        return true
    }

    /// Sets up the hashes for bytes written from `offset` on: fresh from 0, the last attempt's
    /// where they reached it, else the record's brought up to it from the partial.
    private func startHashing(_ file: PartialFile, at offset: Int64, vouched: [Checksum]) {
        hashing.vouched = offset == 0 ? vouched : hashing.vouched + vouched.filter { !hashing.vouched.contains($0) }
        let needed = downloader.options.expected(vouched: hashing.vouched).map(\.algorithm)
        if needed.isEmpty {
            hashing.hashes = nil
        } else if offset == 0 {
            hashing.hashes = MultiHasher(needed)
        } else if hashing.hashes?.covers(exactly: offset) != true {
            var restored = MultiHasher(needed, resuming: file.storedRecord?.hashes ?? [], upTo: offset)
            let caughtUp =
                offset - restored.hashedFrom <= Self.catchUpLimit && (try? file.hash(&restored, upTo: offset)) != nil
            hashing.hashes = caughtUp && restored.covers(exactly: offset) ? restored : nil
        }
    }

    func transportDidReceive(body: UnsafeRawBufferPointer) -> BodyDisposition {
        guard let partial else { return .abort }
        var body = body
        if toCompare > 0 {
            let n = Int(min(Int64(body.count), toCompare))
            let same: Bool
            do {
                same = try partial.holds(
                    UnsafeRawBufferPointer(rebasing: body[0..<n]), at: partial.writtenBytes - toCompare)
            } catch {
                failure = error
                return .abort
            }
            guard same else {
                action = .restart(
                    reason:
                        "file changed on the server: the bytes before \(partial.writtenBytes) differ from the partial"
                        + " (the server sends no ETag or Last-Modified to ask with)")
                return .abort
            }
            toCompare -= Int64(n)
            body = UnsafeRawBufferPointer(rebasing: body[n...])
            if body.isEmpty { return .proceed }
        }
        do {
            try partial.write(body)
        } catch {
            failure = error
            return .abort
        }
        receivedBytes += Int64(body.count)
        hashing.hashes?.update(body, at: partial.writtenBytes - Int64(body.count))
        let now = monotonicSeconds()
        if let error = inFlight.withLock({ $0.error }) {
            failure = error
            return .abort
        }
        switch machine.wrote(total: partial.writtenBytes, at: now) {
        case .checkpoint: checkpointInBackground(partial)
        case .note: partial.note(written: [ByteRange(0, partial.writtenBytes)])
        case .nothing: break
        }
        downloader.reporter.update(partial.writtenBytes, total: machine.resume.record?.totalLength, at: now)
        return .proceed
    }

    private func checkpoint() throws(HaulError) {
        guard let partial, let record = stampedRecord(partial) else { return }
        try partial.checkpoint(record)
        machine.checkpointed(at: monotonicSeconds())
    }

    /// The record claiming what `partial` holds so far, stamped with the time.
    private func stampedRecord(_ partial: PartialFile) -> ResumeRecord? {
        machine.resume.advance(to: partial.writtenBytes)
        guard var record = machine.resume.record else { return nil }
        record.updatedAt = Date().formatted(.iso8601)
        if let hashes = hashing.hashes, hashes.covers(exactly: partial.writtenBytes) {
            record.hashes = hashes.states
        } else if hashing.hashes != nil {
            // Past the bytes written (a tail given back on a full disk): the last record's
            // states that still lie within them.
            let kept = partial.storedRecord?.hashes?.filter { $0.offset <= partial.writtenBytes }
            record.hashes = kept?.isEmpty == false ? kept : nil
        }
        return record
    }

    /// Starts a checkpoint of what is written so far on a Dispatch worker, unless one runs. The
    /// record claims the bytes written before the fsync starts, so it never claims more than
    /// the disk holds; the transfer goes on writing meanwhile.
    private func checkpointInBackground(_ partial: PartialFile, syncingData: Bool = true) {
        machine.checkpointed(at: monotonicSeconds())
        guard let record = stampedRecord(partial) else { return }
        let syncingData = syncingData || record.ranges.contains { $0.count > 0 }
        let done = OneShot<Void>()
        guard
            inFlight.withLock({ s -> Bool in
                guard s.done == nil else { return false }
                s.done = done
                return true
            })
        else { return }
        Sys.blockingQueue().async { [inFlight] in
            var failed: HaulError?
            do throws(HaulError) { try partial.checkpoint(record, syncingData: syncingData) } catch { failed = error }
            inFlight.withLock { s in
                s.done = nil
                if let failed, s.error == nil { s.error = failed }
            }
            done.fulfill(())
        }
    }

    /// Waits for the checkpoint in flight, if any; a failed one becomes the attempt's failure.
    func checkpointsSettled() async {
        if let done = inFlight.withLock({ $0.done }) { await done.value() }
        if failure == nil, let error = inFlight.withLock({ $0.error }) { failure = error }
    }

    /// Best effort: make the record claim what was written before a failure or cancel.
    /// Checkpoints what the attempt wrote before it failed with `error`, and closes the partial.
    /// Not after a checksum mismatch: that deletes the partial and its record (a checkpoint
    /// would write the record again, beside no partial).
    func finishWithCheckpoint(after error: HaulError) {
        guard let partial, machine.resume.record != nil, error.code != .checksumMismatch else { return }
        if failure?.code == .diskFull {
            // The record needs a block of its own: give back the partial's last bytes so that
            // the checkpoint can claim the rest instead of failing for want of space.
            partial.releaseTail(PartialFile.diskFullHeadroom)
        }
        try? checkpoint()
        partial.close()
    }
}
