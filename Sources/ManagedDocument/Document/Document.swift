#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import GRDB
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// A managed document, opened the way UIManagedDocument opens one: open or create, a legacy store converted
/// first, edits in a private working copy through GRDB, atomic saves, one writer at a time.
///
/// ```swift
/// var options = Document.OpenOptions()
/// options.createIfMissing = true
/// options.legacyStoreLocations = [FilePath("Library/minimalTime.sqlite")]   // where the old release kept it
/// let document = try await Document.open(at: FilePath("Notes.mdz"), options: options)
/// try await document.writer.write { db in try db.execute(sql: "CREATE TABLE IF NOT EXISTS note(text)") }
/// try await document.save()
/// try await document.close()
/// ```
///
/// The bundle on disk only ever changes in ``save()``, which packs the working copy with the write-aside-then-
/// rename protocol: a crash at any moment leaves the previous bundle or the new one, never a mix. Opening for
/// writing takes a lock (see ``OpenOptions/lockTimeout``) and, when the bundle allows, extracts nothing of the store:
/// SQLite reads its pages from the bundle and writes changed pages into the working copy. Read-only opens take no
/// lock and read the bundle they opened (served page by page the same way), so they never block the writer and
/// never change the bundle.
///
/// ## Topics
/// - ``open(at:options:)``
/// - ``withDocument(at:options:_:)``
/// - ``save()``
/// - ``revert()``
/// - ``close(savingChanges:)``
/// - ``State``
public final class Document: Sendable {
    /// What a user can observe about a document.
    public enum State: String, Sendable, Equatable {
        /// Closed: the working copy is gone and the lock released.
        case closed
        /// Open with nothing to save.
        case normal
        /// Open with changes the bundle does not have yet.
        case hasUnsavedChanges
        /// The last save failed; the bundle holds the previous save, the working copy keeps the changes.
        case savingFailed
        /// Open read-only, or too new for this app to write.
        case editingDisabled
    }

    /// What to do with a working copy a crashed process left behind.
    public enum RecoveryPolicy: Sendable {
        /// Throw it away and start from the bundle (default).
        case discard
        /// Keep its unsaved changes when it was made from the bundle as it is now; discard it when those changes are
        /// in the bundle already (saved just before the process died) or it was extracted from another bundle. A
        /// working copy served from the bundle whose changes were made over another bundle than the one there now
        /// (another program replaced the document) is refused with ``DocumentError/Code/metadataMismatch``, and
        /// nothing is removed: open with ``discard`` to drop those changes.
        case recover
    }

    /// How a document is opened.
    public struct OpenOptions: Sendable {
        /// Open for reading only: no lock, no writes, the bundle is never changed. The store is read in place from the
        /// bundle (each segment checked against its digest as SQLite asks for it), or extracted first when the bundle
        /// does not allow that (FORMAT.md 11.4).
        public var isReadOnly = false
        /// Create a new, empty document when neither the bundle nor a legacy store exists.
        public var createIfMissing = false
        /// Where the app's old release kept its store; looked at, in order, when the bundle does not exist.
        /// A store beside the bundle with the same stem (`Notes.sqlite` for `Notes.mdz`) is found without this.
        public var legacyStoreLocations: [FilePath] = []
        /// How a legacy store found there is converted (and what happens to its files). The new document's media type
        /// is this open's ``mediaType``, whatever `conversion.mediaType` says: the open must be able to write it.
        public var conversion = ConversionOptions()
        /// Seconds to wait for another writer to close the document; 0 fails at once with ``DocumentError/Code/inUse``.
        public var lockTimeout: Double = 0
        /// What to do with a crashed process's working copy.
        public var recovery = RecoveryPolicy.discard
        /// Where working copies live; default `$XDG_STATE_HOME/ManagedDocument`, or `~/.local/state/ManagedDocument`
        /// (`$TMPDIR/ManagedDocument-<uid>` only for a user with no home of its own), made 0700: a
        /// folder that a reboot does not empty, so that ``RecoveryPolicy/recover`` finds the commits of a process
        /// that died with the machine (see ``Document/workingCopyIsVolatile``). A read-only open's snapshot, which
        /// holds nothing to recover, goes to `$TMPDIR/ManagedDocument-<uid>`, and so does a writable open's working
        /// copy when the default folder cannot be made (a read-only home), said in the log.
        /// The folder must be a real folder (not a symbolic link) owned by the user, or opens fail with
        /// ``DocumentError/Code/cannotCreate``; each working copy inside it is a 0700 folder with 0600 files.
        public var workingDirectory: FilePath?
        /// How saves compress the bundle. Default: deflate at ``WritingOptions/defaultDeflateLevel``. Whatever it
        /// holds, a save replaces the document's own bundle.
        public var saving = WritingOptions()
        /// Whether a save copies the unchanged segments of the bundle it replaces instead of deflating the whole
        /// store again (FORMAT.md 16.1; ``Document/lastSave`` says which a save did). Default: yes. Turn it off to
        /// have every save deflate everything at ``saving``'s level (reused segments keep the level they were
        /// written at); the open then also skips checking the bundle's segment digests, which only a later
        /// incremental save needs (about a fifth of a 1 GiB document's open, docs/BENCHMARKS.md).
        public var savesIncrementally = true
        /// Autosave, as UIDocument does: seconds of quiet after the last committed change before the document saves
        /// itself in the background (`nil`, the default: no autosave). Under a steady stream of changes it saves at
        /// least every four intervals; a failed autosave (``State/savingFailed``, with ``Document/lastSaveError``) is
        /// tried again after twice the wait, and again, up to five minutes apart, until one succeeds. Autosaves never
        /// run beside an explicit ``Document/save()``, and ``Document/close(savingChanges:)`` stops them before its
        /// final save. Ignored for read-only opens; a value that is not more than 0 is refused with
        /// ``DocumentError/Code/invalidArgument``.
        public var autosaveInterval: Double?
        /// The model of a document created by this open.
        public var model = DocumentMetadata.Model()
        /// The media type this app writes: a document created by this open gets it, and a writable open of a
        /// bundle of another media type is refused with ``DocumentError/Code/documentTypeMismatch`` (read-only
        /// opens take any).
        public var mediaType = BundleLayout.defaultMediaType
        /// Limits for reading the bundle.
        public var limits = ReadingLimits()
        /// The app's model and migrations, run once each when the document opens for writing. A writable open of a
        /// document of another model (``DocumentError/Code/modelMismatch``) or of a newer version of this one
        /// (``DocumentError/Code/newerModel``) is refused.
        public var migrations: DocumentMigrator?
        /// Whether a writable open serves the store from the bundle through an overlay when the bundle allows it
        /// (FORMAT.md 16.2), instead of extracting it. On by default; off, every writable open extracts the store.
        var servesStoreInPlaceForWriting = true
        /// Logging.
        public var logger = Logger(label: "ManagedDocument.document", factory: { _ in SwiftLogNoOpLogHandler() })

        /// The defaults: an existing writable document, no migrations, no legacy stores, no waiting for a lock.
        public init() {}

        /// The longest ``autosaveInterval``: one week.
        public static let maximumAutosaveInterval = 604_800.0
        /// The longest ``lockTimeout``: one week.
        public static let maximumLockTimeout = 604_800.0

        /// Refuses values no open can follow, before anything is read, locked or written: every number is checked
        /// here so that none can trap later (a conversion to nanoseconds, a count that overflows).
        ///
        /// - Throws: ``DocumentError/Code/invalidArgument``, naming the option and the range it takes.
        func validate(for path: FilePath) throws {
            if let interval = autosaveInterval, !(interval > 0 && interval <= Self.maximumAutosaveInterval) {
                throw DocumentError(.invalidArgument, path: path,
                                    reason: "autosaveInterval is \(interval); give seconds more than 0 and at most \(Int(Self.maximumAutosaveInterval)) (a week), or nil for no autosave")
            }
            guard lockTimeout >= 0, lockTimeout <= Self.maximumLockTimeout else {
                throw DocumentError(.invalidArgument, path: path,
                                    reason: "lockTimeout is \(lockTimeout); give seconds from 0 (do not wait) to \(Int(Self.maximumLockTimeout)) (a week)")
            }
            try saving.validate(for: path)
            try conversion.validate(for: path)
            try limits.validate(for: path)
        }
    }

    /// The bundle's path, with symbolic links resolved: a save replaces the bundle a link points to, never the link.
    public let path: FilePath

    /// Whether this document's working copy, where its commits live until a save, is on a file system held in
    /// memory (tmpfs, ramfs): a crash of the process loses nothing then, but a reboot or a power cut loses every
    /// commit not yet saved, whatever ``RecoveryPolicy`` says. The default ``OpenOptions/workingDirectory`` is on
    /// disk unless `XDG_STATE_HOME` or `HOME` point into memory; a writable open says so once in the log.
    public var workingCopyIsVolatile: Bool { WorkingCopy.isVolatile(workingCopy.directory) }
    /// Whether the document was opened read-only.
    public var isReadOnly: Bool {
        if case .readOnly = access { return true }
        return false
    }
    /// The conversion that created the bundle during this open, when a legacy store was found.
    public let conversionReport: ConversionReport?
    /// Migrations applied during this open, in order.
    public let appliedMigrations: [String]

    /// What changes while the document is open, behind one lock.
    struct Guarded {
        var state: State
        var metadata: DocumentMetadata
        var queue: DatabaseQueue?
        /// The store's file change counter when the bundle last matched the working copy; `nil` when it never did
        /// during this open (a recovered copy).
        var savedChangeCounter: UInt32?
        /// Counts the times `savedChangeCounter` was set, so a counter read before a save is never compared after it.
        var savedGeneration = 0
        /// Set by the first `close()`; every later one returns at once.
        var isClosing = false
        var continuations: [UUID: AsyncStream<State>.Continuation] = [:]
        /// The working copy's `.lock`, held while this document uses it; its inode is this open's ownership token.
        var workingCopyLock: FileDescriptor?
        /// How the last save of this open wrote the store.
        var lastSave: SaveReport?
        /// Why the last save failed, until one succeeds.
        var lastSaveError: DocumentError?
        /// Whether a save is running (an autosave then waits for its next turn).
        var isSaving = false
        /// The autosave loop, while it runs.
        var autosave: Task<Void, Never>?
    }

    /// What this open may do with its store, and how it holds it.
    enum Access: Sendable {
        /// Read only: the store follows the bundle on a revert; no lock, no save.
        case readOnly(any FollowingStore)
        /// Read and written, the document's writer lock held until the close: the store saves and reverts.
        case editable(any EditableStore, lock: DocumentLock)
    }

    /// The working copy an open made, and its connection.
    struct Session {
        /// The connection to the store, the document's for its whole open.
        var queue: DatabaseQueue
        /// The working copy's folder.
        var workingCopy: WorkingCopy
        /// The working copy's `.lock`, held (its inode is this open's ownership token).
        var workingCopyLock: FileDescriptor
    }

    /// What the open did before the document was handed out.
    struct History {
        /// The conversion that created the bundle, when a legacy store was found.
        var conversionReport: ConversionReport?
        /// The migrations applied, in order.
        var appliedMigrations: [String] = []
        /// Whether the working copy holds commits no bundle has (a recovered one).
        var hasUnsavedChanges = false
    }

    let guarded: Protected<Guarded>
    /// What this open may do, and how the store is held (served from the bundle, extracted, or through an overlay):
    /// everything that depends on it is asked of this.
    let access: Access
    let workingCopy: WorkingCopy
    let options: OpenOptions

    /// The store, whichever the access.
    var store: any WorkingStore {
        switch access {
        case .readOnly(let store): return store
        case .editable(let store, _): return store
        }
    }

    init(path: FilePath, access: Access, metadata: DocumentMetadata, session: Session, options: OpenOptions,
         history: History) throws {
        self.path = path
        self.access = access
        self.workingCopy = session.workingCopy
        self.options = options
        self.conversionReport = history.conversionReport
        self.appliedMigrations = history.appliedMigrations
        let state: State, counter: UInt32?
        switch access {
        case .readOnly:
            // > Never edited: its counter is never compared (and a store served from the bundle is not read for it).
            (state, counter) = (.editingDisabled, nil)
        case .editable(let store, _):
            (state, counter) = history.hasUnsavedChanges ? (.hasUnsavedChanges, nil) : (.normal, try store.changeCounter())
        }
        self.guarded = Protected(Guarded(state: state, metadata: metadata, queue: session.queue,
                                         savedChangeCounter: counter, workingCopyLock: session.workingCopyLock))
        let observer = ChangeObserver()  // GRDB keeps it for the connection's life
        observer.document = self
        session.queue.inDatabase { db in db.add(transactionObserver: observer, extent: .databaseLifetime) }
    }

    deinit {
        let (queue, copyLock) = guarded.withLock { ($0.queue, $0.workingCopyLock) }
        try? queue?.close()  // Squash close error: the document was not closed explicitly.
        try? copyLock?.close()  // Squash close error: releasing the lock is all that matters.
        store.close()
        if case .editable(_, let lock) = access { lock.release() }
    }

    /// The document's metadata as of the last open or save.
    public var metadata: DocumentMetadata { guarded.withLock { $0.metadata } }

    /// How the last save of this open wrote the store (`nil` before the first): incremental, when the bundle it
    /// replaced was the one this open verified and its unchanged segments were copied (FORMAT.md 16.1), or full,
    /// with the reason.
    public var lastSave: SaveReport? { guarded.withLock { $0.lastSave } }

    /// Why the last save (explicit or autosave) failed, while the document is ``State/savingFailed``; `nil` once a
    /// save succeeds.
    public var lastSaveError: DocumentError? { guarded.withLock { $0.lastSaveError } }

    /// For a read-only document, whose store SQLite reads straight from the bundle: why the last failed read of
    /// the store failed (a segment that does not match its digest, with the bundle, the entry and the segment named),
    /// once one has. SQLite reports such a read to the app as an I/O error (`SQLITE_IOERR`); never as a wrong row.
    public var storeReadFailure: DocumentError? { store.readFailure }

    /// Whether a save is running now.
    var isSaving: Bool { guarded.withLock { $0.isSaving } }

    /// The current state, answered from memory and the working copy's 4-byte file change counter: it never goes
    /// through SQLite, so it can be read from any thread, inside a write, and while a save runs.
    ///
    /// Every committed change counts (rows, schema, `PRAGMA user_version`, `VACUUM`, migrations); reads, empty
    /// writes and rolled-back transactions do not.
    public var state: State {
        noticeChanges()
        return guarded.withLock { $0.state }
    }

    /// Whether there are changes the bundle does not have.
    public var hasUnsavedChanges: Bool {
        let state = self.state
        return state == .hasUnsavedChanges || state == .savingFailed
    }

    /// The states the document goes through from now on, until it closes (a closed document's stream ends at once).
    ///
    /// Every transition is yielded: ``State/hasUnsavedChanges`` on the first committed change after an open, a save
    /// or a revert; ``State/normal`` after a save or a revert; ``State/savingFailed``; ``State/closed`` last.
    public var stateChanges: AsyncStream<State> {
        AsyncStream { continuation in
            let id = UUID()
            let isClosed = guarded.withLock { guarded -> Bool in
                guard guarded.state != .closed else { return true }
                guarded.continuations[id] = continuation
                return false
            }
            if isClosed {
                continuation.finish()
                return
            }
            continuation.onTermination = { [weak self] _ in
                _ = self?.guarded.withLock { $0.continuations.removeValue(forKey: id) }
            }
        }
    }

    /// The store, for writing. The same writer serves the document for its whole open, across saves and reverts:
    /// keep it, and keep the observations started on it. A read-only document has no writer: read it through
    /// ``reader``.
    ///
    /// - Throws: ``DocumentError/Code/closed`` once the document is closed; ``DocumentError/Code/readOnly`` for a
    ///   document opened with ``OpenOptions/isReadOnly``.
    public var writer: any DatabaseWriter {
        get throws {
            let queue = try openQueue()
            guard case .editable = access else {
                throw DocumentError(.readOnly, path: path,
                                    reason: "the document was opened read-only (OpenOptions.isReadOnly): read it through Document.reader; open it without isReadOnly to edit it")
            }
            return queue
        }
    }

    /// The store, for reading (the same connection as ``writer``).
    public var reader: any DatabaseReader {
        get throws { try openQueue() }
    }

    private func openQueue() throws -> DatabaseQueue {
        guard let queue = guarded.withLock({ $0.queue }) else { throw closedError() }
        return queue
    }

    func closedError() -> DocumentError {
        DocumentError(.closed, path: path, reason: "the document is closed; open it again to use it")
    }

    /// Packs the working copy into the bundle, atomically.
    ///
    /// The store is flushed and packed while no write can happen, the bundle is written aside, verified and
    /// renamed into place (keeping the replaced bundle's permissions), and ``metadata`` becomes the saved one
    /// (`modifiedAt` and checksums updated).
    ///
    /// A save costs what changed: when the bundle on disk is the one this open extracted or last saved (same file,
    /// unchanged since), the store's segments whose SHA-256 still matches are copied from it compressed, and only
    /// the others are deflated; the new bundle's reused bytes are compared with the old one's and its new segments
    /// inflated and checked before it replaces anything (FORMAT.md 16.1). ``lastSave`` tells which it was.
    ///
    /// - Throws: ``DocumentError/Code/closed`` after ``close(savingChanges:)``, ``DocumentError/Code/readOnly``
    ///   for a read-only document, and the codes of ``BundleWriter/write(_:metadata:to:replacingExisting:options:)``
    ///   but ``DocumentError/Code/alreadyExists``: a save always replaces its own bundle. On a failure
    ///   the state becomes ``State/savingFailed``, the bundle is the previous save, and the working copy keeps the
    ///   changes for another try.
    public func save() async throws {
        let queue = try openQueue()
        guard case .editable(let store, _) = access else {
            throw DocumentError(.readOnly, path: path, reason: "is open read-only; it cannot be saved")
        }
        guarded.withLock { $0.isSaving = true }
        defer { guarded.withLock { $0.isSaving = false } }
        do {
            try await queue.barrierWriteWithoutTransaction { db in try self.saveHoldingWriters(db, store) }
        } catch let error as DatabaseError where guarded.withLock({ $0.state == .closed }) {
            throw DocumentError(.closed, path: path, reason: "the document was closed before the save could run",
                                underlyingError: error)
        }
    }

    /// Saves; runs in a barrier of the queue, so every write accepted before it is in what it saves and no commit
    /// falls between the save and its mark.
    private func saveHoldingWriters(_ db: Database, _ store: any EditableStore) throws {
        let (metadata, state) = guarded.withLock { ($0.metadata, $0.state) }
        guard state != .closed else { throw closedError() }
        do {
            let (saved, report) = try store.save(metadata: metadata, folders: workingFolders(), db)
            options.logger.info("saved \(path): \(report)")
            guarded.withLock {
                $0.lastSave = report
                $0.lastSaveError = nil
            }
            try workingCopy.writeBase(WorkingCopy.Base(bundle: path.string, storeDigest: saved.store.contentDigest))
            let counter = try store.changeCounter()
            guarded.withLock {
                $0.metadata = saved
                $0.savedChangeCounter = counter
                $0.savedGeneration += 1
                $0.state = .normal
            }
            publish(.normal)
        } catch {
            guarded.withLock {
                $0.state = .savingFailed
                $0.lastSaveError = error as? DocumentError
                    ?? DocumentError(.ioFailure, path: path, reason: "the save failed: \(error)")
            }
            publish(.savingFailed)
            throw error
        }
    }

    /// The bundle's external data and additional content as the working copy holds them.
    func workingFolders() -> BundleContent {
        BundleContent(
            store: workingCopy.store,
            externalData: FileSystem.isDirectory(workingCopy.externalData) ? workingCopy.externalData : nil,
            additionalContent: FileSystem.isDirectory(workingCopy.additionalContent)
                ? workingCopy.additionalContent : nil)
    }

    /// Throws away unsaved changes: the bundle's content is copied back into the working copy.
    ///
    /// The store is restored into the same connection (SQLite's backup API), so a ``writer`` or ``reader`` kept
    /// by the app, and the `ValueObservation`s started on it, keep working; observations are told that the whole
    /// database changed and fetch the reverted content. A read-only document reloads the bundle as it is now.
    ///
    /// - Throws: ``DocumentError/Code/closed`` after ``close(savingChanges:)``, and the reader's codes when the
    ///   bundle cannot be read (the working copy is then left as it was).
    public func revert() async throws {
        let queue = try openQueue()
        let reader = try BundleReader(at: path, limits: options.limits)
        switch access {
        case .readOnly(let store):
            try await store.reload(from: reader, queue: queue, replacing: metadata.store.contentDigest) { [self] in
                guard guarded.withLock({ $0.state != .closed }) else { throw closedError() }
            }
            guarded.withLock { $0.metadata = reader.metadata }
            publish(.editingDisabled)
        case .editable(let store, _):
            try await revert(store, to: reader, queue: queue)
        }
    }

    /// A writable document's revert: prepared, then applied in a barrier, to the bundle there now.
    private func revert(_ store: any EditableStore, to reader: BundleReader, queue: DatabaseQueue) async throws {
        let scratch = try FileSystem.makeTemporaryDirectory(in: workingCopy.directory, prefix: "revert-")
        defer { try? FileSystem.removeTree(scratch) }  // Squash cleanup error: the revert's outcome is what counts.
        let prepared = try store.prepareRevert(to: reader, scratch: scratch.appending("content"))
        let isCurrent = try await queue.barrierWriteWithoutTransaction { db -> Bool in
            guard self.guarded.withLock({ $0.state != .closed }) else { throw self.closedError() }
            // > A save (an autosave) may have replaced the bundle since it was read: revert to the one there now.
            guard Self.identity(of: self.path) == reader.openedIdentity else { return false }
            try prepared.apply(db, replacing: self.metadata.store.contentDigest)
            try self.replaceFolders(from: prepared.folders)
            let counter = try store.changeCounter()
            self.guarded.withLock {
                $0.metadata = reader.metadata
                $0.savedChangeCounter = counter
                $0.savedGeneration += 1
                $0.state = .normal
            }
            try self.workingCopy.writeBase(WorkingCopy.Base(bundle: self.path.string,
                                                            storeDigest: reader.metadata.store.contentDigest))
            // > Observations of the kept writer fetch again; the change counter already matches, so no state change.
            try db.inTransaction {
                try db.notifyChanges(in: .fullDatabase)
                return .commit
            }
            return true
        }
        guard isCurrent else { return try await revert() }
        publish(state)
    }

    /// The identity of the file at `path` now (`nil` when it cannot be opened).
    static func identity(of path: FilePath) -> FileIdentity? {
        guard let descriptor = try? FileSystem.openForReading(path) else { return nil }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        return FileIdentity(descriptor)
    }

    /// Puts the bundle's external data and additional content in place of the working copy's.
    func replaceFolders(from extracted: ExtractedBundle) throws {
        for (current, restored) in [(workingCopy.externalData, extracted.externalData),
                                    (workingCopy.additionalContent, extracted.additionalContent)] {
            if FileSystem.isDirectory(current) { try FileSystem.removeTree(current) }
            if let restored {
                try FileSystem.createDirectory(current.removingLastComponent())
                try FileSystem.rename(restored, to: current)
            }
        }
    }

    /// Closes the document: saves first when asked and needed, removes the working copy, releases the lock.
    ///
    /// Every write the document accepted before `close` is called, and every one still running or waiting for the
    /// connection when it is, finishes first and is in the final save; writes that arrive after that are refused
    /// (``writer`` throws ``DocumentError/Code/closed``; a write on a writer kept from before fails with SQLite's
    /// read-only error), so a write that returned success is never lost. A save or revert still running finishes
    /// first too; once closed, the document stays ``State/closed``.
    ///
    /// Closing twice is harmless: a second call (or one on a document whose open has ended) does nothing, and a
    /// closed document never touches a working copy a later open of the same bundle owns.
    ///
    /// - Parameter savingChanges: save unsaved changes first (default `true`, as UIManagedDocument does).
    /// - Throws: the save's error, when the save fails; the document then stays open with its changes.
    public func close(savingChanges: Bool = true) async throws {
        guard let queue = guarded.withLock({ guarded -> DatabaseQueue? in
            guard !guarded.isClosing, let queue = guarded.queue else { return nil }
            guarded.isClosing = true
            return queue
        }) else { return }
        await stopAutosave()
        do {
            // > Behind every write queued before it: their commits are in the working copy when this runs.
            try await queue.barrierWriteWithoutTransaction { db in
                if case .editable(let store, _) = self.access {
                    if savingChanges, self.hasUnsavedChanges { try self.saveHoldingWriters(db, store) }
                    // > Writes queued behind this barrier on a writer the app kept fail instead of being lost.
                    try db.execute(sql: "PRAGMA query_only = ON")
                }
                self.guarded.withLock {
                    $0.queue = nil
                    $0.state = .closed
                }
            }
        } catch {
            guarded.withLock { $0.isClosing = false }
            startAutosave()  // still open, with its changes: autosave goes on trying
            throw error
        }
        try? queue.close()  // Squash close error: nothing is pending, and the copy is removed next.
        store.close()
        let copyLock = guarded.withLock { guarded -> FileDescriptor? in
            defer { guarded.workingCopyLock = nil }
            return guarded.workingCopyLock
        }
        if let copyLock, Self.ownsWorkingCopy(copyLock, workingCopy) {
            try? WorkingCopy.remove(workingCopy.directory)  // its .lock last: a crash leaves a removable folder
        }
        try? copyLock?.close()  // Squash close error: releasing the lock is all that matters.
        if case .editable(_, let lock) = access { lock.release() }
        // > finish() runs onTermination, which takes the lock: finish outside it.
        let finished = guarded.withLock { guarded -> [AsyncStream<State>.Continuation] in
            defer { guarded.continuations.removeAll() }
            return Array(guarded.continuations.values)
        }
        for continuation in finished {
            continuation.yield(.closed)
            continuation.finish()
        }
    }

    /// Whether the working copy's `.lock` is still the file this open locked (its ownership token).
    private static func ownsWorkingCopy(_ lock: FileDescriptor, _ copy: WorkingCopy) -> Bool {
        FileSystem.isFile(lock, stillNamed: copy.directory.appending(".lock"))
    }

    /// Starts the autosave loop when the options ask for one (``OpenOptions/autosaveInterval``).
    func startAutosave() {
        guard case .editable = access, let interval = options.autosaveInterval else { return }
        let logger = options.logger
        let task = Task.detached(priority: .utility) { [weak self] in
            let reference = WeakDocument(self)
            await Autosave(interval: interval, logger: logger).run { reference.document }
        }
        guarded.withLock { $0.autosave = task }
    }

    /// Stops the autosave loop and waits until an autosave it started has ended.
    func stopAutosave() async {
        let task = guarded.withLock { guarded -> Task<Void, Never>? in
            defer { guarded.autosave = nil }
            return guarded.autosave
        }
        task?.cancel()
        await task?.value
    }

    /// The working copy's change counter, for the autosave loop (`nil` when it cannot be read).
    var changeCounterNow: UInt32? { try? store.changeCounter() }

    /// Tells the observers of ``stateChanges`` about a new state; nothing once the document is closed (``close``
    /// says ``State/closed`` last).
    func publish(_ state: State) {
        let continuations = guarded.withLock { $0.state == .closed ? [] : Array($0.continuations.values) }
        for continuation in continuations { continuation.yield(state) }
    }

    /// A commit happened on the working copy (or the state is asked for: `VACUUM` commits without telling
    /// transaction observers): the first change after a save makes the document edited.
    fileprivate func noticeChanges() {
        guard let generation = guarded.withLock({ $0.state == .normal ? $0.savedGeneration : nil }) else { return }
        guard let counter = try? store.changeCounter() else {
            return  // unreadable header: the next commit tries again, and the save reads the store itself
        }
        let changed = guarded.withLock { guarded -> Bool in
            // > A save or revert in between read a newer counter: this one is stale.
            guard guarded.state == .normal, generation == guarded.savedGeneration,
                  counter != guarded.savedChangeCounter else { return false }
            guarded.state = .hasUnsavedChanges
            return true
        }
        if changed { publish(.hasUnsavedChanges) }
    }

    static func openQueue(_ store: FilePath, readOnly: Bool) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.label = "ManagedDocument.document"
        do {
            // > Written through the working files' VFS: every change SQLite makes is seen, and a journal's removal
            // > is durable before its commit is acknowledged.
            let queue = try DatabaseQueue(path: readOnly ? store.string : WorkingFilesVFS.uri(of: store),
                                          configuration: configuration)
            if !readOnly {
                try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
            }
            return queue
        } catch let error as DatabaseError {
            throw DocumentError(.storeCorrupt, path: store, reason: "SQLite cannot open the working copy",
                                underlyingError: error)
        }
    }
}

/// Tells its document about every commit on the working copy (GRDB calls `databaseDidCommit` for every observer,
/// whatever it observes); it observes no row events, so it costs nothing per statement.
private final class ChangeObserver: TransactionObserver {
    weak var document: Document?

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) { document?.noticeChanges() }
    func databaseDidRollback(_ db: Database) {}
}
