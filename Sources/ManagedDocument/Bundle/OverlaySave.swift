import Crypto
import Foundation
import SystemPackage

/// The store of a save made from a writable working copy (FORMAT.md 16.2): the store an ``OverlayStore`` composes
/// from its base bundle and its overlay, read as SQLite sees it, never from a file of its own.
struct OverlaySaveInput {
    /// The composed store.
    let overlay: OverlayStore
    /// The bundle the overlay's base reads (through its reader's descriptor), when the save may copy its unchanged
    /// restart segments unread; `nil` when it may not, with the reason in ``reason``.
    let base: BundleReader?
    /// Why the save reads the whole store, when ``base`` is `nil`.
    let reason: String
}

extension BundleWriter {
    /// Adds the store an overlay composes: its restart segments that no page of the overlay touches copied from the
    /// base bundle unread, with their recorded CRC-32s and digests (``SegmentReuse/planOverlay(_:base:maximumDigests:)``),
    /// the others read through the overlay, deflated and hashed; or all of it read, deflated and hashed.
    static func addOverlayStore(_ input: OverlaySaveInput, compressed: Bool, to writer: ArchiveWriter,
                                options: WritingOptions)
    throws -> (EntryDigest, DocumentMetadata.SegmentDigests?, SegmentReuse?, SaveReport) {
        let store = input.overlay
        let size = store.logicalSize
        var reason = input.reason
        var plan: SegmentReuse?
        if !compressed {
            reason = "the store is stored, not deflated: there is nothing to save by reusing it"
        } else if size < ArchiveWriter.parallelDeflateThreshold {
            reason = "a store under 1 MiB is deflated whole (it has no restart segments to reuse)"
        } else if let base = input.base {
            switch try SegmentReuse.planOverlay(store, base: base, maximumDigests: options.maximumSegmentDigests) {
            case .reuse(let made): plan = made
            case .full(let why): reason = why
            }
        }
        var position: Int64 = 0
        // > The overlay's bytes are asked for a window ahead of the reads (the base reads ahead on its own).
        let window: Int64 = 32 << 20
        var advisedTo: Int64 = 0
        let read: (UnsafeMutableRawBufferPointer) throws -> Int = { buffer in
            let wanted = Int(min(Int64(buffer.count), max(0, size - position)))
            guard wanted > 0, let address = buffer.baseAddress else { return 0 }
            if position + window / 2 >= advisedTo, advisedTo < size {
                let end = min(size, max(advisedTo, position) + window)
                store.readAhead(max(advisedTo, position)..<end)
                advisedTo = end
            }
            let count = try store.read(into: address, count: wanted, at: position)
            position += Int64(count)
            return count
        }
        if let plan {
            let reuse = ParallelDeflater.Reuse(crc32: { try plan.reusedCRC($0) }, skip: { position += $0 },
                                               source: { plan.source($0) },
                                               compressedCRC32C: { plan.recordedCompressedCRC($0) })
            let digest = try addEntry(named: BundleLayout.store, size: size, deflate: true, to: writer,
                                      segmentDigests: nil, hashingWhole: false, reuse: reuse, read: read).0
            let (digests, reused) = try plan.finish()
            let report = SaveReport(mode: .incremental, segments: reused.count,
                                    reusedSegments: reused.lazy.filter { $0 }.count, reason: nil)
            return (digest, digests, plan, report)
        }
        let sample = try store.bytes(at: 0, count: Int(min(size, 64 << 10)))
        let deflate = compressed && sample.withUnsafeBytes { isWorthDeflating($0) }
        let (digest, segments) = try addEntry(named: BundleLayout.store, size: size, deflate: deflate, to: writer,
                                              segmentDigests: options.maximumSegmentDigests, hashingWhole: false,
                                              reuse: nil, read: read)
        let report = SaveReport(mode: .full, segments: digest.restarts?.offsets.count ?? 0, reusedSegments: 0,
                                reason: reason)
        return (digest, segments, nil, report)
    }
}

extension SegmentReuse {
    /// Plans the save of the store `store` composes over `base` (FORMAT.md 13.1, 16.2): a digest segment of the base
    /// whose bytes no page of the overlay touches, that lies below the base limit and whose restart segments end
    /// where they ended (16.1, item 4) is copied unread, each restart segment with its recorded CRC-32 and the
    /// digest segment with its recorded digest; every other one is read through the overlay and hashed, on a thread
    /// of its own, ahead of the writer. Says why the save must be full instead: no restart index that names the
    /// base's stream, no CRC-32s or CRC-32Cs of its segments (a version 1 base, an earlier release's), a digest
    /// interval that is not a multiple of the restart interval, a size class that changed, a base file changed or
    /// replaced since it was opened, most of the store changed.
    static func planOverlay(_ store: OverlayStore, base: BundleReader, maximumDigests: Int) throws -> Decision {
        let loan = SegmentLoan(base: base.openedIdentity)
        let terms: SegmentLoan.Terms
        switch loan.terms(from: base) {
        case .lends(let lent): terms = lent
        case .refuses(let reason): return .full(reason)
        }
        guard loan.isKept(by: base), FileIdentity(at: base.path) == base.openedIdentity else {
            return .full("the bundle on disk is not the one this document last read or saved (replaced, or changed since)")
        }
        let size = store.logicalSize
        let restartInterval = Int64(ParallelDeflater.restartInterval(forSize: size))
        let recorded = terms.digests
        guard size > 0, restartInterval == terms.restarts.interval, recorded.interval % restartInterval == 0,
              BundleWriter.segmentInterval(forSize: size, maximumDigests: maximumDigests) == recorded.interval else {
            return .full("the store's restart or digest interval changed with its size")
        }
        let untouched = untouchedDigestSegments(store, size: size, baseSize: base.metadata.store.size,
                                                restartInterval: restartInterval, recorded: recorded,
                                                oldCount: terms.restarts.offsets.count)
        guard untouched.lazy.filter({ $0 }).count * 2 >= untouched.count else {
            return .full("most of the store changed since the bundle was written")
        }
        let hashing = WaitableState(Hashing())
        let plan = SegmentReuse(previous: base, loan: loan, entry: terms.entry, restarts: terms.restarts,
                                restartInterval: restartInterval, size: size, hashing: hashing)
        let restarts = terms.restarts, count = plan.count
        Thread.detachNewThread {
            defer { hashing.withLock { $0.isEnded = true } }
            do {
                try hashOverlay(store, size: size, restartInterval: restartInterval, recorded: recorded,
                                restarts: restarts, untouched: untouched, count: count,
                                into: hashing)
            } catch {
                hashing.withLock {
                    $0.failure = error as? DocumentError
                        ?? DocumentError(.ioFailure, path: store.folder, reason: "cannot read the store (\(DocumentError.summary(of: error)))")
                }
            }
        }
        return .reuse(plan)
    }

    /// For each digest segment of the new store (at the recorded interval): whether it may be copied unread. None of
    /// its bytes is in the overlay, it lies below the base limit, it is one the base has, and each of its restart
    /// segments is the base's last only where it is the new store's last, at the same length.
    private static func untouchedDigestSegments(_ store: OverlayStore, size: Int64, baseSize: Int64,
                                                restartInterval: Int64, recorded: DocumentMetadata.SegmentDigests,
                                                oldCount: Int) -> [Bool] {
        let interval = recorded.interval
        let digestCount = Int((size + interval - 1) / interval)
        let count = Int((size + restartInterval - 1) / restartInterval)
        var untouched = [Bool](repeating: true, count: digestCount)
        store.presentPages.forEach { page in
            // > A page is never larger than a digest segment (64 KiB at most, segments 128 KiB at least).
            let start = page * Int64(store.pageSize), end = start + Int64(store.pageSize)
            for digest in Int(start / interval)...Int((end - 1) / interval) where digest < digestCount {
                untouched[digest] = false
            }
        }
        let limit = store.baseLimit
        let perDigest = Int(interval / restartInterval)
        let recordedCount = recorded.count
        for digest in 0..<digestCount where untouched[digest] {
            let end = min(Int64(digest + 1) * interval, size)
            var isReusable = digest < recordedCount && end <= limit
            for index in (digest * perDigest)..<min(count, (digest + 1) * perDigest) where isReusable {
                // > The old stream's last segment carries the final block: reused only as the new one's last, whole.
                isReusable = index < oldCount && (index == count - 1) == (index == oldCount - 1)
                    && (index != count - 1 || size == baseSize)
            }
            untouched[digest] = isReusable
        }
        return untouched
    }

    /// The hashing thread of an overlay save: publishes, digest segment by digest segment, the recorded CRC-32s of
    /// those copied unread, and the CRC-32s and digest of the others, read through the overlay.
    private static func hashOverlay(_ store: OverlayStore, size: Int64, restartInterval: Int64,
                                    recorded: DocumentMetadata.SegmentDigests, restarts: DeflateRestarts,
                                    untouched: [Bool], count: Int, into hashing: WaitableState<Hashing>) throws {
        let interval = recorded.interval
        let perDigest = Int(interval / restartInterval)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(restartInterval), alignment: 64)
        defer { buffer.deallocate() }
        // > `recorded.digests` splits the recorded string at every call: split once.
        let recordedDigests = recorded.digests
        var digests: [String] = []
        for digest in untouched.indices {
            if hashing.withLock({ $0.isCancelled }) { return }
            let segments = (digest * perDigest)..<min(count, (digest + 1) * perDigest)
            var batch: [(crc32: UInt32, reused: Bool)] = []
            if untouched[digest] {
                for index in segments {
                    guard let crc = restarts.recordedCRC(ofSegment: index) else {
                        throw DocumentError(.invalidMetadata, path: store.base.origin, entry: BundleLayout.store,
                                            reason: "the restart index records no CRC-32 for segment \(index)")
                    }
                    batch.append((crc, true))
                }
                digests.append(recordedDigests[digest])
            } else {
                var hasher = SHA256()
                for index in segments {
                    let start = Int64(index) * restartInterval
                    let length = Int(min(restartInterval, size - start))
                    let read = try store.read(into: buffer.baseAddress!, count: length, at: start)
                    guard read == length else {
                        throw DocumentError(.sizeMismatch, path: store.folder,
                                            reason: "the store changed size while it was being saved; nothing was replaced")
                    }
                    let bytes = UnsafeRawBufferPointer(rebasing: buffer[..<length])
                    var crc = CRC32()
                    crc.update(bytes)
                    hasher.update(bufferPointer: bytes)
                    batch.append((crc.value, false))
                }
                digests.append(hasher.finalize().hexString)
            }
            hashing.withLock { $0.decided += batch }
        }
        hashing.withLock { $0.digests = DocumentMetadata.SegmentDigests(interval: interval, digests: digests) }
    }
}
