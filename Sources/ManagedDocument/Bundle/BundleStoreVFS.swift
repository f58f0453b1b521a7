#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import GRDB
import GRDBSQLite  // sqlite3.h's types are attributed to the first module that includes it: GRDB's
import Crypto
import Dispatch
import Foundation
import Synchronization
import SystemPackage

/// The bytes of a bundle's store, served segment by segment from the bundle itself (FORMAT.md 11.4): a stored store
/// by offset, a deflated one by inflating only the restart segment that holds the bytes asked for. Every segment is
/// checked against its SHA-256 (`store.segments`) before any of its bytes are handed out; a bounded cache keeps the
/// last segments used. When reads go forward segment after segment (a scan), the next segments are read, inflated
/// and checked ahead on a second thread (at most ``readAhead`` of them in flight besides the cache), so the scan's
/// inflating and hashing overlap SQLite's work.
///
/// Reads the descriptor its ``BundleReader`` opened, for its whole life: a bundle replaced on disk meanwhile is not
/// seen.
final class SegmentedStore: Sendable {
    let reader: BundleReader
    let size: Int64
    let interval: Int64
    private let digests: [String]
    private let dataOffset: UInt64
    /// The compressed offset of each restart segment, for a deflated store; `nil` for a stored one.
    private let offsets: [Int64]?
    /// Restart segments in one digest's segment (1 for a stored store).
    private let restartsPerSegment: Int
    private let compressedSize: Int64
    /// Whether the store is served as one segment checked against `store.sha256` (``servesWhole(_:)``).
    private let isWhole: Bool
    private let capacity: Int
    private let state: Mutex<State>

    /// Segments read ahead at most, beyond the one asked for.
    let readAhead: Int
    private let prefetcher = DispatchQueue(label: "ManagedDocument.readAhead", attributes: .concurrent)

    private struct State {
        var cache: [Int: [UInt8]] = [:]
        var recent: [Int] = []  // least recently used first
        /// Segments being loaded (by a read or ahead of one), with the semaphore signalled when they are done.
        var loading: [Int: DispatchSemaphore] = [:]
        /// The segment the last read asked for: the next one asked for makes the reads sequential.
        var lastAsked = -2
        var failure: DocumentError?
        var peakCachedBytes = 0
        var segmentsLoaded = 0
    }

    /// Why a bundle's store cannot be served this way (it is then extracted), or `nil` when it can.
    ///
    /// Reading in place holds whole segments in memory, so a bundle whose segments exceed the reader's
    /// ``ReadingLimits/maxRestartSegmentSize`` or ``ReadingLimits/maxDigestSegmentSize`` (or 4 GiB, beyond the
    /// codecs' 32-bit counts) is not served: the reason names the limit, and the caller extracts the store, which
    /// streams in bounded buffers whatever the bundle declares.
    static func unavailableReason(_ reader: BundleReader) -> String? {
        guard let reason = segmentedReason(reader) else { return nil }
        return servesWhole(reader) ? nil : reason
    }

    /// Whether the store is served as one segment: the segment route is closed (a store written under 1 MiB has
    /// no restart index; a repacked one's is stale; an older writer's has no segment digests), but the whole store
    /// is small enough to hold (``ReadingLimits/maxRestartSegmentSize``, and deflate's bound on its compressed
    /// size). It is then read and inflated once, at its first read, and checked against `store.sha256`: nothing
    /// is written to disk.
    static func servesWhole(_ reader: BundleReader) -> Bool {
        guard segmentedReason(reader) != nil, let store = reader.entry(named: BundleLayout.store) else { return false }
        let size = reader.metadata.store.size
        let limit = min(reader.limits.maxRestartSegmentSize, reader.limits.maxDigestSegmentSize, UInt64(UInt32.max))
        return size >= 0 && UInt64(size) <= limit
            && Int64(clamping: store.compressedSize) <= ParallelDeflater.compressedBound(forSize: size)
    }

    /// Why the store cannot be served segment by segment, or `nil` when it can.
    private static func segmentedReason(_ reader: BundleReader) -> String? {
        guard let segments = reader.metadata.store.segments else {
            return "the bundle records no segment digests (an older or another writer)"
        }
        guard let store = reader.entry(named: BundleLayout.store) else { return "the bundle has no store" }
        // > The reader checked the interval (at least 64 KiB) and the store's size (0 … 2⁶³ − 1) when it opened.
        let size = reader.metadata.store.size
        if let excess = excess(min(segments.interval, size), limit: reader.limits.maxDigestSegmentSize,
                               named: "maxDigestSegmentSize") {
            return "its digest segments (\(bytes(segments.interval)) each, 'store.segments.interval') \(excess)"
        }
        guard store.isCompressed else { return nil }
        guard case .used(_, true) = reader.restartIndex, let restarts = reader.metadata.store.deflateRestarts else {
            return "the deflated store has no restart index that describes its stream (\(reader.restartIndex))"
        }
        guard restarts.interval > 0, segments.interval % restarts.interval == 0 else {
            return "its segment digests (every \(segments.interval) bytes) are not cut at its restart points (every \(restarts.interval) bytes)"
        }
        if let excess = excess(min(restarts.interval, size), limit: reader.limits.maxRestartSegmentSize,
                               named: "maxRestartSegmentSize") {
            return "its restart segments (\(bytes(restarts.interval)) each, 'store.deflateRestarts.interval') \(excess)"
        }
        return nil
    }

    /// What is wrong with segments of `length` bytes (the declared interval, or the whole store when it is smaller)
    /// against a limit of ``ReadingLimits``, which can never admit more than 4 GiB − 1; `nil` when they fit.
    private static func excess(_ length: Int64, limit: UInt64, named name: String) -> String? {
        let bound = min(limit, UInt64(UInt32.max))
        guard UInt64(max(0, length)) > bound else { return nil }
        if bound < limit {
            return "are over 4 GiB, beyond what is ever read in place"
        }
        return "exceed the reader's limit on what reading in place holds in memory (ReadingLimits.\(name) = \(limit) bytes)"
    }

    private static func bytes(_ count: Int64) -> String {
        count >= 1 << 20 && count % (1 << 20) == 0 ? "\(count >> 20) MiB" : "\(count) bytes"
    }

    /// - Parameter cacheSize: bytes of segments kept, at least two segments' worth. The cache never holds more
    ///   than `max(cacheSize, 2 × segment)` bytes, and a segment is at most ``ReadingLimits/maxDigestSegmentSize``
    ///   (``unavailableReason(_:)``): besides it, at most ``readAhead`` + 1 segments are being read at once.
    init?(reader: BundleReader, cacheSize: Int) {
        guard let store = reader.entry(named: BundleLayout.store) else { return nil }
        if Self.segmentedReason(reader) != nil {
            guard Self.servesWhole(reader) else { return nil }
            // > One segment, the whole store: one restart segment (the whole stream, ending with its final block)
            // > for a deflated store, checked against the store's SHA-256.
            self.reader = reader
            size = reader.metadata.store.size
            interval = max(1, size)
            digests = [reader.metadata.store.sha256]
            dataOffset = store.dataOffset
            compressedSize = Int64(store.compressedSize)
            offsets = store.isCompressed ? [0] : nil
            restartsPerSegment = 1
            isWhole = true
            capacity = 2
            readAhead = 1
            state = Mutex(State())
            return
        }
        guard let segments = reader.metadata.store.segments else { return nil }
        self.reader = reader
        isWhole = false
        size = reader.metadata.store.size
        interval = segments.interval
        digests = segments.digests
        dataOffset = store.dataOffset
        compressedSize = Int64(store.compressedSize)  // below the file's size (the reader located it)
        offsets = store.isCompressed ? reader.metadata.store.deflateRestarts?.offsets : nil
        // > unavailableReason made sure a deflated store's restart interval divides the segments'.
        restartsPerSegment = Int(segments.interval / (offsets == nil ? segments.interval
            : reader.metadata.store.deflateRestarts!.interval))
        // > The segment as it is held (a store smaller than its interval is one segment of its own size): checked
        // > against the limits, so the cache's bound holds whatever the bundle declares.
        let segmentBytes = Int(max(1, min(segments.interval, size)))
        capacity = max(2, max(0, cacheSize) / segmentBytes)
        // > Up to three, and fewer than the cache holds: what is in flight never exceeds the cache's own size, so
        // > a store of 4 GiB and more (segments of 1 MiB and more) is still read ahead by more than one segment.
        readAhead = max(1, min(3, capacity - 1))
        state = Mutex(State())
    }

    /// The error that made a read fail (a damaged segment, an I/O error), for the caller to report.
    var failure: DocumentError? { state.withLock { $0.failure } }

    /// The most bytes of segments the cache held at once, and the segments read from the bundle so far.
    var cacheStatistics: (peakBytes: Int, segmentsLoaded: Int) {
        state.withLock { ($0.peakCachedBytes, $0.segmentsLoaded) }
    }

    /// Copies `count` bytes at `offset` into `buffer`; returns how many there were (fewer at the store's end).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        var copied = 0
        while copied < count, offset + Int64(copied) < size {
            let position = offset + Int64(copied)
            let index = Int(position / interval)
            let segment = try segmentBytes(index)
            let start = Int(position - Int64(index) * interval)
            let take = min(count - copied, segment.count - start)
            segment.withUnsafeBytes { bytes in
                (buffer + copied).copyMemory(from: bytes.baseAddress! + start, byteCount: take)
            }
            copied += take
        }
        return copied
    }

    /// Records the failure for the caller; the read that met it fails.
    func fail(_ error: DocumentError) {
        state.withLock { if $0.failure == nil { $0.failure = error } }
    }

    /// What a read finds for a segment.
    private enum Lookup {
        case cached([UInt8])
        case beingLoaded(DispatchSemaphore)
        case toLoad(DispatchSemaphore)
    }

    /// Segment `index`: from the cache, from a load under way (waited for), or loaded here (outside the lock).
    private func segmentBytes(_ index: Int) throws -> [UInt8] {
        while true {
            let lookup = state.withLock { state -> Lookup in
                if let bytes = state.cache[index] {
                    if let position = state.recent.firstIndex(of: index) { state.recent.remove(at: position) }
                    state.recent.append(index)
                    return .cached(bytes)
                }
                if let done = state.loading[index] { return .beingLoaded(done) }
                let done = DispatchSemaphore(value: 0)
                state.loading[index] = done
                return .toLoad(done)
            }
            switch lookup {
            case .cached(let bytes):
                readAhead(after: index)
                return bytes
            case .beingLoaded(let done):
                done.wait()
                done.signal()  // for any other waiter
                continue  // cached now, or (a load that failed) loaded again here, which reports the failure
            case .toLoad(let done):
                defer { done.signal() }
                let bytes: [UInt8]
                do {
                    bytes = try load(index)
                } catch {
                    _ = state.withLock { $0.loading.removeValue(forKey: index) }
                    throw error
                }
                keep(bytes, as: index)
                readAhead(after: index)
                return bytes
            }
        }
    }

    /// Puts a loaded segment in the cache, evicting the least recently used one past the capacity.
    private func keep(_ bytes: [UInt8], as index: Int) {
        state.withLock { state in
            state.loading[index] = nil
            if state.cache.count >= capacity, let oldest = state.recent.first {
                state.recent.removeFirst()
                state.cache[oldest] = nil
            }
            state.cache[index] = bytes
            state.recent.append(index)
            state.segmentsLoaded += 1
            state.peakCachedBytes = max(state.peakCachedBytes, state.cache.values.reduce(0) { $0 + $1.count })
        }
    }

    /// After a read of segment `index` that followed one of `index - 1`, loads the next segments on the second
    /// thread (those neither cached nor being loaded). A segment that fails there is simply not cached: the read that
    /// needs it loads it again and reports the failure.
    private func readAhead(after index: Int) {
        let ahead = state.withLock { state -> [(Int, DispatchSemaphore)] in
            defer { state.lastAsked = index }
            guard index == state.lastAsked + 1 else { return [] }
            var ahead: [(Int, DispatchSemaphore)] = []
            for next in (index + 1)...(index + readAhead) where next < digests.count {
                guard state.cache[next] == nil, state.loading[next] == nil else { continue }
                let done = DispatchSemaphore(value: 0)
                state.loading[next] = done
                ahead.append((next, done))
            }
            return ahead
        }
        for (next, done) in ahead {
            prefetcher.async { [self] in
                defer { done.signal() }
                if let bytes = try? load(next) {
                    keep(bytes, as: next)
                } else {
                    _ = state.withLock { $0.loading.removeValue(forKey: next) }
                }
            }
        }
    }

    /// Inflates one restart segment with ISA-L into `output`; whether it filled it exactly, using every input byte.
    private static func inflateFast(_ inflater: StreamInflater, _ input: UnsafeRawBufferPointer,
                                    into output: UnsafeMutableRawBufferPointer) -> Bool {
        inflater.reset()
        inflater.feed(input)
        var produced = 0
        while produced < output.count {
            guard let (count, finished) = inflater.inflate(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
            else { return false }
            produced += count
            if finished || count == 0 { break }
        }
        return produced == output.count && inflater.pending == 0
    }

    /// Reads segment `index` (the bytes its digest covers) from the bundle and checks it against its digest.
    ///
    /// Holds the segment (at most ``ReadingLimits/maxDigestSegmentSize``) and the compressed bytes of one restart
    /// segment at a time (at most deflate's bound for ``ReadingLimits/maxRestartSegmentSize``).
    private func load(_ index: Int) throws -> [UInt8] {
        // > index < ⌈size ÷ interval⌉ (the digests' count, checked at open), so start < size: no overflow.
        let start = Int64(index) * interval
        let length = Int(min(interval, size - start))
        let path = reader.path
        func damaged(_ reason: String, code: DocumentError.Code = .checksumMismatch) -> DocumentError {
            DocumentError(code, path: path, entry: BundleLayout.store,
                          reason: "\(isWhole ? "the store" : "segment \(index)") (bytes \(start)-\(start + Int64(length) - 1)) \(reason); no byte of it was used")
        }
        var bytes: [UInt8]
        if let offsets {
            bytes = [UInt8](repeating: 0, count: length)
            let restartLength = Int(interval) / restartsPerSegment
            let first = index * restartsPerSegment
            let last = min(first + restartsPerSegment, offsets.count)
            // > One inflater of each kind a load: loads run on the reading and the read-ahead threads.
            let fast = StreamInflater()
            var strict: SegmentInflater?
            for restart in first..<last {
                // > Offsets increase strictly inside the entry's data (checked at open): one read a restart segment,
                // > so that only one restart segment's compressed bytes are held at a time.
                let from = offsets[restart]
                let to = restart + 1 < offsets.count ? offsets[restart + 1] : compressedSize
                let compressed = try FileSystem.read(reader.descriptor, at: Int64(dataOffset) + from,
                                                     count: Int(to - from), path: path)
                guard compressed.count == Int(to - from) else {
                    throw damaged("is cut short", code: .truncatedArchive)
                }
                let outputStart = (restart - first) * restartLength
                let outputRange = outputStart..<(outputStart + min(restartLength, length - outputStart))
                // > ISA-L first: several times as fast as zlib. Its output is only a candidate: the digest decides.
                // > A restart segment it does not fill exactly goes through zlib, which names the fault.
                let filled = compressed.withUnsafeBytes { input in
                    bytes.withUnsafeMutableBytes { output in
                        guard let fast else { return false }
                        return Self.inflateFast(fast, input,
                                                into: UnsafeMutableRawBufferPointer(rebasing: output[outputRange]))
                    }
                }
                if filled { continue }
                if strict == nil { strict = SegmentInflater() }
                guard let inflater = strict else {
                    throw DocumentError(.ioFailure, path: path, reason: "cannot allocate memory to inflate the store")
                }
                let result = compressed.withUnsafeBytes { input in
                    bytes.withUnsafeMutableBytes { output in
                        inflater.inflate(input, into: UnsafeMutableRawBufferPointer(rebasing: output[outputRange]),
                                         isLast: restart + 1 == offsets.count)
                    }
                }
                switch result {
                case .success(let produced) where produced == outputRange.count: break
                case .success(let produced):
                    throw damaged("inflates to \(produced) bytes, not \(outputRange.count), at restart point \(restart)", code: .sizeMismatch)
                case .failure(.overflow):
                    throw damaged("inflates to more than its share at restart point \(restart)", code: .sizeMismatch)
                case .failure:
                    throw damaged("is not valid deflate data from restart point \(restart) on its own", code: .corruptArchive)
                }
            }
        } else {
            bytes = try FileSystem.read(reader.descriptor, at: Int64(dataOffset) + start, count: length, path: path)
            guard bytes.count == length else { throw damaged("is cut short", code: .truncatedArchive) }
        }
        guard SHA256.hash(data: bytes).hexString == digests[index] else {
            throw damaged("does not match its SHA-256 in \(isWhole ? "'store.sha256' (the whole store)" : "'store.segments'"); the bundle is damaged, restore it from a backup")
        }
        return bytes
    }
}

/// Where a store opened through ``BundleVFS`` reads its bytes: a bundle's store served segment by segment, or a store
/// file (one extracted because its bundle cannot be served in place).
protocol StoreSource: Sendable {
    /// The store's size in bytes.
    var size: Int64 { get }
    /// Copies `count` bytes at `offset` into `buffer`; returns how many there were (fewer at the store's end).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int
    /// Records why a read failed, for the caller to report.
    func fail(_ error: DocumentError)
    /// The first failure recorded.
    var failure: DocumentError? { get }
    /// The bundle or file it reads, for errors.
    var origin: FilePath { get }
}

extension SegmentedStore: StoreSource {
    var origin: FilePath { reader.path }
}

/// An extracted store file, read with `pread` (a bundle that cannot be served in place, reloaded into an open
/// read-only document).
final class StoreFile: StoreSource {
    let origin: FilePath
    let size: Int64
    private let descriptor: FileDescriptor
    private let firstFailure = Mutex<DocumentError?>(nil)

    init(_ path: FilePath) throws {
        descriptor = try FileSystem.openForReading(path)
        origin = path
        guard let status = try FileSystem.status(path) else {
            throw DocumentError(.notFound, path: path, reason: "no such file")
        }
        size = status.size
    }

    deinit { try? descriptor.close() }  // Squash close error of a read-only descriptor.

    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        try FileSystem.read(descriptor, at: offset, into: UnsafeMutableRawBufferPointer(start: buffer, count: count),
                            path: origin)
    }

    func fail(_ error: DocumentError) { firstFailure.withLock { if $0 == nil { $0 = error } } }

    var failure: DocumentError? { firstFailure.withLock { $0 } }
}

/// The file SQLite opened through ``BundleVFS``: the source it reads now, which a read-only document replaces when it
/// reverts (the same connection then reads the bundle as it is now).
///
/// An immutable slot (``BundleStore``: one bundle, never replaced) is opened with `immutable=1`: SQLite takes no
/// locks and never looks at the file again. A replaceable one is opened read-only without it: at the start of every
/// read transaction SQLite reads the header's change counter and drops its page cache when it differs, as it does
/// for a file another process changed.
final class StoreSlot: Sendable {
    let isImmutable: Bool
    private let current: Mutex<any StoreSource>

    init(_ source: any StoreSource, isImmutable: Bool) {
        self.isImmutable = isImmutable
        current = Mutex(source)
    }

    var source: any StoreSource { current.withLock { $0 } }

    /// Serves `source` from now on (only for a replaceable slot).
    func replace(with source: any StoreSource) {
        precondition(!isImmutable, "an immutable store is never replaced")
        current.withLock { $0 = source }
    }
}

/// A read-only SQLite VFS whose files are ``StoreSlot``s: SQLite reads a store's pages straight from its bundle,
/// nothing is extracted. Registered once per process (not as the default VFS); a store is opened through the `file:`
/// URI ``uri(for:)`` returns.
enum BundleVFS {
    static let name = "managed-document-bundle"

    private static let stores = Mutex<(next: UInt64, open: [UInt64: StoreSlot])>((1, [:]))

    /// Registers the VFS (once); whether SQLite accepted it.
    static let isRegistered: Bool = register()

    /// The URI that opens `slot` through the VFS (immutable when the slot is); it stays registered until
    /// ``forget(_:)``.
    static func uri(for slot: StoreSlot) -> String {
        let token = stores.withLock { stores -> UInt64 in
            defer { stores.next += 1 }
            stores.open[stores.next] = slot
            return stores.next
        }
        return "file:/\(name)/\(token)?vfs=\(name)&mode=ro" + (slot.isImmutable ? "&immutable=1" : "")
    }

    /// A read-only connection to `slot`'s store (its URI registered until the queue is closed and ``forget(_:)``).
    static func openQueue(_ slot: StoreSlot, label: String) throws -> (DatabaseQueue, uri: String) {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.label = label
        let uri = uri(for: slot)
        do {
            return (try DatabaseQueue(path: uri, configuration: configuration), uri)
        } catch {
            forget(uri)
            throw error
        }
    }

    /// Drops the registration `uri(for:)` made (connections already open keep their store).
    static func forget(_ uri: String) {
        guard let token = token(in: uri) else { return }
        _ = stores.withLock { $0.open.removeValue(forKey: token) }
    }

    private static func token(in name: String) -> UInt64? {
        let path = name.split(separator: "?").first.map(String.init) ?? name
        return path.split(separator: "/").last.flatMap { UInt64($0) }
    }

    private static func slot(named name: UnsafePointer<CChar>?) -> StoreSlot? {
        guard let name, let token = token(in: String(cString: name)) else { return nil }
        return stores.withLock { $0.open[token] }
    }

    private static func file(_ pointer: UnsafeMutablePointer<sqlite3_file>?) -> StoreSlot? {
        guard let raw = pointer.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_bundle_file.self),
              let slot = raw.pointee.store else { return nil }
        return Unmanaged<StoreSlot>.fromOpaque(slot).takeUnretainedValue()
    }

    /// The store files' methods, made once and never changed (kept by address: SQLite reads them from any thread).
    private static var methods: UnsafeMutablePointer<sqlite3_io_methods> {
        UnsafeMutablePointer(bitPattern: methodsAddress)!
    }

    private static let methodsAddress: UInt = {
        let methods = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        methods.initialize(to: sqlite3_io_methods())
        methods.pointee.iVersion = 1
        methods.pointee.xClose = { file in
            if let raw = file.map(UnsafeMutableRawPointer.init)?.assumingMemoryBound(to: md_bundle_file.self),
               let store = raw.pointee.store {
                Unmanaged<StoreSlot>.fromOpaque(store).release()
                raw.pointee.store = nil
            }
            return SQLITE_OK
        }
        methods.pointee.xRead = { file, buffer, count, offset in
            guard let store = BundleVFS.file(file)?.source, let buffer else { return md_sqlite_ioerr_read }
            do {
                let copied = try store.read(into: buffer, count: Int(count), at: offset)
                guard copied == Int(count) else {
                    (buffer + copied).initializeMemory(as: UInt8.self, repeating: 0, count: Int(count) - copied)
                    return md_sqlite_ioerr_short_read
                }
                return SQLITE_OK
            } catch let error as DocumentError {
                store.fail(error)
                return md_sqlite_ioerr_read
            } catch {
                store.fail(DocumentError(.ioFailure, path: store.origin, entry: BundleLayout.store,
                                         reason: "cannot read the store: \(error)"))
                return md_sqlite_ioerr_read
            }
        }
        methods.pointee.xWrite = { _, _, _, _ in SQLITE_READONLY }
        methods.pointee.xTruncate = { _, _ in SQLITE_READONLY }
        methods.pointee.xSync = { _, _ in SQLITE_OK }
        methods.pointee.xFileSize = { file, size in
            guard let store = BundleVFS.file(file)?.source else { return md_sqlite_ioerr_fstat }
            size?.pointee = store.size
            return SQLITE_OK
        }
        methods.pointee.xLock = { _, _ in SQLITE_OK }
        methods.pointee.xUnlock = { _, _ in SQLITE_OK }
        methods.pointee.xCheckReservedLock = { _, result in
            result?.pointee = 0
            return SQLITE_OK
        }
        methods.pointee.xFileControl = { _, _, _ in SQLITE_NOTFOUND }
        methods.pointee.xSectorSize = { _ in 4096 }
        methods.pointee.xDeviceCharacteristics = { file in
            BundleVFS.file(file)?.isImmutable == false ? 0 : SQLITE_IOCAP_IMMUTABLE
        }
        return UInt(bitPattern: methods)
    }()

    private static func register() -> Bool {
        guard let fallback = sqlite3_vfs_find(nil) else { return false }
        let vfs = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)  // lives as long as the process
        vfs.initialize(to: sqlite3_vfs())
        vfs.pointee.iVersion = 2
        // > Room for the default VFS's own files too: temporary files (a large sort) go to it.
        vfs.pointee.szOsFile = max(Int32(MemoryLayout<md_bundle_file>.size), fallback.pointee.szOsFile)
        vfs.pointee.mxPathname = 1024
        vfs.pointee.zName = UnsafePointer(strdup(name))
        vfs.pointee.pAppData = UnsafeMutableRawPointer(fallback)
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
            guard let file else { return SQLITE_CANTOPEN }
            guard flags & SQLITE_OPEN_MAIN_DB != 0 else {
                // > Not the store: a temporary file (a sort, a temporary table), served by the default VFS.
                let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
                return fallback.pointee.xOpen(fallback, name, file, flags, outFlags)
            }
            let raw = UnsafeMutableRawPointer(file).assumingMemoryBound(to: md_bundle_file.self)
            raw.pointee.base.pMethods = nil
            raw.pointee.store = nil
            guard flags & SQLITE_OPEN_READWRITE == 0, let slot = BundleVFS.slot(named: name) else {
                return SQLITE_CANTOPEN
            }
            raw.pointee.store = Unmanaged.passRetained(slot).toOpaque()
            raw.pointee.base.pMethods = UnsafePointer(BundleVFS.methods)
            outFlags?.pointee = SQLITE_OPEN_READONLY
            return SQLITE_OK
        }
        vfs.pointee.xDelete = { vfs, name, syncFolder in
            let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
            return fallback.pointee.xDelete(fallback, name, syncFolder)
        }
        vfs.pointee.xAccess = { vfs, name, flags, result in
            // > The store's journal or WAL names lie under a folder that does not exist: never there.
            let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
            return fallback.pointee.xAccess(fallback, name, flags, result)
        }
        vfs.pointee.xFullPathname = { _, name, count, output in
            guard let name, let output, count > 0 else { return SQLITE_CANTOPEN }
            let length = min(Int(count) - 1, strlen(name))
            memcpy(output, name, length)
            output[length] = 0
            return SQLITE_OK
        }
        vfs.pointee.xRandomness = { vfs, count, output in
            let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
            return fallback.pointee.xRandomness(fallback, count, output)
        }
        vfs.pointee.xSleep = { vfs, microseconds in
            let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
            return fallback.pointee.xSleep(fallback, microseconds)
        }
        vfs.pointee.xCurrentTime = { vfs, time in
            let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
            return fallback.pointee.xCurrentTime(fallback, time)
        }
        vfs.pointee.xGetLastError = { _, _, _ in 0 }
        vfs.pointee.xCurrentTimeInt64 = { vfs, time in
            let fallback = vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
            return fallback.pointee.xCurrentTimeInt64(fallback, time)
        }
        return sqlite3_vfs_register(vfs, 0) == SQLITE_OK
    }
}
