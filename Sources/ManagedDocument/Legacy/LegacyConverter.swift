import Foundation
import GRDB
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// What happens to a legacy store's files once its bundle is durable and verified.
public enum LegacyPolicy: String, Sendable, Codable, CaseIterable {
    /// Leave them where they are.
    case keep
    /// Move them into a backup folder (the default): a folder of their own, `NAME.KEY` (`KEY` from a digest of every
    /// file converted; numbered rather than shared when it holds files of the same names), with moves that never
    /// replace a file.
    case backup
    /// Delete them.
    case delete
}

/// How ``LegacyConverter`` converts.
public struct ConversionOptions: Sendable {
    /// What happens to the legacy files after the bundle is safe. Default: ``LegacyPolicy/backup``.
    public var legacyPolicy: LegacyPolicy = .backup
    /// Where backups go. Default: a `docconvert-backup` folder beside the source.
    public var backupDirectory: FilePath?
    /// Compression of the bundle.
    public var writing = WritingOptions()
    /// How long to wait for another process to close or finish writing the store (seconds). Default: 5.
    public var busyTimeout: Double = 5
    /// The bundle's media type.
    public var mediaType = BundleLayout.defaultMediaType
    /// The model recorded in the new document.
    public var model = DocumentMetadata.Model()
    /// Whether the conversion lists the bundle's folder for temporaries that crashed conversions left. A batch walk
    /// removes those as it meets them, so its conversions need not list every folder once per store.
    var removesStaleTemporaries = true

    /// The defaults: legacy files backed up beside the source, a 5-second busy timeout.
    public init() {}

    /// The longest ``busyTimeout``: one day.
    public static let maximumBusyTimeout = 86_400.0

    /// Refuses options no conversion can follow (``DocumentError/Code/invalidArgument``), before anything is read or
    /// written.
    func validate(for target: FilePath) throws {
        guard busyTimeout >= 0, busyTimeout <= Self.maximumBusyTimeout else {
            throw DocumentError(.invalidArgument, path: target,
                                reason: "busyTimeout is \(busyTimeout); give seconds from 0 to \(Int(Self.maximumBusyTimeout)); nothing was converted")
        }
        try writing.validate(for: target)
    }
}

/// What one conversion did.
public struct ConversionReport: Sendable, Codable, Equatable {
    /// `converted`, or `alreadyConverted` when an earlier run had made the bundle.
    public enum Outcome: String, Sendable, Codable {
        /// This call converted the store.
        case converted
        /// An earlier run had made the bundle; this call completed what was left (the disposal), if anything.
        case alreadyConverted
    }

    /// Whether this call converted the store or found it converted.
    public var outcome: Outcome
    /// The legacy store or package, as given.
    public var source: String
    /// What the source was.
    public var kind: LegacyStore.Kind
    /// The bundle written or found.
    public var bundle: String
    /// Bytes of every source file.
    public var sourceBytes: Int64
    /// Bytes of the bundle.
    public var bundleBytes: Int64
    /// The bundle's store digest (`store.digest`, FORMAT.md 13.1; `store.sha256` for a version 1 bundle found
    /// converted).
    public var storeDigest: String
    /// Rows per table, as SQLite read them from the source (with its `-wal`) and from the copy.
    public var rowCounts: [String: Int]
    /// What was done with the legacy files.
    public var legacyPolicy: LegacyPolicy
    /// Where the legacy files went, for ``LegacyPolicy/backup``.
    public var backupLocation: String?
    /// The legacy files moved or deleted.
    public var disposedFiles: [String]
    /// Things worth knowing that did not stop the conversion, in words.
    public var warnings: [String]
    /// Seconds.
    public var duration: Double
    /// SHA-256 of the source's main store file, as converted (from the provenance).
    public var sourceSHA256: String? = nil
}

/// Converts legacy SQLite stores and UIManagedDocument packages into bundles, losing nothing.
///
/// The protocol, step by step:
/// 1. The store's files are copied into a private working folder beside the bundle while no process can commit
///    to the store (see SourceSnapshot), hashing each for the provenance. The source is only read.
/// 2. SQLite recovers the copy: committed transactions in the `-wal` are included, a hot `-journal` is rolled
///    back. Row counts are taken, the copy is switched out of WAL mode (with its rollback journal in memory: the
///    copy is private), passes `PRAGMA integrity_check` and must have the same schema and row counts as before.
/// 3. The bundle is written aside, verified, and renamed into place (``BundleWriter``).
/// 4. Only then are the legacy files kept, backed up or deleted, by policy: under a lock on the store, and only when
///    no other process has it open (SQLite's locks, and `/proc` for a connection idle without a lock); otherwise
///    the bundle is withdrawn and the conversion fails as ``DocumentError/Code/storeBusy``.
///
/// A crash at any point leaves the legacy store, or a complete bundle, or both; running the same conversion
/// again removes leftovers, recognises a finished bundle by its provenance checksums, and completes the disposal.
///
/// ```swift
/// var options = ConversionOptions()
/// options.legacyPolicy = .keep
/// let report = try LegacyConverter(options: options).convert(storeAt: "Notes.sqlite")
/// print(report.bundle, report.rowCounts)
/// ```
public struct LegacyConverter: Sendable {
    /// The options every conversion of this converter uses.
    public var options: ConversionOptions
    /// Where each conversion's steps are logged.
    public var logger: Logger

    /// A converter with these options; `logger` defaults to none.
    public init(options: ConversionOptions = ConversionOptions(),
                logger: Logger = Logger(label: "ManagedDocument.convert", factory: { _ in SwiftLogNoOpLogHandler() })) {
        self.options = options
        self.logger = logger
    }

    /// Detects what `source` is and converts it.
    ///
    /// When `source` no longer exists but a bundle made from it does (a run that crashed while disposing of the
    /// legacy files), the disposal is completed and the outcome is ``ConversionReport/Outcome/alreadyConverted``.
    ///
    /// - Throws: ``DocumentError/Code/notALegacyStore`` for bundles, sidecars and files that are not SQLite stores;
    ///   and the codes of ``convert(_:to:)``.
    public func convert(storeAt source: FilePath, to bundle: FilePath? = nil) throws -> ConversionReport {
        if try !FileSystem.exists(source) {
            let name = source.lastComponent?.string ?? ""
            let target = bundle ?? LegacyStore(source: source, store: source, isPackage: false, sidecars: [],
                                               packageFiles: []).defaultBundlePath
            if try FileSystem.exists(target), let reader = try? BundleReader(at: target),  // not a bundle: say "not found"
               let provenance = reader.metadata.provenance, provenance.fileName == name {
                try AtomicFile.removeStaleTemporaries(for: target)
                return try finishEarlierConversion(source: source, reader: reader, provenance: provenance)
            }
            throw DocumentError(.notFound, path: source, reason: "no such file or folder")
        }
        switch try LegacyDetector.detect(at: source) {
        case .legacyStore(let legacy):
            return try convert(legacy, to: bundle)
        case .bundle:
            throw DocumentError(.notALegacyStore, path: source, reason: "is already a document bundle; nothing to convert")
        case .sidecar(let store):
            let hint = store.map { "; convert its store, \($0)" } ?? ", and its store is missing"
            throw DocumentError(.notALegacyStore, path: source, reason: "is a SQLite sidecar file\(hint)")
        case .notAStore(let reason):
            throw DocumentError(.notALegacyStore, path: source, reason: "is \(reason), not a legacy store; it was not touched")
        }
    }

    /// Converts a store a walk detected earlier (``LegacyDetector/detect(at:)``), now that the caller holds the
    /// document's lock: it is looked at again only as far as it can have changed since. Gone (another worker
    /// converted it and disposed of it meanwhile), no longer a regular file, or a package: as
    /// ``convert(storeAt:to:)``. Otherwise its sidecars and support folder are grouped again, and its first bytes are
    /// read once more by the snapshot, under SQLite's lock (``DocumentError/Code/notSQLite`` when it is no longer a
    /// SQLite file).
    func convert(detected legacy: LegacyStore, to bundle: FilePath) throws -> ConversionReport {
        guard !legacy.isPackage, let status = try FileSystem.status(legacy.store), status.kind == .regular else {
            return try convert(storeAt: legacy.source, to: bundle)
        }
        return try convert(LegacyDetector.group(store: legacy.store, source: legacy.source, isPackage: false), to: bundle)
    }

    /// Converts a detected legacy store into a bundle at `bundle` (default: beside it, with the `.mdz` extension).
    ///
    /// - Throws: ``DocumentError``: ``DocumentError/Code/storeBusy`` (in use past the timeout),
    ///   ``DocumentError/Code/storeCorrupt`` and ``DocumentError/Code/notSQLite`` (the source is damaged; it is left
    ///   as it was), ``DocumentError/Code/verificationFailed``, ``DocumentError/Code/alreadyExists`` (a different
    ///   file is at the destination), ``DocumentError/Code/cannotCreate`` and ``DocumentError/Code/ioFailure``. In
    ///   every case the legacy files are unchanged.
    public func convert(_ legacy: LegacyStore, to bundle: FilePath? = nil) throws -> ConversionReport {
        let started = Date()
        let target = bundle ?? legacy.defaultBundlePath
        try options.validate(for: target)
        logger.debug("convert.start", metadata: ["source.path": "\(legacy.source)", "bundle.path": "\(target)"])
        // Whatever an earlier, interrupted run of this conversion left behind goes first.
        if options.removesStaleTemporaries { try AtomicFile.removeStaleTemporaries(for: target) }
        if try FileSystem.exists(target) {
            return try resume(legacy, at: target, started: started)
        }

        var scratchFolder: ScratchDirectory?
        func scratch() throws -> FilePath {
            if scratchFolder == nil { scratchFolder = try ScratchDirectory(besides: target, removingStale: false) }
            return scratchFolder!.path
        }
        // A store that needs no recovery is read in place, under a lock, when SQLite can open it as immutable.
        let immutableURI = StoreInspector.immutableURI(legacy.store)
        var snapshot = try SourceSnapshot.capture(legacy, into: scratch, inPlaceAllowed: immutableURI != nil,
                                                  busyTimeout: options.busyTimeout)
        defer { snapshot.release() }
        var storeSize = snapshot.storeSize
        var inPlace: Recovered?
        var image: InMemoryStore?  // a small store (in place, or its recovered copy): read once, checked, packed
        if snapshot.isInPlace, let immutableURI {
            image = try snapshot.inPlaceImage(atMost: Self.inMemoryLimit)
            inPlace = try inspectInPlace(legacy.store, uri: immutableURI,
                                         fullCheck: storeSize < Self.backgroundCheckThreshold, image: image)
            if inPlace == nil {  // SQLite would not open it that way: copied, as any other store
                image = nil
                snapshot.release()
                snapshot = try SourceSnapshot.capture(legacy, into: scratch, inPlaceAllowed: false,
                                                      busyTimeout: options.busyTimeout)
                storeSize = snapshot.storeSize
            }
        }
        let (checked, check, copyImage) = try checkStore(legacy, copy: snapshot.store, inPlace: inPlace,
                                                         immutableURI: immutableURI,
                                                         inBackground: storeSize >= Self.backgroundCheckThreshold)
        var recovered = checked
        image = image ?? copyImage
        defer { _ = try? check?.result() }  // the check reads the store: it ends before the lock or scratch goes
        // Pack: what goes into the bundle besides the store, described in the provenance.
        var files = snapshot.files
        var warnings: [String] = []
        let extra = try gatherContent(of: legacy, into: &files, warnings: &warnings, scratch: scratch)
        let kind: LegacyStore.Kind = legacy.isPackage ? .uiManagedDocumentPackage
            : (recovered.isCoreData ? .coreDataSQLite : .sqlite)
        let metadata = newMetadata(legacy, kind: kind, files: files, recovered: recovered,
                                   packageMetadata: extra.packageMetadata, warnings: warnings)
        let staged = try BundleWriter.stage(packing(legacy, snapshot: snapshot, image: image, metadata: metadata,
                                                    additionalContent: extra.additionalContent,
                                                    facts: recovered.facts, to: target))
        // Check: the bundle takes its name only once the copy passed SQLite's integrity check.
        if let check { recovered.facts = try check.result() }
        try staged.commit()
        let written = staged.metadata
        snapshot.release()  // writers may commit again: the bundle holds the state that was locked
        let provenance = written.provenance!
        try checkExternalDataUnchanged(files, packedAs: written, bundle: target, legacy: legacy)
        logger.debug("convert.written", metadata: ["bundle.path": "\(target)", "bundle.storeDigest": "\(written.store.contentDigest)"])

        // Commit is done (the bundle has its name); dispose of the legacy files, or withdraw the bundle.
        let disposal = try disposeOrWithdraw(legacy, provenance: provenance, stamps: snapshot.stamps, bundle: target)
        return ConversionReport(
            outcome: .converted, source: legacy.source.string, kind: kind,
            bundle: target.string, sourceBytes: provenance.size,
            bundleBytes: staged.fileSize, storeDigest: written.store.contentDigest,
            rowCounts: recovered.facts.rowCounts, legacyPolicy: options.legacyPolicy,
            backupLocation: disposal.location?.string, disposedFiles: disposal.files, warnings: warnings,
            duration: Date().timeIntervalSince(started), sourceSHA256: provenance.mainFileSHA256)
    }

    // MARK: Steps of a conversion

    /// Pack: the bundle of `snapshot`'s store (its `image` when it was read whole already) with the legacy store's
    /// external data and `additionalContent`, no more readable than the store was.
    private func packing(_ legacy: LegacyStore, snapshot: SourceSnapshot, image: InMemoryStore?,
                         metadata: DocumentMetadata, additionalContent: FilePath?, facts: StoreFacts,
                         to target: FilePath) -> BundleWriter.Request {
        var request = BundleWriter.Request(
            image.map { .inMemory($0) } ?? .file(snapshot.store),
            folders: BundleContent(store: snapshot.store, externalData: legacy.externalData,
                                   additionalContent: additionalContent),
            metadata: metadata, to: target, options: writingOptions)
        request.storeFacts = facts
        request.permissionsOf = legacy.store
        request.hashingStoreWhole = snapshot.isInPlace
        request.completingMetadata = { metadata, store in
            // > Read in place, the main file's SHA-256 is that of the bytes just packed (one read, under the lock).
            let files = try snapshot.completingMainFile(in: metadata.provenance?.files ?? [], sha256: store.sha256,
                                                        size: store.size, legacy: legacy)
            metadata.provenance?.files = files
        }
        return request
    }


    /// Check: the store's facts as SQLite reads them (after recovery, for a copy), and its integrity check: before
    /// anything is written for a small store; for a large one (`inBackground`), on a thread of its own while the
    /// bundle is written aside, which takes its name only once the check has passed. A store read in place was
    /// checked whole by `inspectInPlace` unless it is large. A copy of at most ``inMemoryLimit`` bytes after its
    /// recovery is read whole once and checked in memory; that image is returned to be packed.
    private func checkStore(_ legacy: LegacyStore, copy: FilePath, inPlace: Recovered?, immutableURI: String?,
                            inBackground: Bool) throws -> (Recovered, CopyCheck?, InMemoryStore?) {
        if let inPlace, let immutableURI {
            let check = inBackground
                ? CopyCheck(copy: legacy.store, source: legacy.store, before: inPlace.facts, inBackground: true,
                            immutableURI: immutableURI)
                : nil
            return (inPlace, check, nil)
        }
        var recovered = try recover(copy, source: legacy.store)
        if !inBackground, let image = try InMemoryStore.whole(copy, atMost: Self.inMemoryLimit) {
            recovered.facts = try CopyCheck.check(image, copy: copy, source: legacy.store, before: recovered.facts)
            return (recovered, nil, image)
        }
        let check = CopyCheck(copy: copy, source: legacy.store, before: recovered.facts, inBackground: inBackground)
        if !check.isInBackground { recovered.facts = try check.result() }
        return (recovered, check, nil)
    }

    /// Pack: the new document's metadata, its provenance saying what was converted (the files read, Core Data's
    /// metadata, a package's own).
    private func newMetadata(_ legacy: LegacyStore, kind: LegacyStore.Kind, files: [DocumentMetadata.Entry],
                             recovered: Recovered, packageMetadata: [String: JSONValue]?,
                             warnings: [String]) -> DocumentMetadata {
        var metadata = DocumentMetadata(documentID: UUID.random(), mediaType: options.mediaType,
                                        model: options.model)
        metadata.provenance = DocumentMetadata.Provenance(
            kind: kind.rawValue,
            fileName: legacy.source.lastComponent?.string ?? legacy.source.string,
            size: files.reduce(0) { $0 + $1.size }, files: files, convertedAt: Date(),
            coreData: recovered.coreData, packageMetadata: packageMetadata,
            warnings: warnings.isEmpty ? nil : warnings)
        return metadata
    }

    /// Pack, what besides the store: the digests of the Core Data external data (packed from where it is) and a
    /// package's other files, copied into `AdditionalContent/` in the scratch folder. Adds each to `files` (the
    /// provenance's list) and returns the folder and the package's decoded `DocumentMetadata.plist`.
    private func gatherContent(of legacy: LegacyStore, into files: inout [DocumentMetadata.Entry],
                               warnings: inout [String], scratch: () throws -> FilePath) throws
        -> (additionalContent: FilePath?, packageMetadata: [String: JSONValue]?) {
        if let external = legacy.externalData {
            for (_, path) in try BundleWriter.contentFiles(in: external, prefix: BundleLayout.externalDataPrefix) {
                let digest = try FileDigest(of: path)
                files.append(.init(name: SourceSnapshot.relativeName(path, in: legacy), size: digest.size,
                                   sha256: digest.sha256))
            }
        }
        var additional: FilePath?
        var packageMetadata: [String: JSONValue]?
        if legacy.isPackage {
            var carried = legacy.packageFiles
            if let plist = legacy.packageMetadata {
                carried.append("DocumentMetadata.plist")
                packageMetadata = Self.decodePlist(at: plist, warnings: &warnings)
            }
            if !carried.isEmpty {
                let folder = try scratch().appending("AdditionalContent")
                for relative in carried.sorted() {
                    // The package's own AdditionalContent/ folder becomes the bundle's; other files go inside it.
                    let inBundle = relative.hasPrefix(BundleLayout.additionalContentPrefix)
                        ? String(relative.dropFirst(BundleLayout.additionalContentPrefix.count)) : relative
                    let destination = folder.appending(inBundle)
                    if try FileSystem.exists(destination) {
                        throw DocumentError(.entryNotAllowed, path: legacy.source, entry: relative,
                                            reason: "would land on the same AdditionalContent/ entry as another package file; nothing was changed")
                    }
                    try FileSystem.createDirectory(destination.removingLastComponent())
                    let digest = try FileSystem.copyFile(legacy.source.appending(relative), to: destination)
                    files.append(.init(name: relative, size: digest.size, sha256: digest.sha256))
                }
                additional = folder
            }
        }
        files.sort { $0.name < $1.name }
        return (additional, packageMetadata)
    }

    /// Check, after packing: external data is read twice (hashed, then packed); both reads must agree, or the source
    /// changed meanwhile and the bundle just written is removed.
    private func checkExternalDataUnchanged(_ files: [DocumentMetadata.Entry], packedAs written: DocumentMetadata,
                                            bundle target: FilePath, legacy: LegacyStore) throws {
        let packed = Dictionary(written.entries.map { ($0.name, $0.sha256) }, uniquingKeysWith: { first, _ in first })
        for file in files where file.name.contains("_EXTERNAL_DATA/") {
            let entry = BundleLayout.externalDataPrefix + String(file.name.split(separator: "_EXTERNAL_DATA/", maxSplits: 1).last ?? "")
            if packed[entry] != file.sha256 {
                try? FileSystem.removeFile(target)  // Cleanup after a first error: the bundle is ours, just written.
                throw DocumentError(.verificationFailed, path: legacy.source, entry: file.name,
                                    reason: "the external data changed while it was being converted; nothing was changed, try again")
            }
        }
    }

    /// Dispose: once the bundle has its name, the legacy files are kept, backed up or deleted by policy. When the
    /// source is written again meanwhile (or cannot go), the bundle may not hold its last state: the bundle is
    /// withdrawn and the legacy files stay, as if never converted.
    private func disposeOrWithdraw(_ legacy: LegacyStore, provenance: DocumentMetadata.Provenance,
                                   stamps: [FileStamp], bundle target: FilePath) throws
        -> (location: FilePath?, files: [String]) {
        do {
            return try dispose(legacy, provenance: provenance, unchangedSince: stamps)
        } catch let error as DocumentError where error.code == .storeBusy {
            try? FileSystem.removeFile(target)  // Cleanup after a first error: the bundle is ours, just written.
            try? FileSystem.syncDirectory(target.removingLastComponent().isEmpty ? "." : target.removingLastComponent())
            throw DocumentError(.storeBusy, path: error.path,
                                reason: "\(error.reason); the new bundle was removed and the legacy files were left as they were; run the same command again when the store is closed")
        }
    }

    private var writingOptions: WritingOptions {
        var writing = options.writing
        writing.removesStaleTemporaries = false  // done above, before anything was written
        return writing
    }

    // MARK: Recovery

    /// Stores at least this large are checked while their bundle is written (see ``CopyCheck``).
    static let backgroundCheckThreshold: Int64 = 4 << 20

    /// Stores read in place up to this size are read once, whole, under the lock: SQLite checks those bytes in memory
    /// and the bundle packs them (one read instead of one per page and another to pack; 1 MiB per job at most).
    static let inMemoryLimit: Int64 = 1 << 20

    struct Recovered {
        /// The copy's facts: as SQLite read them after recovery, then as the integrity check found them.
        var facts: StoreFacts
        var isCoreData: Bool
        var coreData: DocumentMetadata.CoreDataInfo?
    }

    /// Reads a store in place (``SourceSnapshot/isInPlace``, so under the snapshot's lock) through one immutable,
    /// read-only connection: its facts and Core Data metadata, and, with `fullCheck`, `PRAGMA integrity_check`.
    /// `nil` when SQLite cannot open it that way at all (the caller copies it instead).
    /// With `image`, the store's bytes read whole under the lock: SQLite reads them in memory, not the file.
    private func inspectInPlace(_ store: FilePath, uri: String, fullCheck: Bool, image: InMemoryStore?) throws -> Recovered? {
        do {
            let queue = try image.map(StoreInspector.openInMemory)
                ?? StoreInspector.openReadOnly(store, isPrivate: true, immutableURI: uri)
            let recovered = try queue.read { db in
                if fullCheck {
                    let problems = try StoreInspector.check(db, full: true)
                    guard problems.isEmpty else {
                        throw DocumentError(.storeCorrupt, path: store,
                                            reason: "the store fails SQLite's integrity check; it was left exactly as it was (SQLite finds the store damaged: \(problems.prefix(3).joined(separator: "; ")))")
                    }
                }
                let isCoreData = try CoreDataMetadata.isCoreDataStore(db)
                return Recovered(facts: try StoreInspector.facts(db), isCoreData: isCoreData,
                                 coreData: isCoreData ? try CoreDataMetadata.read(db) : nil)
            }
            try queue.close()
            return recovered
        } catch let error as DatabaseError {
            if error.resultCode == .SQLITE_CANTOPEN { return nil }
            let code: DocumentError.Code = error.resultCode == .SQLITE_NOTADB ? .notSQLite : .storeCorrupt
            throw DocumentError(code, path: store,
                                reason: "SQLite cannot read the store; it is damaged or truncated and was left exactly as it was",
                                underlyingError: error)
        }
    }

    /// Lets SQLite recover the private copy (replay its `-wal`, roll back a hot `-journal`), reads its facts, and
    /// makes it self-contained (`journal_mode = MEMORY`: out of WAL mode, header bytes 18 and 19 set to 1, as
    /// `DELETE` would, without a journal file for the change). ``CopyCheck`` then proves nothing was lost doing so.
    private func recover(_ copy: FilePath, source: FilePath) throws -> Recovered {
        do {
            var configuration = Configuration()
            configuration.label = "ManagedDocument.recover"
            // The copy is private scratch: after a crash it is discarded, never trusted, and the bundle made from
            // it is flushed and verified on its own. So SQLite need not flush it (it did 7 times per store), and the
            // connection keeps its lock throughout: no lock, journal and -wal checks around every statement, and
            // the -wal's index lives in memory instead of a new -shm file. The locking mode comes first: `synchronous`
            // reads the schema, and a -wal opened before the connection is exclusive gets a -shm file after all.
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE; PRAGMA synchronous = OFF; PRAGMA cache_size = -512")
            }
            let queue = try DatabaseQueue(path: copy.string, configuration: configuration)
            let recovered = try queue.writeWithoutTransaction { db in
                let facts = try StoreInspector.facts(db)
                let isCoreData = try CoreDataMetadata.isCoreDataStore(db)
                let coreData = isCoreData ? try CoreDataMetadata.read(db) : nil
                // > A private copy needs no journal file: a crash discards it (a rollback journal in memory is
                // > enough for the one transaction that sets the header out of WAL mode).
                let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = MEMORY")
                guard mode?.lowercased() == "memory" else {
                    throw DocumentError(.verificationFailed, path: source,
                                        reason: "SQLite could not make the copy self-contained (journal mode \(mode ?? "?")); nothing was changed")
                }
                return Recovered(facts: facts, isCoreData: isCoreData, coreData: coreData)
            }
            try queue.close()
            return recovered
        } catch let error as DatabaseError {
            let code: DocumentError.Code = error.resultCode == .SQLITE_NOTADB ? .notSQLite : .storeCorrupt
            throw DocumentError(code, path: source,
                                reason: "SQLite cannot read the store; it is damaged or truncated and was left exactly as it was",
                                underlyingError: error)
        }
    }

    private static func decodePlist(at path: FilePath, warnings: inout [String]) -> [String: JSONValue]? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path.string)),
              let plist = try? PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any]
        else {
            warnings.append("DocumentMetadata.plist could not be decoded; it is carried byte for byte in AdditionalContent")
            return nil
        }
        return plist.mapValues(JSONValue.init(propertyList:))
    }

    // MARK: Resuming

    /// A bundle already exists at the destination: it is this conversion's, finished earlier, or a conflict.
    private func resume(_ legacy: LegacyStore, at target: FilePath, started: Date) throws -> ConversionReport {
        let reader: BundleReader
        do {
            reader = try BundleReader(at: target)
        } catch let error as DocumentError {
            // > The reader's reason is said once, in the reason; its error stays reachable without being printed again.
            throw DocumentError(.alreadyExists, path: target,
                                reason: "already exists and is not a valid bundle (\(error.reason)); move it away and convert again",
                                underlyingError: error.underlyingError)
        }
        guard let provenance = reader.metadata.provenance,
              provenance.fileName == legacy.source.lastComponent?.string
        else {
            throw DocumentError(.alreadyExists, path: target,
                                reason: "already exists and was not made from \(legacy.source); choose another --output")
        }
        // The files that are still there must be the ones converted (a -shm changes with every reader: skipped).
        let stamps = try SourceSnapshot.stamps(of: legacy)  // checked again, under a lock, before disposal
        let recorded = Dictionary(provenance.files.map { ($0.name, $0.sha256) }, uniquingKeysWith: { first, _ in first })
        for path in [legacy.store] + legacy.sidecars where !path.string.hasSuffix("-shm") {
            let name = SourceSnapshot.relativeName(path, in: legacy)
            let digest = try FileDigest(of: path)
            if let sha = recorded[name], sha == digest.sha256 { continue }
            if path.string.hasSuffix("-journal") || path.string.hasSuffix("-wal"), recorded[name] == nil, digest.size == 0 {
                continue
            }
            throw DocumentError(.alreadyExists, path: target,
                                reason: "was converted from an earlier state of \(legacy.source), which has changed since; move the bundle away to convert again")
        }
        return try finishEarlierConversion(source: legacy.source, reader: reader, provenance: provenance,
                                           legacy: legacy, stamps: stamps, started: started)
    }

    private func finishEarlierConversion(source: FilePath, reader: BundleReader,
                                         provenance: DocumentMetadata.Provenance, legacy: LegacyStore? = nil,
                                         stamps: [FileStamp] = [], started: Date = Date()) throws -> ConversionReport {
        let remaining = legacy ?? LegacyDetector.leftovers(of: source, provenance: provenance)
        let disposal = try dispose(remaining, provenance: provenance, unchangedSince: stamps)
        return ConversionReport(
            outcome: .alreadyConverted, source: source.string,
            kind: LegacyStore.Kind(rawValue: provenance.kind) ?? .sqlite, bundle: reader.path.string,
            sourceBytes: provenance.size, bundleBytes: Int64(reader.fileSize),
            storeDigest: reader.metadata.store.contentDigest, rowCounts: [:], legacyPolicy: options.legacyPolicy,
            backupLocation: disposal.location?.string, disposedFiles: disposal.files, warnings: [],
            duration: Date().timeIntervalSince(started), sourceSHA256: provenance.mainFileSHA256)
    }
}

extension DocumentMetadata.Provenance {
    /// SHA-256 of the main store file: the loose store, or a package's `StoreContent/persistentStore`.
    public var mainFileSHA256: String? {
        let main = kind == LegacyStore.Kind.uiManagedDocumentPackage.rawValue ? "StoreContent/persistentStore" : fileName
        return files.first { $0.name == main }?.sha256
    }
}

extension JSONValue {
    /// A property-list value as JSON: data becomes base64, dates ISO 8601.
    init(propertyList value: Any) {
        switch value {
        case let value as String: self = .string(value)
        case let value as Bool: self = .bool(value)
        case let value as NSNumber: self = .number(value.doubleValue)
        case let value as Data: self = .string(value.base64EncodedString())
        case let value as Date: self = .string(ISO8601.format(value))
        case let value as [Any]: self = .array(value.map(JSONValue.init(propertyList:)))
        case let value as [String: Any]: self = .object(value.mapValues(JSONValue.init(propertyList:)))
        default: self = .string("\(value)")
        }
    }
}
