#if canImport(Glibc)
import Glibc
#endif
import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// Where ``BundleReader/extract(into:)`` put a bundle's content.
public struct ExtractedBundle: Sendable {
    /// The folder everything was extracted into, laid out as in the bundle.
    public var directory: FilePath
    /// The SQLite store, `<directory>/StoreContent/persistentStore`.
    public var store: FilePath { directory.appending(BundleLayout.store) }
    /// The Core Data external-data folder, when the bundle has one.
    public var externalData: FilePath?
    /// The additional-content folder, when the bundle has one.
    public var additionalContent: FilePath?
}

extension BundleReader {
    /// Extracts the store, external data and additional content into `directory`, checking as it streams.
    ///
    /// `directory` must not exist or be empty; it is created. Each entry's bytes are counted against the size its
    /// header declares (so a deflate bomb stops within one buffer of it), hashed, and compared with the metadata's
    /// SHA-256; libarchive checks each CRC-32. On any failure the files written so far are removed.
    ///
    /// - Returns: where the store and folders are.
    /// - Throws: ``DocumentError`` with ``DocumentError/Code/checksumMismatch``,
    ///   ``DocumentError/Code/sizeMismatch``, ``DocumentError/Code/notSQLite``,
    ///   ``DocumentError/Code/corruptArchive``, ``DocumentError/Code/truncatedArchive`` or
    ///   ``DocumentError/Code/ioFailure``.
    @discardableResult
    public func extract(into directory: FilePath) throws -> ExtractedBundle {
        try extract(into: directory, permissions: extractedPermissions)
    }

    /// 0644, less the group and other bits the bundle file lacks: a private document's files stay private when
    /// extracted (the owner may always read and write them). 0600 when the bundle's mode cannot be read.
    @_spi(Core) public var extractedPermissions: FilePermissions {
        guard let status = try? Stat(descriptor) else { return [.ownerReadWrite] }  // unreadable: 0600, as said
        return FilePermissions(rawValue: 0o644 & (status.permissions.rawValue & 0o777 | 0o600))
    }

    /// ``extract(into:)`` with the files created at `permissions` (the umask applies too): a document's working
    /// copy is extracted at 0600.
    ///
    /// With `skippingStore`, every entry but the store: the store is neither read nor written (a writable document
    /// serves it from the bundle, FORMAT.md 16.2, each segment checked as SQLite reads it).
    @discardableResult
    @_spi(Core) public func extract(into directory: FilePath, permissions: FilePermissions,
                 checkingSegments: Bool = false, skippingStore: Bool = false) throws -> ExtractedBundle {
        let created = try Self.prepareEmptyDirectory(directory)
        do {
            if skippingStore {
                try streamEntries(into: directory, permissions: permissions, checkingStore: { _ in }) { _ in true }
            } else {
                try streamEntries(into: directory, permissions: permissions, checkingSegments: checkingSegments) { _ in true }
            }
        } catch {
            if created {
                try? FileSystem.removeTree(directory)  // Cleanup after a first error; the error is what counts.
            } else {
                for name in (try? FileSystem.contentsOfDirectory(directory)) ?? [] {
                    try? FileSystem.removeTree(directory.appending(name))  // Cleanup after a first error.
                }
            }
            throw error
        }
        let external = directory.appending(BundleLayout.externalDataPrefix)
        let additional = directory.appending(BundleLayout.additionalContentPrefix)
        return ExtractedBundle(directory: directory,
                               externalData: FileSystem.isDirectory(external) ? external : nil,
                               additionalContent: FileSystem.isDirectory(additional) ? additional : nil)
    }

    /// ``extract(into:permissions:checkingSegments:)`` at 0600; with `forReuse`, every segment digest is checked
    /// too, and the bundle's ``SegmentLoan`` is returned when the rule there allows it (`nil` without `forReuse`):
    /// what a save may trust of it later (``SegmentReuse``: each of its segments inflates to the bytes its digest
    /// names).
    @_spi(Core)
    public func extractVerifying(into directory: FilePath, forReuse: Bool) throws -> (ExtractedBundle, SegmentLoan?) {
        let before = openedIdentity
        let extracted = try extract(into: directory, permissions: [.ownerReadWrite], checkingSegments: forReuse)
        guard forReuse else { return (extracted, nil) }
        let segmentWise = entries.first { $0.role == .store }.map { parallelRestarts(for: $0) != nil } ?? false
        return (extracted, SegmentLoan(extracted: self, inflatedSegmentWise: segmentWise, before: before,
                                       after: FileIdentity(descriptor)))
    }

    /// Inflates every entry without writing anything, checking CRC-32s, sizes, SHA-256s and the store's header.
    ///
    /// This is the re-read a writer does before it renames a new bundle into place.
    ///
    /// - Parameter checkingSegments: also check the store against each of its segment digests
    ///   (`store.segments`), naming the first segment that does not match (``DocumentError/Code/checksumMismatch``).
    public func verifyEntries(checkingSegments: Bool = true) throws {
        try streamEntries(into: nil, checkingSegments: checkingSegments) { _ in false }
    }

    /// ``verifyEntries(checkingSegments:)`` with the store's data checked by `checkingStore` instead of inflated
    /// (an incremental save checks the store in proportion to what changed: ``SegmentReuse/verify(_:)``).
    @_spi(Core) public func verifyEntries(checkingSegments: Bool, checkingStore: (BundleReader) throws -> Void) throws {
        _ = try withoutActuallyEscaping(checkingStore) { check in
            try streamEntries(into: nil, checkingSegments: checkingSegments, checkingStore: check) { _ in false }
        }
    }

    /// ``verifyEntries(checkingSegments:)`` for a bundle whose writer still holds the store's bytes (`store`, hashed
    /// into `digests` as it packed them): the store is inflated and compared with them byte for byte instead of
    /// hashed again, once the metadata written is shown to record exactly `digests` (its store digest was checked
    /// against them when the reader opened). Equal bytes have equal digests: the check is the reader's, and stricter.
    @_spi(Core) public func verifyEntries(comparingStoreWith store: UnsafeRawBufferPointer,
                       digests: DocumentMetadata.SegmentDigests) throws {
        // > The entry's size is the metadata's (checked when the reader opened) and the stream must inflate to it:
        // > with this size, every byte of `store` is compared.
        guard metadata.store.segments == digests, metadata.store.size == Int64(store.count) else {
            throw DocumentError(.checksumMismatch, path: path, entry: BundleLayout.store,
                                reason: "the metadata written does not record the store's segment digests or size")
        }
        try streamEntries(into: nil, comparingStore: store) { _ in false }
    }

    /// Streams every entry (libarchive walks the headers, ``EntryReader`` or ``ParallelInflater`` reads the data);
    /// entries for which `shouldWrite` is true go into `directory`.
    ///
    /// - Returns: the number of bytes inflated.
    @discardableResult
    @_spi(Core) public func streamEntries(into directory: FilePath?,
                       permissions: FilePermissions = [.ownerReadWrite, .groupRead, .otherRead],
                       checkingSegments: Bool = false,
                       checkingStore: ((BundleReader) throws -> Void)? = nil,
                       comparingStore: UnsafeRawBufferPointer? = nil,
                       storeOutput: (FileDescriptor, FilePath)? = nil,
                       shouldWrite: (BundleEntry) -> Bool) throws -> UInt64 {
        var byName: [String: BundleEntry] = [:]
        for entry in entries { byName[entry.name] = entry }
        // > A version 2 store has no whole-file SHA-256: its segment digests check it (FORMAT.md 13.1).
        var expected: [String: String] = [:]
        if let sha256 = metadata.store.sha256 { expected[BundleLayout.store] = sha256 }
        for entry in metadata.entries { expected[entry.name] = entry.sha256 }

        // libarchive walks the headers (it must see exactly the entries the directory lists); the data is read
        // straight from the file at the offsets the reader validated, and inflated by ISA-L. Both read the one
        // descriptor the reader opened, never the path again.
        let file = descriptor
        let archive = try ArchiveReader(descriptor: file, size: fileSize, path: path)
        let reader = try EntryReader(descriptor: file, path: path, deflated: entries.contains { $0.isCompressed })
        // SHA-256 on a second thread while the next chunk inflates (inline for a bundle of small entries).
        let largest = entries.lazy.filter { $0.role != .mimetype && $0.role != .metadata }.map(\.size).max() ?? 0
        let pipeline = ChunkPipeline.forStream(ofSize: Int64(clamping: largest))
        var seen = Set<String>()
        var inflated: UInt64 = 0
        while let header = try archive.nextEntry() {
            guard let name = String(validating: header.rawName, as: UTF8.self), let entry = byName[name],
                  seen.insert(name).inserted
            else {
                throw DocumentError.corrupt("libarchive reads an entry the central directory does not list",
                                            path: path, entry: String(decoding: header.rawName, as: UTF8.self))
            }
            if header.isEncrypted {
                throw DocumentError(.encryptedEntry, path: path, entry: name, reason: "is encrypted; bundles never are")
            }
            if entry.isDirectory { continue }
            guard header.isRegularFile else {
                throw DocumentError(.nonRegularEntry, path: path, entry: name,
                                    reason: "is not a regular file; bundles hold only regular files")
            }
            if entry.role == .mimetype || entry.role == .metadata || entry.role == .storeIndex {
                continue  // checked when the reader opened
            }
            if entry.role == .store, let checkingStore {
                try checkingStore(self)
                continue
            }

            var output: FileDescriptor?
            var outputPath: FilePath?
            if let directory, shouldWrite(entry) {
                outputPath = directory.appending(name)
                output = try createExtracted(outputPath!, entry: name, permissions: permissions)
            }
            defer { try? output?.close() }  // Squash close error: a failed write was already reported.
            // > The caller's own file for the store (an unnamed one): written, never closed here.
            let target = entry.role == .store && storeOutput != nil ? storeOutput : output.map { ($0, outputPath!) }
            inflated += try stream(entry, reader: reader, pipeline: pipeline, expected: expected[name],
                                   to: target, checkingSegments: checkingSegments,
                                   comparing: entry.role == .store ? comparingStore : nil)
        }
        guard seen.count == entries.count else {
            let missing = entries.first { !seen.contains($0.name) }?.name
            throw DocumentError.corrupt("libarchive does not return every entry the directory lists",
                                        path: path, entry: missing)
        }
        return inflated
    }

    /// Creates an extracted file exclusively (never replacing or following what is there).
    private func createExtracted(_ target: FilePath, entry: String, permissions: FilePermissions) throws -> FileDescriptor {
        try FileSystem.createDirectory(target.removingLastComponent())
        do {
            return try FileIO.create(target, .writeOnly, options: [.exclusiveCreate, .noFollow, .closeOnExec],
                                     permissions: permissions)
        } catch {
            throw DocumentError(.cannotCreate, path: target, entry: entry,
                                reason: "cannot create the extracted file", underlyingError: error)
        }
    }

    /// One entry's data, read where the reader validated it lies (on every core by its restart points, or in one
    /// stream), bounded by its declared size, written to `target` when given, and checked: size, SQLite header and
    /// declared size for the store, SHA-256 against `expected` (none for a version 2 store), and the store's segment
    /// digests when asked, and always for a version 2 store (its content is checked by them, FORMAT.md 13.1).
    /// With `comparing`, the bytes the entry must inflate to: compared instead of hashed (none of the digests then).
    ///
    /// - Returns: the number of bytes inflated.
    private func stream(_ entry: BundleEntry, reader: EntryReader, pipeline: ChunkPipeline, expected: String?,
                        to target: (FileDescriptor, FilePath)?, checkingSegments: Bool,
                        comparing: UnsafeRawBufferPointer? = nil) throws -> UInt64 {
        let name = entry.name
        let isStore = entry.role == .store
        let expected = comparing == nil ? expected : nil
        let segmentInterval = isStore && comparing == nil && (checkingSegments || metadata.formatVersion >= 2)
            ? metadata.store.segments?.interval : nil
        var written: UInt64 = 0
        var head: [UInt8] = []
        var inflated: (sha256: String?, segments: [String]?)?
        func take(_ chunk: UnsafeRawBufferPointer) throws {
            if let comparing { try compare(chunk, at: written, with: comparing, entry: name) }
            written += UInt64(chunk.count)
            if head.count < 100 {
                head.append(contentsOf: chunk.prefix(100 - head.count))
                try checkDeclaredSize(entry, head: head)
            }
            if let (output, outputPath) = target { try FileSystem.writeAll(output, chunk, path: outputPath) }
        }
        if let restarts = parallelRestarts(for: entry) {
            // Inflated on every core from the restart points its writer recorded; libarchive skips the data.
            var segments = segmentInterval.map { SegmentHasher(interval: $0) }
            do {
                let sha256 = try inflateInParallel(entry, restarts: restarts, hashing: expected != nil) { chunk in
                    segments?.update(chunk)
                    try take(chunk)
                }
                inflated = (sha256, segments.map { var hasher = $0; return hasher.finalize() })
            } catch let error as DocumentError
                        where restartIndex == .used(segments: restarts.offsets.count, identified: false)
                        && (error.code == .corruptArchive || error.code == .sizeMismatch) {
                // > An older writer's index, which does not name its stream, does not fit this one (a repack):
                // > a hint, not the content; the entry is read again in one stream, checked as any other.
                written = 0
                head = []
                if let (output, outputPath) = target {
                    guard ftruncate(output.rawValue, 0) == 0, lseek(output.rawValue, 0, SEEK_SET) == 0 else {
                        throw DocumentError.io("cannot start the extracted file again", path: outputPath,
                                               errno: Errno(rawValue: errno))
                    }
                }
            }
        }
        if inflated == nil {
            // > Hashed on the pipeline's thread while the next chunk inflates: the whole stream's SHA-256, the
            // > segments' or both, as the entry's checks need.
            pipeline.start(ChunkPipeline.Hashing(whole: expected != nil, segmentInterval: segmentInterval))
            reader.start(entry.location)
            while true {
                let buffer = pipeline.acquire()
                let count = try reader.read(into: buffer)
                if count == 0 { break }
                guard written + UInt64(count) <= entry.size else {
                    throw DocumentError(.sizeMismatch, path: path, entry: name,
                                        reason: "inflates to more than the \(entry.size) bytes its header declares (a zip bomb, or damage); stopped")
                }
                try take(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                pipeline.submit(count)
            }
            let digests = pipeline.finalizeDigests()
            inflated = (digests.sha256, digests.segments)
        }
        guard written == entry.size else {
            throw DocumentError(.sizeMismatch, path: path, entry: name,
                                reason: "inflates to \(written) bytes, not the \(entry.size) its header declares; the bundle is damaged")
        }
        if isStore, !StoreHeader.hasMagic(head) {
            throw DocumentError(.notSQLite, path: path, entry: name, reason: "is not a SQLite database")
        }
        if let expected, inflated?.sha256 != expected {
            throw DocumentError(.checksumMismatch, path: path, entry: name,
                                reason: "its SHA-256 does not match the metadata; the bundle is damaged, restore it from a backup")
        }
        if let segments = inflated?.segments { try checkSegmentDigests(segments, entry: name) }
        return written
    }

    /// Refuses a chunk inflated at `offset` that is not the bytes of `expected` there.
    private func compare(_ chunk: UnsafeRawBufferPointer, at offset: UInt64, with expected: UnsafeRawBufferPointer,
                         entry name: String) throws {
        guard !chunk.isEmpty else { return }
        let start = Int(clamping: offset)
        guard chunk.count <= expected.count - min(start, expected.count),
              memcmp(expected.baseAddress! + start, chunk.baseAddress!, chunk.count) == 0 else {
            throw DocumentError(.checksumMismatch, path: path, entry: name,
                                reason: "does not inflate to the bytes that were packed (from byte \(start)); the bundle is damaged")
        }
    }

    /// Refuses a store whose segments, hashed as it was read, do not match `store.segments`, naming the first.
    private func checkSegmentDigests(_ computed: [String], entry name: String) throws {
        guard let recorded = metadata.store.segments else { return }
        // > As many as recorded: their count was checked against the store's size when the reader opened.
        if let index = zip(computed, recorded.digests).enumerated().first(where: { $1.0 != $1.1 })?.offset {
            let range = recorded.range(ofSegment: index, size: metadata.store.size)
            throw DocumentError(.checksumMismatch, path: path, entry: name,
                                reason: "segment \(index) (bytes \(range.lowerBound)-\(range.upperBound - 1)) does not match its SHA-256 in \(RecordNames(formatVersion: metadata.formatVersion).digests); the bundle is damaged, restore it from a backup")
        }
    }

    /// Refuses a store entry far larger than its own SQLite header says the database is (a valid header followed by
    /// a gigabyte of zeros), once the header's 100 bytes are in, before the rest is inflated.
    private func checkDeclaredSize(_ entry: BundleEntry, head: [UInt8]) throws {
        guard entry.role == .store, let declared = StoreHeader(head)?.declaredSize,
              entry.size > StoreHeader.sizeBound(declared: declared)
        else { return }
        throw DocumentError(.sizeMismatch, path: path, entry: entry.name,
                            reason: "is \(entry.size) bytes, but its SQLite header says the database is \(declared) bytes; a store that far past its own size is refused (a decompression bomb, or damage)")
    }

    /// The store entry's restart index when its segments can be inflated on several cores here; `nil` when the
    /// entry is inflated in one stream by libarchive.
    private func parallelRestarts(for entry: BundleEntry) -> DocumentMetadata.DeflateRestarts? {
        guard entry.role == .store, entry.isCompressed, case .used = restartIndex,
              let restarts = metadata.store.deflateRestarts, DeflateBounds.availableCores > 1,
              (ParallelInflater.minInterval...ParallelInflater.maxInterval).contains(restarts.interval)
        else { return nil }
        return restarts  // checked against the entry when the reader opened
    }

    /// Inflates `entry` on several cores; returns the SHA-256 of its bytes (when `hashing`) after checking their
    /// CRC-32, and each restart segment's against its recorded CRC-32 (format version 2).
    private func inflateInParallel(_ entry: BundleEntry, restarts: DocumentMetadata.DeflateRestarts, hashing: Bool,
                                   consume: (UnsafeRawBufferPointer) throws -> Void) throws -> String? {
        let result: ParallelInflater.Result
        do {
            let inflater = try ParallelInflater(workers: DeflateBounds.availableCores, interval: restarts.interval)
            result = try inflater.inflate(descriptor, dataOffset: entry.dataOffset, size: entry.size,
                                          compressedSize: entry.compressedSize, restarts: restarts, hashing: hashing,
                                          consume: consume)
        } catch let failure as ParallelInflater.Failure {
            switch failure {
            case .segment(let index, .overflow):
                throw DocumentError(.sizeMismatch, path: path, entry: entry.name,
                                    reason: "segment \(index) inflates to more than its share of the \(entry.size) bytes its header declares (a zip bomb, or damage); stopped")
            case .segment(let index, .misplacedEnd):
                throw DocumentError.corrupt("segment \(index) of the deflate stream does not end where the metadata's restart index says",
                                            path: path, entry: entry.name)
            case .segment(let index, .invalid):
                throw DocumentError.corrupt("segment \(index) of the deflate stream is not valid deflate data",
                                            path: path, entry: entry.name)
            case .segmentSize(let index, let produced, let expected):
                throw DocumentError(.sizeMismatch, path: path, entry: entry.name,
                                    reason: "segment \(index) inflates to \(produced) bytes, not \(expected); the bundle is damaged")
            case .segmentCRC(let index):
                throw DocumentError(.checksumMismatch, path: path, entry: entry.name,
                                    reason: "restart segment \(index) does not match its CRC-32 in \(RecordNames(formatVersion: metadata.formatVersion).crc32s); the bundle is damaged, restore it from a backup")
            case .segmentCompressedCRC(let index):
                throw DocumentError(.checksumMismatch, path: path, entry: entry.name,
                                    reason: "restart segment \(index)'s compressed bytes do not match their CRC-32C in \(RecordNames(formatVersion: metadata.formatVersion).compressedCRC32Cs); the bundle is damaged, restore it from a backup")
            case .truncated:
                throw DocumentError(.truncatedArchive, path: path, entry: entry.name,
                                    reason: "the archive ends before the entry's data does; the bundle is truncated")
            case .io(let errno):
                throw DocumentError.io("cannot read the archive", path: path, errno: errno)
            case .outOfMemory:
                throw DocumentError(.ioFailure, path: path, entry: entry.name,
                                    reason: "zlib could not allocate memory to inflate the entry; nothing was written")
            }
        }
        guard result.crc32 == entry.crc32 else {
            throw DocumentError(.checksumMismatch, path: path, entry: entry.name,
                                reason: "the entry's CRC-32 does not match its data; the bundle is damaged, restore it from a backup")
        }
        return result.sha256
    }

    /// Creates `directory` or checks that it is empty. Returns whether it was created.
    @_spi(Core) public static func prepareEmptyDirectory(_ directory: FilePath) throws -> Bool {
        if let status = try FileSystem.status(directory) {
            if status.kind == .symlink {
                throw DocumentError(.alreadyExists, path: directory,
                                    reason: "is a symbolic link; extract into a real folder (a link is never followed)")
            }
            guard status.kind == .directory, try FileSystem.contentsOfDirectory(directory).isEmpty else {
                throw DocumentError(.alreadyExists, path: directory,
                                    reason: "exists and is not an empty folder; extract into a new or empty folder")
            }
            return false
        }
        try FileSystem.createDirectory(directory)
        return true
    }
}

/// Where ``BundleReader/extractStore(to:)`` put the loose store.
public struct ExtractedStore: Sendable {
    /// The loose SQLite store.
    public var store: FilePath
    /// Its Core Data external-data folder, `.<stem>_SUPPORT/_EXTERNAL_DATA`, when the bundle had external data.
    public var externalData: FilePath?
}

extension BundleReader {
    /// Extracts the store as a loose SQLite file, with its Core Data external data beside it.
    ///
    /// Everything is extracted and checked in a private folder beside `store` first; the store is then linked into
    /// place (never replacing an existing file) and flushed. External data goes to `.<stem>_SUPPORT/_EXTERNAL_DATA`
    /// beside the store, where Core Data looks for it.
    ///
    /// ```swift
    /// try BundleReader(at: "Notes.mdz").extractStore(to: "Notes.sqlite")
    /// ```
    ///
    /// - Throws: ``DocumentError/Code/alreadyExists`` when the store or its external-data folder exists, and the
    ///   codes of ``extract(into:)``.
    public func extractStore(to store: FilePath) throws -> ExtractedStore {
        guard try !FileSystem.exists(store) else {
            throw DocumentError(.alreadyExists, path: store, reason: "already exists; choose another name")
        }
        let parent = store.removingLastComponent()
        let folder: FilePath = parent.isEmpty ? "." : parent
        try FileSystem.createDirectory(folder)
        let stem = store.stem ?? "store"
        let hasExternalData = entries.contains { if case .externalData = $0.role { return true } else { return false } }
        let support = folder.appending(".\(stem)_SUPPORT")
        let external = support.appending("_EXTERNAL_DATA")
        if hasExternalData, try FileSystem.exists(external) {
            throw DocumentError(.alreadyExists, path: external, reason: "already exists; move it away first")
        }
        let scratch = try FileSystem.makeTemporaryDirectory(in: folder, prefix: ".extract-")
        defer { try? FileSystem.removeTree(scratch) }  // Squash cleanup error: the result is what counts.
        let extracted = try extract(into: scratch)
        let descriptor = try FileSystem.openForReading(extracted.store)
        try FileSystem.sync(descriptor, path: extracted.store)
        try? descriptor.close()  // Squash close error: the data is flushed.
        if hasExternalData, let source = extracted.externalData {
            try FileSystem.createDirectory(support)
            try FileSystem.rename(source, to: external)
            try FileSystem.syncDirectory(support)
        }
        try FileSystem.link(extracted.store, to: store)
        try FileSystem.syncDirectory(folder)
        return ExtractedStore(store: store, externalData: hasExternalData ? external : nil)
    }
}

extension BundleReader {
    /// The store, extracted and checked as ``extract(into:)`` checks it (sizes, CRC-32, the SQLite header, SHA-256
    /// or segment digests, streamed in bounded buffers), into a file without a name in `folder` (`O_TMPFILE`; where
    /// the file system has none, a file unlinked before its first byte): nothing is left on disk when the process
    /// dies at any instant, and the space is freed when the returned descriptor is closed. The free space of `folder`
    /// is checked first: a store larger than it is refused before a byte is written.
    ///
    /// - Returns: the descriptor, open for reading and writing, and the time the extraction took.
    @_spi(Core)
    public func extractStoreUnnamed(in folder: FilePath) throws -> (descriptor: FileDescriptor, seconds: Double) {
        let started = ContinuousClock.now
        let size = metadata.store.size
        let descriptor = try FileSystem.unnamedTemporaryFile(in: folder)
        do {
            if let free = FileSystem.freeBytes(descriptor), Int64(clamping: free) < size {
                throw DocumentError(.ioFailure, path: folder, entry: BundleLayout.store,
                                    reason: "has \(free) bytes free, and the store to extract from \(path) takes \(size); free some space or point TMPDIR at a larger folder",
                                    underlyingError: Errno.noSpace)
            }
            try streamEntries(into: nil, checkingSegments: true, storeOutput: (descriptor, folder)) { _ in false }
        } catch {
            try? descriptor.close()  // Squash close error: the file has no name, and the failure is what counts.
            throw error
        }
        let elapsed = ContinuousClock.now - started
        return (descriptor, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
}
