#if canImport(Glibc)
import Glibc
#endif
import Crypto
import Foundation
import SystemPackage
@_spi(Core) import MDZCore

/// How a save wrote the store: whole, or reusing the compressed segments of the bundle it replaced (FORMAT.md 16.1).
public struct SaveReport: Sendable, Equatable, CustomStringConvertible {
    /// Whether segments were reused.
    public enum Mode: String, Sendable, Equatable, Codable {
        /// Every segment deflated from the working copy.
        case full
        /// Unchanged segments copied from the replaced bundle, changed ones deflated.
        case incremental
    }

    /// Full or incremental.
    public var mode: Mode
    /// The restart segments of the store written (`store.deflateRestarts`; 0 when the store was stored).
    public var segments: Int
    /// Those whose compressed bytes were copied from the replaced bundle.
    public var reusedSegments: Int
    /// Why the save was full, when it was: no bundle this process verified, the bundle changed on disk, an older
    /// writer's bundle without segment digests, most of the store changed, a stored store.
    public var reason: String?

    /// Those deflated from the working copy.
    public var deflatedSegments: Int { segments - reusedSegments }

    /// One line: `incremental: 3 of 2048 segments deflated, 2045 reused` or `full (reason)`.
    public var description: String {
        switch mode {
        case .incremental:
            return "incremental: \(deflatedSegments) of \(segments) segments deflated, \(reusedSegments) reused"
        case .full:
            return "full" + (reason.map { " (\($0))" } ?? "")
        }
    }
}

/// The restart segments of a store that a save copies, compressed, from the bundle it replaces (FORMAT.md 16.1).
///
/// A segment is reused only when it is proven unchanged: the replaced bundle lends its segments (``SegmentLoan``:
/// it is the file this process verified, every segment of it inflated and checked against its digest when it was
/// extracted or written, unchanged since), the new store's bytes over each of its digest segments hash to the digest recorded
/// there, and a segment that ends the old stream is reused only to end the new one (the last segment carries the
/// final block). Everything else is deflated again.
///
/// The proof comes from one read of the working copy on a thread of its own (its segment digests and CRC-32s; a
/// version 2 store has no whole-store SHA-256 to compute), running ahead of the writer: ``reusedCRC(_:)`` waits until the segment asked for is
/// decided, so the copying of the first segments overlaps the hashing of the last.
final class SegmentReuse {
    /// The bundle being replaced, read through the descriptor its reader opened.
    let previous: BundleReader
    private let loan: SegmentLoan
    private let entry: BundleEntry
    /// The replaced store's restart index.
    private let restarts: DeflateRestarts
    let restartInterval: Int64
    /// The new store's size and its number of restart segments.
    let size: Int64
    let count: Int
    private let hashing: WaitableState<Hashing>
    /// Where compressed bytes pass through while they are copied or compared.
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 64)

    /// What the hashing thread publishes, segment by segment, and what it ends with; ``reusedCRC(_:)`` waits for
    /// a segment's decision, ``finish()`` for the end.
    struct Hashing {
        /// Per restart segment decided so far: its CRC-32, and whether it is reused.
        var decided: [(crc32: UInt32, reused: Bool)] = []
        var digests: DocumentMetadata.SegmentDigests?
        var failure: DocumentError?
        var isCancelled = false
        /// Whether the thread has ended, whatever the outcome.
        var isEnded = false
    }

    /// Reuse, or why not.
    enum Decision {
        case reuse(SegmentReuse)
        case full(String)
    }

    init(previous: BundleReader, loan: SegmentLoan, entry: BundleEntry, restarts: DeflateRestarts,
                 restartInterval: Int64, size: Int64, hashing: WaitableState<Hashing>) {
        self.previous = previous
        self.loan = loan
        self.entry = entry
        self.restarts = restarts
        self.restartInterval = restartInterval
        self.size = size
        self.count = Int((size + restartInterval - 1) / restartInterval)
        self.hashing = hashing
    }

    deinit {
        hashing.withLock { $0.isCancelled = true }
        hashing.wait { $0.isEnded ? () : nil }  // the thread reads the working copy through a descriptor it closes
        buffer.deallocate()
    }

    /// Starts planning the reuse of `previous`'s store segments for the store `store` reads, or says why the save
    /// must be full: the one planner of every incremental save (FORMAT.md 13.1, 16.1, 16.2).
    ///
    /// A digest segment of the new store (at the interval `previous` records) is reused when its bytes are the
    /// recorded ones: proven by hashing them, or, for a layered store, known without reading them when no written
    /// page touches it, it lies below the base limit and `previous` is the overlay's base, still the file at its
    /// path (its recorded CRC-32s and digest are then the new ones). A restart segment that ends either stream is
    /// reused only where it ends both, at the same length (the last segment carries the final block). Says why
    /// the save must be full instead: no restart index that names the replaced stream, no CRC-32s or CRC-32Cs of
    /// its segments (a version 1 bundle, an earlier release's), a restart or digest interval that changed with the
    /// size, a replaced bundle changed or replaced since, most of a layered store written.
    ///
    /// - Parameters:
    ///   - loan: the replaced bundle's loan, made when this process last verified it (or opened it as a base).
    ///   - maximumDigests: the writer's cap on segment digests (the new store's digest interval, format version 2).
    ///   - formatVersion: the format written, which sets the new store's restart and digest intervals.
    static func plan(_ store: any StoreReader, previous: BundleReader, loan: SegmentLoan,
                     maximumDigests: Int, formatVersion: Int) throws -> Decision {
        let terms: SegmentLoan.Terms
        switch loan.terms(from: previous) {
        case .lends(let lent): terms = lent
        case .refuses(let reason): return .full(reason)
        }
        let (entry, restarts, recorded) = (terms.entry, terms.restarts, terms.digests)
        let size = store.size
        let interval = Int64(ParallelDeflater.restartInterval(forSize: size, growing: formatVersion < 3))
        guard size > 0, interval == restarts.interval, recorded.interval % interval == 0 else {
            return .full("the store's restart interval changed with its size")
        }
        let newInterval = BundleWriter.segmentInterval(forSize: size, maximumDigests: maximumDigests,
                                                       formatVersion: formatVersion)
        // > Version 3 records one digest a restart segment (FORMAT.md 13.2): a store under 1 MiB, deflated whole
        // > with one digest, has no restart segments to reuse.
        guard formatVersion < 3 || newInterval == interval else {
            return .full("the store is under 1 MiB, deflated whole")
        }
        let layout = Layout(size: size, baseSize: previous.metadata.store.size, restartInterval: interval,
                            digestInterval: recorded.interval, oldCount: restarts.offsets.count)
        var known: [Bool]?
        if let layered = store as? any LayeredStore {
            guard loan.isKept(by: previous), FileIdentity(at: previous.path) == previous.openedIdentity else {
                return .full("the bundle on disk is not the one this document last read or saved (replaced, or changed since)")
            }
            guard newInterval == recorded.interval else {
                return .full("the store's restart or digest interval changed with its size")
            }
            let untouched = layout.untouched(layered, recordedCount: recorded.count)
            guard untouched.lazy.filter({ $0 }).count * 2 >= untouched.count else {
                return .full("most of the store changed since the bundle was written")
            }
            known = untouched
        }
        // > Both files are read through once, in order: the kernel reads them ahead while they are hashed and copied.
        store.adviseSequential()
        _ = posix_fadvise(previous.descriptor.rawValue, off_t(entry.dataOffset), off_t(entry.compressedSize),
                          POSIX_FADV_WILLNEED)
        let hashing = WaitableState(Hashing())
        let plan = SegmentReuse(previous: previous, loan: loan, entry: entry, restarts: restarts,
                                restartInterval: interval, size: size, hashing: hashing)
        Thread.detachNewThread { [known] in
            defer { hashing.withLock { $0.isEnded = true } }
            do {
                try hash(store, layout: layout, known: known, recorded: recorded, restarts: restarts,
                         newInterval: newInterval, into: hashing)
            } catch {
                hashing.withLock {
                    $0.failure = error as? DocumentError
                        ?? DocumentError(.ioFailure, path: store.origin, reason: "cannot read the store (\(DocumentError.summary(of: error)))")
                }
            }
        }
        return .reuse(plan)
    }

    /// The new store's segments over the replaced one's: sizes, intervals, counts.
    struct Layout {
        let size: Int64
        let baseSize: Int64
        let restartInterval: Int64
        /// The interval of the replaced store's digests, at which the new store is compared with it.
        let digestInterval: Int64
        /// The replaced stream's restart segments.
        let oldCount: Int
        var count: Int { Int((size + restartInterval - 1) / restartInterval) }
        var digestCount: Int { Int((size + digestInterval - 1) / digestInterval) }
        var perDigest: Int { Int(digestInterval / restartInterval) }

        /// The restart segments of digest segment `digest`.
        func segments(of digest: Int) -> Range<Int> {
            (digest * perDigest)..<min(count, (digest + 1) * perDigest)
        }

        /// Whether restart segment `index`, unchanged, may be copied: it is one the old stream has, and it ends the
        /// new stream only where it ended the old one, at the same length.
        func endsRight(_ index: Int) -> Bool {
            index < oldCount && (index == count - 1) == (index == oldCount - 1)
                && (index != count - 1 || size == baseSize)
        }

        /// For each digest segment of a layered store: whether it is the base's unchanged (no written page touches
        /// it, it lies below the base limit, the base records its digest) and each of its restart segments ends
        /// right; such a segment is copied unread.
        func untouched(_ store: any LayeredStore, recordedCount: Int) -> [Bool] {
            var untouched = [Bool](repeating: true, count: digestCount)
            let pageSize = Int64(store.pageSize)
            store.presentPages.forEach { page in
                // > A page is never larger than a digest segment (64 KiB at most, segments 128 KiB at least).
                let start = page * pageSize, end = start + pageSize
                for digest in Int(start / digestInterval)...Int((end - 1) / digestInterval) where digest < digestCount {
                    untouched[digest] = false
                }
            }
            let limit = store.baseLimit
            for digest in 0..<digestCount where untouched[digest] {
                let end = min(Int64(digest + 1) * digestInterval, size)
                untouched[digest] = digest < recordedCount && end <= limit && segments(of: digest).allSatisfy(endsRight)
            }
            return untouched
        }
    }

    /// The hashing thread: for each digest segment in order, the recorded CRC-32s and digest of one `known` to be
    /// unchanged (not read), or the CRC-32s and digest of its bytes read from `store`, compared with the recorded
    /// digest; publishes each segment's decision as soon as its digest segment is done. The new store's digests
    /// are at `newInterval` (hashed alongside when it is not the recorded one).
    private static func hash(_ store: any StoreReader, layout: Layout, known: [Bool]?,
                             recorded: DocumentMetadata.SegmentDigests, restarts: DeflateRestarts,
                             newInterval: Int64, into hashing: WaitableState<Hashing>) throws {
        let size = layout.size, restartInterval = layout.restartInterval
        var newHasher = newInterval == layout.digestInterval ? nil : SegmentHasher(interval: newInterval)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(restartInterval), alignment: 64)
        defer { buffer.deallocate() }
        // > `recorded.digests` splits the recorded string at every call: split once.
        let recordedDigests = recorded.digests
        var digests: [String] = []
        for digest in 0..<layout.digestCount {
            if hashing.withLock({ $0.isCancelled }) { return }
            let segments = layout.segments(of: digest)
            var crcs: [UInt32] = []
            let isUnchanged: Bool
            if known?[digest] == true {
                for index in segments {
                    guard let crc = restarts.recordedCRC(ofSegment: index) else {
                        throw DocumentError(.invalidMetadata, path: store.origin, entry: BundleLayout.store,
                                            reason: "the restart index records no CRC-32 for segment \(index)")
                    }
                    crcs.append(crc)
                }
                digests.append(recordedDigests[digest])
                isUnchanged = true
            } else {
                var hasher = SHA256()
                for index in segments {
                    let start = Int64(index) * restartInterval
                    let length = Int(min(restartInterval, size - start))
                    let bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[..<length])
                    guard try store.read(into: bytes, at: start) == length else { throw changedSize(store) }
                    var crc = CRC32()
                    crc.update(UnsafeRawBufferPointer(bytes))
                    hasher.update(bufferPointer: UnsafeRawBufferPointer(bytes))
                    newHasher?.update(UnsafeRawBufferPointer(bytes))
                    crcs.append(crc.value)
                }
                digests.append(hasher.finalize().hexString)
                isUnchanged = digest < recordedDigests.count && recordedDigests[digest] == digests[digest]
            }
            let batch = zip(segments, crcs).map { ($1, isUnchanged && layout.endsRight($0)) }
            hashing.withLock { $0.decided += batch }
        }
        if try store.hasGrown() { throw changedSize(store) }
        let final = newHasher.map { hasher in var hasher = hasher; return hasher.finalize() } ?? digests
        hashing.withLock { $0.digests = DocumentMetadata.SegmentDigests(interval: newInterval, digests: final) }
    }

    /// The store changed size while it was hashed.
    private static func changedSize(_ store: any StoreReader) -> DocumentError {
        DocumentError(.sizeMismatch, path: store.origin,
                      reason: "the store changed size while it was being saved; nothing was replaced")
    }

    /// The CRC-32 of restart segment `index` when its compressed bytes are reused; `nil` when it is deflated.
    /// Called once for every segment, in order: it waits until the hashing thread has decided it.
    func reusedCRC(_ index: Int) throws -> UInt32? {
        guard index < count else {
            throw DocumentError(.sizeMismatch, path: previous.path, entry: BundleLayout.store,
                                reason: "the store grew while it was being saved; nothing was replaced")
        }
        return try hashing.wait { state -> UInt32?? in
            if let failure = state.failure { throw failure }
            guard index < state.decided.count else {
                guard state.isEnded else { return nil }  // not decided yet
                throw notReadToItsEnd
            }
            return .some(state.decided[index].reused ? state.decided[index].crc32 : nil)
        }
    }

    /// Waits for the hashing thread to end; the store's segment digests, and which segments are reused.
    func finish() throws -> (digests: DocumentMetadata.SegmentDigests, reused: [Bool]) {
        try hashing.wait { state in
            guard state.isEnded else { return nil }
            if let failure = state.failure { throw failure }
            guard let digests = state.digests, state.decided.count == count else { throw notReadToItsEnd }
            return (digests, state.decided.map(\.reused))
        }
    }

    /// The hashing thread ended before it decided every segment, with no error of its own.
    private var notReadToItsEnd: DocumentError {
        DocumentError(.ioFailure, path: previous.path, reason: "the store was not read to its end")
    }

    /// Where restart segment `index` of the replaced store lies in the replaced bundle's file.
    private func previousRange(_ index: Int) -> Range<Int64> {
        restarts.fileRange(ofSegment: index, dataOffset: entry.dataOffset, compressedSize: entry.compressedSize)
    }

    /// The CRC-32C the replaced bundle records for restart segment `index`'s compressed bytes (the loan's terms
    /// require one for every segment); ``verify(_:)`` checks the copied bytes against it.
    func recordedCompressedCRC(_ index: Int) -> UInt32 {
        restarts.recordedCompressedCRC(ofSegment: index) ?? 0
    }

    /// Where segment `index`'s compressed bytes lie in the replaced bundle (read through its reader's descriptor).
    func source(_ index: Int) -> (file: FileDescriptor, range: Range<Int64>, path: FilePath) {
        (previous.descriptor, previousRange(index), previous.path)
    }

    /// Checks the store of the bundle just written, in proportion to what changed: each digest segment whose
    /// restart segments were all reused is compared byte for byte with the replaced bundle's; every other one, and
    /// those that hold the last segment of either stream, is inflated, segment by segment (each must end where a
    /// segment ends, the last with the final block), and checked against its new digest. Every segment's
    /// compressed bytes are checked against their CRC-32C: a reused one's is the replaced bundle's record, so a
    /// segment damaged in the replaced bundle (never read since it was written) is named, and nothing replaced.
    /// The replaced bundle must still be the file this process verified.
    func verify(_ written: BundleReader) throws {
        let (digests, reused) = try finish()
        let path = written.path
        func damaged(_ reason: String) -> DocumentError {
            DocumentError(.checksumMismatch, path: path, entry: BundleLayout.store,
                          reason: "\(reason); the new bundle was not put in place")
        }
        guard let entry = written.entries.first(where: { $0.role == .store }), entry.size == UInt64(size),
              entry.isCompressed, case .used(_, identified: true) = written.restartIndex,
              let restarts = written.metadata.store.deflateRestarts, restarts.offsets.count == reused.count,
              written.metadata.store.segments == digests,
              written.metadata.store.digest == digests.storeDigest(size: size) else {
            throw damaged("the store entry written is not the one planned")
        }
        func range(_ index: Int) -> Range<Int64> {
            restarts.fileRange(ofSegment: index, dataOffset: entry.dataOffset, compressedSize: entry.compressedSize)
        }
        let perDigest = Int(digests.interval / restartInterval)
        let expected = digests.digests
        let compared = UnsafeMutableRawBufferPointer.allocate(byteCount: buffer.count, alignment: 64)
        defer { compared.deallocate() }
        var inflater: SegmentInflater?
        var output: UnsafeMutableRawBufferPointer?
        defer { output?.deallocate() }
        for digest in expected.indices {
            let segments = (digest * perDigest)..<min(reused.count, (digest + 1) * perDigest)
            // > Where either stream ends, what ends a segment matters (the final block): inflated, never only compared.
            let holdsAnEnd = segments.contains(reused.count - 1) || segments.contains(self.restarts.offsets.count - 1)
            if !holdsAnEnd && segments.allSatisfy({ reused[$0] }) {
                for index in segments {
                    guard let crc = try copiedCRC(index, at: range(index), in: written, using: compared) else {
                        throw damaged("reused segment \(index) differs from the replaced bundle's, or was not copied whole")
                    }
                    try checkCompressedCRC(of: index, crc, recorded: restarts, reused: reused[index], written: path)
                }
                continue
            }
            if inflater == nil {
                guard let made = SegmentInflater() else {
                    throw DocumentError(.ioFailure, path: path, reason: "zlib could not allocate memory to check the store")
                }
                inflater = made
                output = .allocate(byteCount: Int(restartInterval), alignment: 64)
            }
            var hasher = SHA256()
            for index in segments {
                let source = range(index)
                let length = Int(min(restartInterval, size - Int64(index) * restartInterval))
                guard source.count <= ParallelInflater.compressedBound(forLength: Int64(length)) else {
                    throw damaged("segment \(index) is larger than deflate ever makes it")
                }
                let input = try FileSystem.read(written.descriptor, at: source.lowerBound, count: source.count, path: path)
                guard input.count == source.count else { throw damaged("the file ends inside segment \(index)") }
                try checkCompressedCRC(of: index, input.withUnsafeBytes { CRC32C.of($0) }, recorded: restarts,
                                       reused: reused[index], written: path)
                let result = input.withUnsafeBytes {
                    inflater!.inflate($0, into: output!, isLast: index == reused.count - 1)
                }
                guard case .success(let produced) = result, produced == length else {
                    throw damaged("segment \(index) does not inflate to its \(length) bytes")
                }
                let bytes = UnsafeRawBufferPointer(rebasing: output![..<produced])
                var crc = CRC32()
                crc.update(bytes)
                guard restarts.recordedCRC(ofSegment: index) == crc.value else {
                    throw damaged("segment \(index) does not match the CRC-32 its restart index records")
                }
                hasher.update(bufferPointer: bytes)
            }
            guard hasher.finalize().hexString == expected[digest] else {
                throw damaged("segment digest \(digest) does not match the working copy")
            }
        }
        try checkPreviousUnchanged()
    }

    /// Checks restart segment `index`'s compressed bytes' CRC-32C (`crc`) against the one the new index records
    /// (`recorded`): a reused segment that differs is the replaced bundle's damage, named; any other, the new one's.
    private func checkCompressedCRC(of index: Int, _ crc: UInt32, recorded: DeflateRestarts, reused: Bool,
                                    written: FilePath) throws {
        guard recorded.recordedCompressedCRC(ofSegment: index) != crc else { return }
        guard reused else {
            throw DocumentError(.checksumMismatch, path: written, entry: BundleLayout.store,
                                reason: "segment \(index) does not match the CRC-32C its restart index records; the new bundle was not put in place")
        }
        throw DocumentError(.checksumMismatch, path: previous.path, entry: BundleLayout.store,
                            reason: "restart segment \(index) of the bundle is damaged: its compressed bytes do not match the CRC-32C \(RecordNames(formatVersion: previous.metadata.formatVersion).compressedCRC32Cs) records; the bundle was not replaced and is as it was, and the changes are still in the open document; restore the bundle from a backup, or save the document elsewhere")
    }

    /// The CRC-32C of restart segment `index`'s compressed bytes, written at `new` in `written`, when they are the
    /// replaced bundle's bytes of that segment, byte for byte; `nil` when they are not (`compared` is scratch space
    /// as large as the copy buffer).
    private func copiedCRC(_ index: Int, at new: Range<Int64>, in written: BundleReader,
                           using compared: UnsafeMutableRawBufferPointer) throws -> UInt32? {
        let old = previousRange(index)
        guard new.count == old.count else { return nil }
        var crc = CRC32C()
        var offset: Int64 = 0
        while offset < Int64(new.count) {
            let wanted = Int(min(Int64(compared.count), Int64(new.count) - offset))
            let a = UnsafeMutableRawBufferPointer(rebasing: buffer[..<wanted])
            let b = UnsafeMutableRawBufferPointer(rebasing: compared[..<wanted])
            guard try FileSystem.read(written.descriptor, at: new.lowerBound + offset, into: a, path: written.path) == wanted,
                  try FileSystem.read(previous.descriptor, at: old.lowerBound + offset, into: b,
                                      path: previous.path) == wanted,
                  memcmp(a.baseAddress!, b.baseAddress!, wanted) == 0 else { return nil }
            crc.update(UnsafeRawBufferPointer(a))
            offset += Int64(wanted)
        }
        return crc.value
    }

    /// Refuses to go on when the replaced bundle is no longer the file this process verified (changed in place while
    /// its segments were copied).
    func checkPreviousUnchanged() throws {
        guard loan.isKept(by: previous) else {
            throw DocumentError(.ioFailure, path: previous.path,
                                reason: "the bundle changed on disk while it was being saved over; the new bundle was not put in place, save again")
        }
    }
}

/// The CRC-32 of a stream's bytes segment by segment (as ``SegmentHasher`` hashes them).
struct SegmentCRCs {
    private var cutter: SegmentCutter
    private var crc = CRC32()
    private var values: [UInt32] = []

    init(interval: Int64) { cutter = SegmentCutter(interval: interval) }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        cutter.cut(bytes, part: { crc.update($0) }, end: {
            values.append(crc.value)
            crc = CRC32()
        })
    }

    /// The CRC-32 of every complete segment so far.
    var completed: [UInt32] { values }

    /// The CRC-32 of every segment, in order (the last, partial one included).
    mutating func finalize() -> [UInt32] {
        if cutter.filled > 0 {
            values.append(crc.value)
            crc = CRC32()
            cutter = SegmentCutter(interval: cutter.interval)
        }
        return values
    }
}
