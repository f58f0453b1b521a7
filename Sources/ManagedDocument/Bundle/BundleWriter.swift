#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// The files a bundle is made from.
public struct BundleContent: Sendable {
    /// A self-contained SQLite store (not in WAL mode, no sidecars needed).
    public var store: FilePath
    /// A Core Data external-data folder (`_EXTERNAL_DATA`), packed byte for byte.
    public var externalData: FilePath?
    /// A folder of app files that travel with the document.
    public var additionalContent: FilePath?

    /// The content of a bundle: a store file, and optional folders for external data and additional content.
    public init(store: FilePath, externalData: FilePath? = nil, additionalContent: FilePath? = nil) {
        self.store = store
        self.externalData = externalData
        self.additionalContent = additionalContent
    }
}

/// How a bundle is written: compression and threads, the same for every write they are given to.
///
/// Whether a write may replace an existing file is not an option but an argument of each call that writes
/// (``BundleWriter/write(_:metadata:to:replacingExisting:options:)``), as swift-system passes `.exclusiveCreate` to
/// each `open`: a document's save always replaces its own bundle, a conversion never replaces anything, whatever
/// options they are given.
public struct WritingOptions: Sendable, Equatable {
    /// How entries are compressed.
    public enum Compression: Sendable, Equatable {
        /// Stored: fastest, largest.
        case store
        /// Deflate at a level from 1 (fastest) to 9 (smallest). Levels 1-3 are ISA-L's (igzip): several times as
        /// fast as zlib's levels, and at level 2 a few percent larger than `zip -6`'s output. Levels 4-9 are zlib's
        /// (6 is `zip`'s default).
        case deflate(level: Int)

        /// ``deflate(level:)`` at ``WritingOptions/defaultDeflateLevel``.
        public static var deflate: Compression { .deflate(level: WritingOptions.defaultDeflateLevel) }
    }

    /// The deflate level used unless another is asked for: 2, ISA-L's. On SQLite stores it runs about ten times as
    /// fast as zlib's level 6 for output about 3 % larger (docs/BENCHMARKS.md).
    public static let defaultDeflateLevel = 2

    /// Default: deflate at ``defaultDeflateLevel``.
    public var compression: Compression = .deflate
    /// The entries' modification time, and the metadata's `modifiedAt`. Default: now. A time outside the years 0
    /// to 9999 (or not a number) is refused by the write that is given it (``DocumentError/Code/invalidArgument``);
    /// the zip headers, which hold 1980 to 2107, get the nearest end of their range.
    public var modificationTime: Date?
    /// How many threads deflate one large entry (1 MiB or more) at once. Default: the cores this process may use,
    /// at most 8. Such an entry is one deflate stream cut into slices that end at sync points and restart every
    /// 128 KiB (recorded for the store in `store.deflateRestarts`, so readers can inflate it on every core too);
    /// any zip tool reads it as one stream, and it is about 1 % larger than a plain stream. With 0, every entry is
    /// deflated on the calling thread, in the same slices (the same bytes). A number above the cores this process
    /// may use starts one thread a core (more would deflate no faster, each with buffers of its own); the bytes
    /// written are the same for any number.
    public var compressionThreads: Int = min(ParallelDeflater.availableCores, 8)
    /// Writes zip64 records even for small bundles (tests of zip64 readers).
    var forcesZIP64 = false
    /// Whether the writer lists the destination's folder for temporaries that crashed writers left (off when the
    /// caller has just done so, or a batch walk does it for every folder it lists).
    var removesStaleTemporaries = true
    /// The most segment digests a store gets in format version 2 (FORMAT.md 11.4): past it, a digest covers several
    /// restart segments. Version 3 has no such cap: its digests are in the store index, not the metadata.
    var maximumSegmentDigests = 4096
    /// The bundle format written: 3 (the default, ``BundleLayout/formatVersion``), whose store index entry holds
    /// the segment records, so that a segment is 128 KiB at any store size and the metadata stays small (FORMAT.md
    /// 13.2), or 2, for readers of an earlier release (which refuse version 3 as newer). Any other version is
    /// refused by the write that is given it (``DocumentError/Code/invalidArgument``).
    public var formatVersion: Int = BundleLayout.formatVersion

    /// Options with this compression. A deflate level outside 1-9 is refused by the write that is given it
    /// (``DocumentError/Code/invalidArgument``), before anything is written.
    public init(compression: Compression = .deflate) {
        self.compression = compression
    }

    /// Refuses options no writer can follow, before anything is written to `target`.
    func validate(for target: FilePath) throws {
        if case .deflate(let level) = compression, !(1...9).contains(level) {
            throw DocumentError(.invalidArgument, path: target,
                                reason: "deflate level \(level) is not one of 1 (fastest) to 9 (smallest); nothing was written")
        }
        if !(2...BundleLayout.newestFormatVersion).contains(formatVersion) {
            throw DocumentError(.invalidArgument, path: target,
                                reason: "formatVersion is \(formatVersion); this library writes versions 2 and \(BundleLayout.newestFormatVersion); nothing was written")
        }
        if compressionThreads < 0 {
            throw DocumentError(.invalidArgument, path: target,
                                reason: "compressionThreads is \(compressionThreads); give 0 (the calling thread) or more; nothing was written")
        }
        if let time = modificationTime?.timeIntervalSince1970, !Self.writableTimes.contains(time) {
            throw DocumentError(.invalidArgument, path: target,
                                reason: "modificationTime is \(time) seconds since 1970, outside the years 0 to 9999 that the metadata's ISO 8601 dates hold; nothing was written")
        }
    }

    /// The modification times the metadata can record (`modifiedAt`, ISO 8601 with four-digit years): from
    /// 0000-01-01T00:00:00Z to 9999-12-31T23:59:59Z (`Date.distantPast` and `Date.distantFuture` included), in seconds since 1970. NaN and the infinities lie outside.
    static let writableTimes: ClosedRange<Double> = -62_167_219_200 ... 253_402_300_799

    var deflateLevel: Int {
        switch compression {
        case .store: return 0
        case .deflate(let level): return level
        }
    }
}

/// Writes bundles with the write-aside-then-rename protocol.
///
/// The bundle is streamed into a temporary file in the destination's folder (each entry hashed as it is
/// compressed, never held in memory), flushed, re-read and verified (CRC-32s, sizes, SHA-256s, SQLite header),
/// renamed over the destination, and the folder is flushed. Whatever fails or crashes, the destination holds
/// either what it held before or the complete new bundle; a temporary left by a crash is removed by the next
/// write to the same destination.
///
/// ```swift
/// let metadata = try BundleWriter.write(BundleContent(store: "work/persistentStore"),
///                                       metadata: DocumentMetadata(), to: "Notes.mdz")
/// ```
public enum BundleWriter {
    /// Writes a bundle and returns the metadata it holds.
    ///
    /// - Parameters:
    ///   - content: the store and optional folders.
    ///   - metadata: the document's metadata; `store`, `entries`, `modifiedAt` and `generator` are filled in.
    ///   - target: the bundle's path.
    ///   - replacingExisting: whether a file already at `target` is replaced (atomically, by a rename). Default: no,
    ///     and a file there is ``DocumentError/Code/alreadyExists``.
    ///   - options: compression and threads.
    /// - Throws: ``DocumentError``: ``DocumentError/Code/invalidArgument`` (options out of range),
    ///   ``DocumentError/Code/alreadyExists`` (without `replacingExisting`), ``DocumentError/Code/notSQLite``,
    ///   ``DocumentError/Code/storeInWALMode``, ``DocumentError/Code/nonRegularEntry`` (a link in a content
    ///   folder), ``DocumentError/Code/cannotCreate``, ``DocumentError/Code/ioFailure``, or a reader code when the
    ///   written file does not verify. The destination is unchanged when it throws.
    @discardableResult
    public static func write(_ content: BundleContent, metadata: DocumentMetadata, to target: FilePath,
                             replacingExisting: Bool = false,
                             options: WritingOptions = WritingOptions()) throws -> DocumentMetadata {
        var request = Request(.file(content.store), folders: content, metadata: metadata, to: target,
                              options: options)
        request.replacingExisting = replacingExisting
        let staged = try stage(request)
        try staged.commit()
        return staged.metadata
    }

    /// A bundle written aside and verified, not yet under its name: ``commit()`` renames it into place, and
    /// dropping it unused removes it (the destination is then unchanged). A caller that must check something
    /// more before the bundle may replace anything (the converter's integrity check) does it in between.
    final class Staged {
        /// The metadata the bundle holds, as readers will see it.
        let metadata: DocumentMetadata
        /// How the store was written: whole, or reusing the replaced bundle's segments.
        let report: SaveReport
        /// Bytes of the bundle, as verified.
        let fileSize: Int64
        private let atomic: AtomicFile

        fileprivate init(metadata: DocumentMetadata, report: SaveReport, fileSize: Int64, atomic: AtomicFile) {
            self.metadata = metadata
            self.report = report
            self.fileSize = fileSize
            self.atomic = atomic  // its deinit removes the temporary unless committed
        }

        /// Renames the bundle into place and flushes its folder; returns the loan of the file now in place (what a
        /// later save passes as `reusing`: ``SegmentLoan``).
        @discardableResult
        func commit() throws -> SegmentLoan? { SegmentLoan(written: try atomic.commit()) }
    }

    /// Bytes per segment digest for a store of `size` bytes: the restart interval, doubled until at most
    /// `maximumDigests` segments make the store. A store under 1 MiB (deflated whole, without a restart index, and
    /// served whole by readers) is one segment of 1 MiB: its one digest is its SHA-256, so it is hashed once
    /// (FORMAT.md 13.1).
    static func segmentInterval(forSize size: Int64, maximumDigests: Int, formatVersion: Int) -> Int64 {
        if size < ArchiveWriter.parallelDeflateThreshold { return ArchiveWriter.parallelDeflateThreshold }
        var interval = Int64(ParallelDeflater.restartInterval(forSize: size, growing: formatVersion < 3))
        // > Version 3: one digest a restart segment, at any size (the store index holds them, FORMAT.md 13.2).
        if formatVersion >= 3 { return interval }
        while (size + interval - 1) / interval > Int64(max(1, maximumDigests)) { interval *= 2 }
        return interval
    }

    /// Writes a bundle aside and verifies it (the first stage of ``write(_:metadata:to:replacingExisting:options:)``):
    /// the store as ``Request/store`` says (whole, or reusing the replaced bundle's unchanged segments), then the
    /// content folders and the metadata; the bundle is re-read and checked in proportion to what was written new.
    static func stage(_ request: Request) throws -> Staged {
        let target = request.target, options = request.options
        try options.validate(for: target)
        let facts = try checkedFacts(of: request.store, given: request.storeFacts)
        var files: [(name: String, source: FilePath)] = []
        if let folder = request.externalData {
            files += try contentFiles(in: folder, prefix: BundleLayout.externalDataPrefix)
        }
        if let folder = request.additionalContent {
            files += try contentFiles(in: folder, prefix: BundleLayout.additionalContentPrefix)
        }
        files.sort { $0.name < $1.name }
        let now = options.modificationTime ?? Date()
        // > The temporary has its final permission bits before it has a name: a private document is never readable
        // > by others, not even while it is written.
        let atomic = try AtomicFile(target: target, replacing: request.replacingExisting,
                                    removingStale: options.removesStaleTemporaries,
                                    restrictingTo: request.permissionsOf)
        // > From here on, an error drops `atomic`, which removes the temporary.
        let writer = try ArchiveWriter(descriptor: atomic.descriptor, path: target,
                                       mediaType: request.metadata.mediaType, deflateLevel: options.deflateLevel,
                                       modificationTime: Int64(now.timeIntervalSince1970.rounded(.down)),  // in range: validated above
                                       forcesZIP64: options.forcesZIP64,
                                       compressionThreads: options.compressionThreads,
                                       restartsGrow: options.formatVersion < 3)
        let compress = options.deflateLevel > 0
        let (storeDigest, segments, plan, report) = try addStore(request.store, compressed: compress, to: writer,
                                                                 target: target, options: options,
                                                                 hashingWhole: request.hashingStoreWhole)
        // > Version 3 (FORMAT.md 13.2): the segment records go into the store index, right after the store.
        let index = try options.formatVersion >= 3 ? addStoreIndex(segments, restarts: storeDigest.restarts,
                                                                   size: storeDigest.size, to: writer, target: target)
            : nil
        var entries: [DocumentMetadata.Entry] = []
        for file in files {
            let (digest, _) = try addFile(file.source, named: file.name, compressed: compress, to: writer)
            // > Content files are always hashed whole (no segment digests asked for).
            entries.append(DocumentMetadata.Entry(name: digest.name, size: digest.size, sha256: digest.sha256 ?? ""))
        }
        var result = request.metadata
        try request.completingMetadata(&result, storeDigest)
        result.format = BundleLayout.formatName
        result.formatVersion = options.formatVersion
        result.modifiedAt = now
        result.generator = DocumentMetadata.Generator(name: "ManagedDocument", version: ManagedDocumentVersion.string)
        // > Format version 2 (FORMAT.md 13.1): the store digest is made of the segment digests, with no whole-file
        // > SHA-256; the restart index carries each restart segment's CRC-32.
        guard let segments, let contentDigest = segments.storeDigest(size: storeDigest.size) else {
            throw DocumentError(.ioFailure, path: target, entry: BundleLayout.store,
                                reason: "the store's segment digests were not computed; nothing was written")
        }
        result.store = DocumentMetadata.Store(
            entry: BundleLayout.store, size: storeDigest.size, pageSize: facts.pageSize,
            userVersion: facts.userVersion, applicationID: facts.applicationID, schemaFingerprint: facts.schemaFingerprint)
        (result.store.digest, result.store.deflateRestarts, result.store.segments) = (contentDigest, storeDigest.restarts,
                                                                                      segments)
        result.entries = entries
        var text = result
        if let index {
            // > The records are the index's: the metadata text holds its reference alone.
            (text.store.index, text.store.segments, text.store.deflateRestarts) = (index, nil, nil)
        }
        try writer.addEntry(named: BundleLayout.metadata, bytes: try text.encoded(), compressed: compress)
        try writer.finish()
        let written = try verifyWritten(atomic.temporaryPath, plan: plan, report: report, input: request.store,
                                        segments: segments)
        return Staged(metadata: written.metadata, report: report, fileSize: Int64(written.fileSize), atomic: atomic)
    }

    /// Adds the store index of format version 3 (FORMAT.md 13.2), stored so that a reader can read any block of it
    /// in place, right after the store; returns the metadata's reference to it.
    private static func addStoreIndex(_ segments: DocumentMetadata.SegmentDigests?, restarts: DeflateRestarts?,
                                      size: Int64, to writer: ArchiveWriter, target: FilePath)
    throws -> DocumentMetadata.StoreIndexReference {
        guard let segments, let records = StoreIndex.Records(segments, restarts: restarts) else {
            throw DocumentError(.ioFailure, path: target, entry: BundleLayout.storeIndex,
                                reason: "the store's segment records were not computed one a restart segment; nothing was written")
        }
        let layout = StoreIndex.Layout(size: size, interval: segments.interval, hasRestarts: restarts != nil)
        let (bytes, root) = StoreIndex.encode(records, layout: layout)
        try writer.addEntry(named: BundleLayout.storeIndex, bytes: bytes, compressed: false)
        return DocumentMetadata.StoreIndexReference(entry: BundleLayout.storeIndex, root: root,
                                                    interval: segments.interval,
                                                    compressedSize: restarts?.compressedSize, crc32: restarts?.crc32)
    }

    /// The store's facts, after its header was checked (a SQLite database, not in WAL mode): `given` when the
    /// caller has them, SQLite's answer otherwise.
    private static func checkedFacts(of input: StoreInput, given: StoreFacts?) throws -> StoreFacts {
        let path = input.path
        let header = try input.reader().header()
        if header.isWAL {
            throw DocumentError(.storeInWALMode, path: path,
                                reason: "the store is in WAL mode; checkpoint it and set journal_mode=DELETE first")
        }
        if let given { return given }
        do {
            return try StoreInspector.openReadOnly(path).read { try StoreInspector.facts($0, countingRows: false) }
        } catch let error as DatabaseError {
            throw DocumentError(.storeCorrupt, path: path, reason: "SQLite cannot read the store",
                                underlyingError: error)
        }
    }

    /// Re-reads the bundle written at `path` before it takes the destination's name, and checks it: reused bytes
    /// compared with the replaced bundle's and new segments inflated (in proportion, when most were reused), or
    /// everything inflated; the metadata returned is what readers see (dates at the precision they are written
    /// with).
    private static func verifyWritten(_ path: FilePath, plan: SegmentReuse?, report: SaveReport, input: StoreInput,
                                      segments: DocumentMetadata.SegmentDigests) throws -> BundleReader {
        let written = try BundleReader(at: path)
        if let plan, report.reusedSegments * 2 >= report.segments {
            // > In proportion: reused bytes compared with the replaced bundle's, new segments inflated and checked.
            try written.verifyEntries(checkingSegments: false, checkingStore: plan.verify)
        } else if let plan {
            try written.verifyEntries(checkingSegments: true)  // mostly new: inflated on every core, all of it
            try plan.checkPreviousUnchanged()
        } else if case .inMemory(let image) = input {
            // > The bytes just hashed are at hand: the store inflated is compared with them, not hashed again.
            try written.verifyEntries(comparingStoreWith: image.bytes, digests: segments)
        } else {
            try written.verifyEntries(checkingSegments: false)  // a version 2 store: checked by its segment digests
        }
        return written
    }

    /// Refuses an existing `target` before any work (unless replacing it), and makes the scratch folder beside it
    /// where the new store is made; the folder goes when the returned value does.
    private static func prepareCreating(_ target: FilePath, replacingExisting: Bool)
    throws -> (scratch: ScratchDirectory, store: FilePath) {
        if !replacingExisting, try FileSystem.exists(target) {
            throw DocumentError(.alreadyExists, path: target, reason: "already exists; choose another name or remove it first")
        }
        let scratch = try ScratchDirectory(besides: target)
        return (scratch, scratch.path.appending("persistentStore"))
    }

    /// Adds the store: its segments the replaced bundle holds unchanged copied from it, compressed, when the input
    /// allows it (``SegmentReuse``), the others read, deflated and hashed; or all of it read, deflated and hashed.
    private static func addStore(_ input: StoreInput, compressed: Bool, to writer: ArchiveWriter, target: FilePath,
                                 options: WritingOptions, hashingWhole: Bool)
    throws -> (EntryDigest, DocumentMetadata.SegmentDigests?, SegmentReuse?, SaveReport) {
        if case .inMemory(let image) = input {
            let (digest, segments) = try addBytes(image.bytes, named: BundleLayout.store, compressed: compressed,
                                                  to: writer, segmentDigests: options.maximumSegmentDigests,
                                                  hashingWhole: hashingWhole)
            return (digest, segments, nil, SaveReport(
                mode: .full, segments: digest.restarts?.offsets.count ?? 0, reusedSegments: 0,
                reason: "the store was written from the bytes the conversion read and checked"))
        }
        let bytes = try input.reader()
        let decision = try planReuse(input, bytes: bytes, compressed: compressed, target: target, options: options)
        var position: Int64 = 0
        // > An overlay's bytes are asked for a window ahead of the reads (a file's and the base's read ahead alone).
        let window: Int64 = 32 << 20
        var advisedTo: Int64 = 0
        let read: (UnsafeMutableRawBufferPointer) throws -> Int = { buffer in
            if position + window / 2 >= advisedTo, advisedTo < bytes.size {
                let end = min(bytes.size, max(advisedTo, position) + window)
                bytes.readAhead(max(advisedTo, position)..<end)
                advisedTo = end
            }
            let count = try bytes.read(into: buffer, at: position)
            position += Int64(count)
            return count
        }
        if case .reuse(let plan) = decision {
            let reuse = ParallelDeflater.Reuse(crc32: { try plan.reusedCRC($0) }, skip: { position += $0 },
                                               source: { plan.source($0) },
                                               compressedCRC32C: { plan.recordedCompressedCRC($0) })
            let digest = try addEntry(named: BundleLayout.store, size: bytes.size, deflate: true, to: writer,
                                      segmentDigests: nil, hashingWhole: hashingWhole, reuse: reuse, read: read).0
            let (digests, reused) = try plan.finish()
            let report = SaveReport(mode: .incremental, segments: reused.count,
                                    reusedSegments: reused.lazy.filter { $0 }.count, reason: nil)
            return (digest, digests, plan, report)
        }
        let sample = try bytes.bytes(at: 0, count: Int(min(max(bytes.size, 0), 64 << 10)))
        let deflate = compressed && sample.withUnsafeBytes { isWorthDeflating($0) }
        let (digest, segments) = try addEntry(named: BundleLayout.store, size: bytes.size, deflate: deflate,
                                              to: writer, segmentDigests: options.maximumSegmentDigests,
                                              hashingWhole: hashingWhole, reuse: nil, read: read)
        let reason = if case .full(let why) = decision { why } else { "" }
        let report = SaveReport(mode: .full, segments: digest.restarts?.offsets.count ?? 0, reusedSegments: 0,
                                reason: reason)
        return (digest, segments, nil, report)
    }

    /// Whether the replaced bundle's store segments may be reused, and how, or why the store is written whole.
    private static func planReuse(_ input: StoreInput, bytes: any StoreReader, compressed: Bool, target: FilePath,
                                  options: WritingOptions) throws -> SegmentReuse.Decision {
        let previous: BundleReader, loan: SegmentLoan
        switch input {
        case .inMemory: return .full("")
        case .file(_, let reusing):
            guard let reusing else {
                return .full("no bundle this process verified to reuse (a first save, or incremental saves are off)")
            }
            do {
                previous = try BundleReader(at: target)
            } catch let error as DocumentError {
                return .full("the bundle being replaced cannot be read (\(error.reason))")
            }
            loan = reusing
        case .layered(_, let base, let whyWhole):
            guard let base else { return .full(whyWhole) }
            (previous, loan) = (base, SegmentLoan(base: base.openedIdentity))
        }
        if compressed, bytes.size < ArchiveWriter.parallelDeflateThreshold {
            // > Such a store is written with no restart index: there are no segments to reuse, and deflating it
            // > whole takes milliseconds.
            return .full("a store under 1 MiB is deflated whole (it has no restart segments to reuse)")
        }
        guard compressed else { return .full("the store is stored, not deflated: there is nothing to save by reusing it") }
        return try SegmentReuse.plan(bytes, previous: previous, loan: loan, maximumDigests: options.maximumSegmentDigests,
                                     formatVersion: options.formatVersion)
    }

    /// Creates a new document whose store is an empty SQLite database.
    ///
    /// - Parameters:
    ///   - target: the bundle's path.
    ///   - metadata: the document's metadata (its media type and model); the store's facts are filled in.
    ///   - replacingExisting: whether a file already at `target` is replaced. Default: no.
    ///   - options: compression and threads.
    /// - Throws: ``DocumentError/Code/alreadyExists`` when `target` exists (without `replacingExisting`), and the
    ///   codes of ``write(_:metadata:to:replacingExisting:options:)``.
    @discardableResult
    public static func createEmptyDocument(at target: FilePath, metadata: DocumentMetadata = DocumentMetadata(),
                                           replacingExisting: Bool = false,
                                           options: WritingOptions = WritingOptions()) throws -> DocumentMetadata {
        let (scratch, store) = try prepareCreating(target, replacingExisting: replacingExisting)
        defer { withExtendedLifetime(scratch) {} }  // the folder holds the store until the bundle is written
        do {
            let queue = try DatabaseQueue(path: store.string)
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA journal_mode = DELETE")
                // A new database file is empty until its first write; this one writes page 1 and leaves no schema.
                try db.execute(sql: "CREATE TABLE managed_document_init(x); DROP TABLE managed_document_init")
            }
            try queue.close()
        } catch let error as DatabaseError {
            throw DocumentError(.cannotCreate, path: target, reason: "cannot create an empty store",
                                underlyingError: error)
        }
        return try write(BundleContent(store: store), metadata: metadata, to: target,
                         replacingExisting: replacingExisting, options: options)
    }

    /// Adds a file, hashed whole as it is read (a content file: no segment digests).
    private static func addFile(_ source: FilePath, named name: String, compressed: Bool, to writer: ArchiveWriter)
    throws -> (EntryDigest, DocumentMetadata.SegmentDigests?) {
        let descriptor = try FileSystem.openForReading(source)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        guard let status = try FileSystem.status(source) else {
            throw DocumentError(.notFound, path: source, reason: "no such file")
        }
        var deflate = compressed
        if compressed {
            let sample = try FileSystem.read(descriptor, at: 0, count: 64 << 10, path: source)
            deflate = sample.withUnsafeBytes { isWorthDeflating($0) }
        }
        return try addEntry(named: name, size: status.size, deflate: deflate, to: writer, segmentDigests: nil,
                            hashingWhole: true, reuse: nil) { buffer in
            do { return try descriptor.read(into: buffer) } catch let error as Errno {
                throw DocumentError.io("cannot read the file", path: source, errno: error)
            }
        }
    }

    /// Adds a file from bytes already in memory (a small store the converter read in place, under its lock, and had
    /// SQLite check): what is packed and hashed is exactly what was checked, and the file is not read again.
    private static func addBytes(_ bytes: UnsafeRawBufferPointer, named name: String, compressed: Bool,
                                 to writer: ArchiveWriter, segmentDigests: Int?, hashingWhole: Bool)
    throws -> (EntryDigest, DocumentMetadata.SegmentDigests?) {
        let deflate = compressed && isWorthDeflating(UnsafeRawBufferPointer(rebasing: bytes.prefix(64 << 10)))
        var offset = 0
        return try addEntry(named: name, size: Int64(bytes.count), deflate: deflate, to: writer,
                            segmentDigests: segmentDigests, hashingWhole: hashingWhole, reuse: nil) { buffer in
            let count = min(buffer.count, bytes.count - offset)
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count]))
            offset += count
            return count
        }
    }

    /// Adds an entry whose bytes `read` fills in, in order; with `segmentDigests`, also their segment digests, and
    /// with `hashingWhole` the SHA-256 of all of them.
    static func addEntry(named name: String, size: Int64, deflate: Bool, to writer: ArchiveWriter,
                                 segmentDigests: Int?, hashingWhole: Bool, reuse: ParallelDeflater.Reuse?,
                                 read: (UnsafeMutableRawBufferPointer) throws -> Int)
    throws -> (EntryDigest, DocumentMetadata.SegmentDigests?) {
        var segments = segmentDigests.map {
            SegmentHasher(interval: Self.segmentInterval(forSize: size, maximumDigests: $0,
                                                       formatVersion: writer.restartsGrow ? 2 : 3))
        }
        // > A store of one segment (a small one) has the whole file's SHA-256 as its one digest: hashed once.
        let isOneSegment = segments.map { size > 0 && size <= $0.interval } ?? false
        var digest = try writer.addEntry(named: name, size: size, compressed: deflate, reuse: reuse,
                                         hashing: hashingWhole && !isOneSegment) { buffer in
            let count = try read(buffer)
            segments?.update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            return count
        }
        guard var segments else { return (digest, nil) }
        let digests = segments.finalize()
        if hashingWhole && isOneSegment { digest.sha256 = digests.first }
        return (digest, DocumentMetadata.SegmentDigests(interval: segments.interval, digests: digests))
    }

    /// Every regular file below `folder`, sorted, as entry names under `prefix`.
    static func contentFiles(in folder: FilePath, prefix: String) throws -> [(name: String, source: FilePath)] {
        guard FileSystem.isDirectory(folder) else {
            throw DocumentError(.notFound, path: folder, reason: "is not a folder")
        }
        var result: [(String, FilePath)] = []
        func walk(_ directory: FilePath, _ relative: String) throws {
            for name in try FileSystem.contentsOfDirectory(directory) {
                let path = directory.appending(name)
                let entryName = relative + name
                guard let status = try FileSystem.status(path) else { continue }
                switch status.kind {
                case .directory: try walk(path, entryName + "/")
                case .regular:
                    let (validated, _) = try BundleLayout.role(ofEntryNamed: Array(entryName.utf8),
                                                               maxLength: ReadingLimits.default.maxNameLength,
                                                               in: path)
                    result.append((validated, path))
                case .symlink, .other:
                    throw DocumentError(.nonRegularEntry, path: path,
                                        reason: "is not a regular file; bundles hold only regular files (nothing was written)")
                }
            }
        }
        try walk(folder, prefix)
        return result
    }
}

extension BundleWriter {
    /// Creates a new document whose store is a copy of an existing SQLite database.
    ///
    /// The database is copied through SQLite's backup API (rows still in a `-wal` included) into a working folder
    /// beside `target`, checked, and packed. The source is opened read-only and never changed.
    ///
    /// - Parameters:
    ///   - target: the bundle's path.
    ///   - source: the SQLite database to copy (its `-wal`, if any, included); never changed.
    ///   - metadata: the document's metadata (its media type and model); the store's facts are filled in.
    ///   - replacingExisting: whether a file already at `target` is replaced. Default: no.
    ///   - options: compression and threads.
    /// - Throws: ``DocumentError/Code/alreadyExists`` (without `replacingExisting`), the codes of consolidation
    ///   (``DocumentError/Code/notSQLite``, ``DocumentError/Code/storeBusy``, ``DocumentError/Code/storeCorrupt``)
    ///   and those of ``write(_:metadata:to:replacingExisting:options:)``.
    @discardableResult
    public static func createDocument(at target: FilePath, copyingStore source: FilePath,
                                      metadata: DocumentMetadata = DocumentMetadata(),
                                      replacingExisting: Bool = false,
                                      options: WritingOptions = WritingOptions()) throws -> DocumentMetadata {
        let (scratch, store) = try prepareCreating(target, replacingExisting: replacingExisting)
        defer { withExtendedLifetime(scratch) {} }  // the folder holds the store until the bundle is written
        _ = try StoreConsolidator.consolidate(source, into: store)
        return try write(BundleContent(store: store), metadata: metadata, to: target,
                         replacingExisting: replacingExisting, options: options)
    }
}
