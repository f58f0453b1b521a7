import Foundation
import GRDB
import Logging
import SystemPackage

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
/// writing takes a lock (see ``OpenOptions/lockTimeout``); read-only opens take none and work on their own
/// snapshot, so they never block the writer and never change the bundle.
///
/// ## Topics
/// - ``open(at:options:)``
/// - ``withDocument(at:options:_:)``
/// - ``save()``
/// - ``revert()``
/// - ``close(savingChanges:)``
/// - ``State``
public final class Document: @unchecked Sendable {  // mutable state is guarded by `lock`
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
        /// Keep its unsaved changes when it was made from the bundle as it is now; discard it otherwise.
        case recover
    }

    /// How a document is opened.
    public struct OpenOptions: Sendable {
        /// Open for reading only: no lock, no writes, the bundle is never changed.
        public var isReadOnly = false
        /// Create a new, empty document when neither the bundle nor a legacy store exists.
        public var createIfMissing = false
        /// Where the app's old release kept its store; looked at, in order, when the bundle does not exist.
        /// A store beside the bundle with the same stem (`Notes.sqlite` for `Notes.mdz`) is found without this.
        public var legacyStoreLocations: [FilePath] = []
        /// How a legacy store found there is converted (and what happens to its files).
        public var conversion = ConversionOptions()
        /// Seconds to wait for another writer to close the document; 0 fails at once with ``DocumentError/Code/inUse``.
        public var lockTimeout: Double = 0
        /// What to do with a crashed process's working copy.
        public var recovery = RecoveryPolicy.discard
        /// Where working copies live (see the WorkingCopy documentation); default `$TMPDIR/ManagedDocument-working`.
        public var workingDirectory: FilePath?
        /// How saves compress the bundle. Default: deflate at ``WritingOptions/defaultDeflateLevel``.
        public var saving = WritingOptions(compression: .deflate, replacesExisting: true)
        /// The model of a document created by this open.
        public var model = DocumentMetadata.Model()
        /// The media type of a document created by this open.
        public var mediaType = BundleLayout.defaultMediaType
        /// Limits for reading the bundle.
        public var limits = ReadingLimits()
        /// The app's migrations, run once each when the document opens for writing.
        public var migrations: DocumentMigrator?
        /// Logging.
        public var logger = Logger(label: "ManagedDocument.document", factory: { _ in SwiftLogNoOpLogHandler() })

        public init() {}
    }

    /// The bundle's path.
    public let path: FilePath
    /// Whether the document was opened read-only.
    public let isReadOnly: Bool
    /// The conversion that created the bundle during this open, when a legacy store was found.
    public let conversionReport: ConversionReport?
    /// Migrations applied during this open, in order.
    public let appliedMigrations: [String]

    private let lock = NSLock()
    private var _state: State
    private var _metadata: DocumentMetadata
    private var _queue: DatabaseQueue?
    private var savedChangeCount: Int = 0
    private let documentLock: DocumentLock?
    let workingCopy: WorkingCopy
    private let options: OpenOptions
    private var continuations: [UUID: AsyncStream<State>.Continuation] = [:]
    /// The working copy's `.lock`, held while this document uses it.
    var workingCopyLock: FileDescriptor?

    init(path: FilePath, isReadOnly: Bool, editingDisabled: Bool, metadata: DocumentMetadata, queue: DatabaseQueue,
         documentLock: DocumentLock?, workingCopy: WorkingCopy, options: OpenOptions,
         conversionReport: ConversionReport?, appliedMigrations: [String], hasUnsavedChanges: Bool) throws {
        self.path = path
        self.isReadOnly = isReadOnly
        self._metadata = metadata
        self._queue = queue
        self.documentLock = documentLock
        self.workingCopy = workingCopy
        self.options = options
        self.conversionReport = conversionReport
        self.appliedMigrations = appliedMigrations
        self._state = editingDisabled ? .editingDisabled : (hasUnsavedChanges ? .hasUnsavedChanges : .normal)
        self.savedChangeCount = hasUnsavedChanges ? -1 : try queue.read { $0.totalChangesCount }
    }

    deinit {
        try? _queue?.close()  // Squash close error: the document was not closed explicitly.
        try? workingCopyLock?.close()  // Squash close error: releasing the lock is all that matters.
        documentLock?.release()
    }

    /// The document's metadata as of the last open or save.
    public var metadata: DocumentMetadata { lock.withLock { _metadata } }

    /// The current state. Read and write access also updates it.
    public var state: State {
        lock.withLock {
            if _state == .normal || _state == .hasUnsavedChanges, let queue = _queue,
               let count = try? queue.read({ $0.totalChangesCount }) {  // unreadable: keep the last known state
                _state = count == savedChangeCount ? .normal : .hasUnsavedChanges
            }
            return _state
        }
    }

    /// Whether there are changes the bundle does not have.
    public var hasUnsavedChanges: Bool { state == .hasUnsavedChanges || state == .savingFailed }

    /// The states the document goes through from now on, until it closes.
    public var stateChanges: AsyncStream<State> {
        AsyncStream { continuation in
            let id = UUID()
            lock.withLock { continuations[id] = continuation }
            continuation.onTermination = { [weak self] _ in
                _ = self?.lock.withLock { self?.continuations.removeValue(forKey: id) }
            }
        }
    }

    /// The store, for writing. Read-only documents are opened with a read-only connection, which refuses writes
    /// with `SQLITE_READONLY`.
    public var writer: any DatabaseWriter {
        get throws {
            guard let queue = lock.withLock({ _queue }) else {
                throw DocumentError(.notFound, path: path, reason: "the document is closed")
            }
            return queue
        }
    }

    /// The store, for reading.
    public var reader: any DatabaseReader {
        get throws { try writer }
    }

    /// Packs the working copy into the bundle, atomically.
    ///
    /// The store is flushed and packed while no write can happen, the bundle is written aside, verified and
    /// renamed into place, and ``metadata`` becomes the saved one (`modifiedAt` and checksums updated).
    ///
    /// - Throws: ``DocumentError/Code/cannotCreate`` for a read-only document, and the codes of
    ///   ``BundleWriter/write(_:metadata:to:options:)``. On a failure the state becomes ``State/savingFailed``, the
    ///   bundle is the previous save, and the working copy keeps the changes for another try.
    public func save() async throws {
        let (queue, metadata, state) = lock.withLock { (_queue, _metadata, _state) }
        guard let queue else { throw DocumentError(.notFound, path: path, reason: "the document is closed") }
        guard !isReadOnly, state != .editingDisabled else {
            throw DocumentError(.cannotCreate, path: path, reason: "is open read-only; it cannot be saved")
        }
        do {
            let (saved, count) = try await queue.barrierWriteWithoutTransaction { db -> (DocumentMetadata, Int) in
                let content = BundleContent(
                    store: self.workingCopy.store,
                    externalData: FileSystem.isDirectory(self.workingCopy.externalData) ? self.workingCopy.externalData : nil,
                    additionalContent: FileSystem.isDirectory(self.workingCopy.additionalContent)
                        ? self.workingCopy.additionalContent : nil)
                let saved = try BundleWriter.write(content, metadata: metadata, to: self.path, options: self.options.saving)
                return (saved, db.totalChangesCount)
            }
            try workingCopy.writeBase(WorkingCopy.Base(bundle: path.string, storeSHA256: saved.store.sha256))
            lock.withLock {
                _metadata = saved
                savedChangeCount = count
                _state = .normal
            }
            publish(.normal)
        } catch {
            lock.withLock { _state = .savingFailed }
            publish(.savingFailed)
            throw error
        }
    }

    /// Throws away unsaved changes: the working copy is made again from the bundle.
    public func revert() async throws {
        guard let queue = lock.withLock({ _queue }) else {
            throw DocumentError(.notFound, path: path, reason: "the document is closed")
        }
        try queue.close()
        let reader = try BundleReader(at: path, limits: options.limits)
        try FileSystem.removeTree(workingCopy.content)
        try reader.extract(into: workingCopy.content)
        let reopened = try Self.openQueue(workingCopy.store, readOnly: isReadOnly)
        let count = try await reopened.read { $0.totalChangesCount }
        let newState: State = lock.withLock {
            _queue = reopened
            _metadata = reader.metadata
            savedChangeCount = count
            if _state != .editingDisabled { _state = .normal }
            return _state
        }
        publish(newState)
    }

    /// Closes the document: saves first when asked and needed, removes the working copy, releases the lock.
    ///
    /// - Parameter savingChanges: save unsaved changes first (default `true`, as UIManagedDocument does).
    public func close(savingChanges: Bool = true) async throws {
        if savingChanges && !isReadOnly && hasUnsavedChanges { try await save() }
        let queue = lock.withLock { () -> DatabaseQueue? in
            let queue = _queue
            _queue = nil
            _state = .closed
            return queue
        }
        try queue?.close()
        try ScratchDirectory.remove(workingCopy.directory)  // its .lock last: a crash here leaves a removable folder
        lock.withLock {
            try? workingCopyLock?.close()  // Squash close error: releasing the lock is all that matters.
            workingCopyLock = nil
        }
        documentLock?.release()
        publish(.closed)
        // > finish() runs onTermination, which takes the lock: finish outside it.
        let finished = lock.withLock { () -> [AsyncStream<State>.Continuation] in
            defer { continuations.removeAll() }
            return Array(continuations.values)
        }
        for continuation in finished { continuation.finish() }
    }

    private func publish(_ state: State) {
        let continuations = lock.withLock { Array(self.continuations.values) }
        for continuation in continuations { continuation.yield(state) }
    }

    static func openQueue(_ store: FilePath, readOnly: Bool) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.label = "ManagedDocument.document"
        do {
            let queue = try DatabaseQueue(path: store.string, configuration: configuration)
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

extension NSLock {
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
