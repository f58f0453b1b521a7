import Foundation
import GRDB
import Logging
import SystemPackage
@_spi(Core) import MDZCore

extension Document {
    /// Opens a document, creating it or converting a legacy store first when the bundle does not exist.
    ///
    /// In order: the writer lock is taken (not for read-only opens); when the bundle is missing, a legacy store is
    /// looked for in ``OpenOptions/legacyStoreLocations``, then beside the bundle with the same stem (a store file
    /// found by content, or a UIManagedDocument package), and converted with ``OpenOptions/conversion``; otherwise
    /// a new document is created when ``OpenOptions/createIfMissing`` is set. The bundle is then checked and a
    /// working copy made (the store served from the bundle through an overlay when it allows, extracted otherwise),
    /// and pending migrations run (each in its own transaction); when any ran, the document is saved once, after all
    /// of them succeeded. The function returns when the document is open.
    ///
    /// - Returns: the open document.
    /// A bundle reached through a symbolic link is opened where the link points: saves replace that file, never the
    /// link. For writing, the bundle must be of this app: its media type ``OpenOptions/mediaType`` and, when
    /// ``OpenOptions/migrations`` names a model, that model at a version no newer than the app's; any bundle opens
    /// read-only.
    ///
    /// - Throws: ``DocumentError``: ``DocumentError/Code/notFound``, ``DocumentError/Code/inUse``,
    ///   ``DocumentError/Code/newerFormat``, ``DocumentError/Code/newerModel`` (for writing),
    ///   ``DocumentError/Code/modelMismatch`` and ``DocumentError/Code/documentTypeMismatch`` (for writing),
    ///   ``DocumentError/Code/cannotCreate`` when the working copies' folder is not a private folder of this user,
    ///   ``DocumentError/Code/migrationFailed`` (the bundle is untouched), ``DocumentError/Code/legacyConversionFailed``,
    ///   ``DocumentError/Code/metadataMismatch`` when ``RecoveryPolicy/recover`` finds unsaved changes made over
    ///   another bundle than the one there now (nothing is removed), and any reader code when the bundle is damaged.
    public static func open(at path: FilePath, options: OpenOptions = OpenOptions()) async throws -> Document {
        try options.validate(for: path)
        let root = try WorkingCopy.prepareRoot(options.workingDirectory, forWriting: !options.isReadOnly,
                                               logger: options.logger)
        _ = try? removeStaleWorkingCopies(in: root, olderThan: 7 * 24 * 3600)  // housekeeping; never fails an open
        let path = try resolvingSymbolicLinks(path)
        if options.isReadOnly {
            return try await openReadOnly(at: path, options: options, root: root)
        }
        WorkingCopy.warnIfVolatile(root, logger: options.logger)
        let documentLock = try await DocumentLock(for: path, timeout: options.lockTimeout)
        do {
            return try await openForWriting(at: path, options: options, root: root, documentLock: documentLock)
        } catch {
            documentLock.release()
            throw error
        }
    }

    /// Opens a document, runs `body`, saves if anything changed, and closes it, even when `body` throws (then
    /// without saving).
    ///
    /// ```swift
    /// let count = try await Document.withDocument(at: "Notes.mdz") { document in
    ///     try await document.writer.write { db in try db.execute(sql: "INSERT INTO note(text) VALUES ('hi')") }
    ///     return try await document.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") }
    /// }
    /// ```
    public static func withDocument<T: Sendable>(at path: FilePath, options: OpenOptions = OpenOptions(),
                                                 _ body: (Document) async throws -> T) async throws -> T {
        let document = try await open(at: path, options: options)
        do {
            let result = try await body(document)
            try await document.close(savingChanges: true)
            return result
        } catch {
            try? await document.close(savingChanges: false)  // Squash close error: body's error is what counts.
            throw error
        }
    }

    /// Reads a document's metadata without extracting anything (milliseconds whatever the store's size).
    public static func metadata(at path: FilePath, limits: ReadingLimits = ReadingLimits()) throws -> DocumentMetadata {
        try BundleReader(at: path, limits: limits).metadata
    }

    /// Removes working copies that no process uses and that were last touched more than `age` seconds ago.
    ///
    /// - Returns: the folders removed.
    @discardableResult
    public static func removeStaleWorkingCopies(in root: FilePath, olderThan age: Double) throws -> [FilePath] {
        guard FileSystem.isDirectory(root) else { return [] }
        var removed: [FilePath] = []
        for name in try FileSystem.contentsOfDirectory(root) {
            let folder = root.appending(name)
            guard let status = try FileSystem.status(folder), status.kind == .directory,
                  Date().timeIntervalSince1970 - status.modificationTime > age
            else { continue }  // young, or not a folder
            guard let lock = try? FileDescriptor.open(folder.appending(".lock"), .readOnly, options: [.noFollow, .closeOnExec]) else {
                // > No lock file: a removal cut short (the lock goes last), or a folder that is not a working copy.
                let isEmpty = (try? FileSystem.contentsOfDirectory(folder))?.isEmpty ?? false
                if isEmpty || FileSystem.isDirectory(folder.appending("content"))
                    || FileSystem.isRegularFile(folder.appending("base.json")) {
                    try ScratchDirectory.remove(folder)
                    removed.append(folder)
                }
                continue
            }
            defer { try? lock.close() }  // Squash close error of a read-only descriptor.
            if FileSystem.lockExclusively(lock, wait: false) {
                try ScratchDirectory.remove(folder)
                removed.append(folder)
            }
        }
        return removed
    }

    // MARK: Opening

    private static func openReadOnly(at path: FilePath, options: OpenOptions, root: FilePath) async throws -> Document {
        let reader = try BundleReader(at: path, limits: options.limits)
        logReadPath(reader, options: options)
        let copy = try WorkingCopy.snapshot(root: root)
        var copyLock: FileDescriptor?
        do {
            let lock = try lockWorkingCopy(copy)
            copyLock = lock
            // > Nothing extracted when the bundle allows: SQLite reads the pages it needs from the bundle, each
            // > segment checked first.
            let store = try ReadOnlyConnection.open(reader, cacheSize: BundleStore.defaultCacheSize, isImmutable: false,
                                               label: "ManagedDocument.document", logger: options.logger) {
                try reader.extract(into: copy.content, permissions: [.ownerReadWrite])
                return try openQueue(copy.store, readOnly: true)
            }
            do {
                let working: any FollowingStore = try store.registration.map {
                    ServedWorkingStore($0, workingCopy: copy, logger: options.logger)
                } ?? ExtractedWorkingStore(path: path, workingCopy: copy, options: options, loan: nil)
                return try Document(path: path, access: .readOnly(working), metadata: reader.metadata,
                                    session: Session(queue: store.queue, workingCopy: copy, workingCopyLock: lock),
                                    options: options, history: History())
            } catch {
                try? store.queue.close()  // Squash close error of a read-only connection.
                throw error
            }
        } catch {
            // > No document was made: the lock and the folder are still this function's to release.
            try? FileSystem.removeTree(copy.directory)  // Cleanup after a first error.
            try? copyLock?.close()  // Squash close error: the folder is gone.
            throw error
        }
    }

    private static func openForWriting(at path: FilePath, options: OpenOptions, root: FilePath,
                                       documentLock: DocumentLock) async throws -> Document {
        let report: ConversionReport?
        if try FileSystem.exists(path) {
            try checkWritable(path)
            report = nil
        } else {
            report = try makeMissingBundle(at: path, options: options)
        }
        let reader = try BundleReader(at: path, limits: options.limits)
        logReadPath(reader, options: options)
        try checkIsOfThisApp(reader.metadata, options: options, path: path)
        // > A save killed mid-write left its aside file: nobody holds its lock, and we hold the document's.
        try? AtomicFile.removeStaleTemporaries(for: path)  // housekeeping; never fails an open
        let copy = WorkingCopy.location(for: path, root: root)
        let route = options.servesStoreInPlaceForWriting ? StoreRoute(reader, inPlaceUnavailable: StoreRoute.inPlaceUnavailable)
            : .extract(reason: "serving the store in place is turned off for writing")
        // A working copy already there belongs to a process that died holding this document (we hold its lock).
        let leftover = try examineWorkingCopy(copy, reader: reader, options: options, path: path)
        if leftover == .none {
            try FileSystem.createDirectory(copy.directory, mode: 0o700)
            // > The folder's entry made durable before anything in it counts: an overlay's acknowledged commits
            // > live in it, and a power cut must not take the folder with them.
            try FileSystem.syncDirectory(copy.directory.removingLastComponent())
        }
        let copyLock = try lockWorkingCopy(copy)
        var queue: DatabaseQueue?
        var working: (any EditableStore)?
        let document: Document
        var needsSave = false
        do {
            let store = try openWorkingStore(copy, reader: reader, route: route, leftover: leftover, options: options)
            (queue, working) = (store.queue, store.working)
            var metadata = reader.metadata
            var applied: [String] = []
            if let migrator = options.migrations {
                let outcome = try migrate(store.queue, model: &metadata.model, with: migrator, bundle: path)
                (applied, needsSave) = (outcome.applied, outcome.changedDocument)
            }
            document = try Document(path: path, access: .editable(store.working, lock: documentLock),
                                    metadata: metadata,
                                    session: Session(queue: store.queue, workingCopy: copy, workingCopyLock: copyLock),
                                    options: options, history: History(conversionReport: report, appliedMigrations: applied,
                                                                       hasUnsavedChanges: store.hasChanges))
        } catch {
            // > No document was made: the connection, the folder and the lock are still this function's. A folder
            // > kept for recovery stays: its changes are in no bundle.
            try? queue?.close()  // Squash close error: the working copy is removed next.
            working?.close()
            if leftover == .none {
                try? WorkingCopy.remove(copy.directory)  // Cleanup after a first error: the bundle is untouched.
            }
            try? copyLock.close()  // Squash close error: the folder is gone.
            throw error
        }
        // > From here the document owns the connection, the working copy, its lock and the document's lock: it
        // > alone releases them, once.
        if needsSave {
            do { try await document.save() } catch {
                try? await document.close(savingChanges: false)  // Squash close error: the save's error counts.
                throw error
            }
        }
        document.startAutosave()
        return document
    }

    /// The working copy's store, opened for writing: through an overlay over the bundle when `route` serves it in
    /// place (nothing of the store extracted, FORMAT.md 16.2), extracted whole otherwise (or when an extracted copy
    /// is recovered); recovered or made afresh as `leftover` says.
    private static func openWorkingStore(_ copy: WorkingCopy, reader: BundleReader, route: StoreRoute,
                                         leftover: Leftover, options: OpenOptions)
    throws -> (queue: DatabaseQueue, hasChanges: Bool, working: any EditableStore) {
        if case .overlay(let hasChanges) = leftover {
            // > A crashed overlay is recovered whatever the route: over the bundle served in place, or, when this
            // > open's limits do not serve it so, over a verified copy of its store.
            let base: OverlayWorkingStore.Base
            if case .inPlace(let plan) = route { base = .inPlace(plan) } else { base = .extracted }
            let opened = try OverlayWorkingStore.open(copy, reader: reader, base: base, recovering: true,
                                                      options: options)
            return (opened.queue, hasChanges, opened.store)
        }
        if leftover == .none, case .inPlace(let plan) = route {
            let opened = try OverlayWorkingStore.open(copy, reader: reader, base: .inPlace(plan), recovering: false,
                                                      options: options)
            options.logger.debug("\(reader.path): the store is served from the bundle, changes kept in an overlay")
            return (opened.queue, false, opened.store)
        }
        var loan: SegmentLoan?
        if leftover == .none {
            loan = try reader.extractVerifying(into: copy.content, forReuse: options.savesIncrementally).1
            try copy.writeBase(WorkingCopy.Base(bundle: reader.path.string, storeDigest: reader.metadata.store.contentDigest))
        }
        let queue = try openQueue(copy.store, readOnly: false)
        do {
            let working = try ExtractedWorkingStore(path: reader.path, workingCopy: copy, options: options, loan: loan)
            return (queue, leftover == .extracted, working)
        } catch {
            try? queue.close()  // Squash close error: the first error is what counts.
            throw error
        }
    }

    /// Refuses to open for writing a bundle this process may not write (`faccessat(2)` with the effective ids: its
    /// permissions, a read-only mount), as UIDocument opens such a file read-only: a save would replace a file its
    /// owner marked read-only.
    private static func checkWritable(_ path: FilePath) throws {
        guard path.withPlatformString({ faccessat(AT_FDCWD, $0, W_OK, AT_EACCESS) }) != 0 else { return }
        let error = Errno(rawValue: errno)
        guard error == .permissionDenied || error == .readOnlyFileSystem else { return }
        let permissions = (try? FileSystem.status(path)).flatMap { $0 }.map { String($0.permissions.rawValue & 0o7777, radix: 8) }
        let why = error == .readOnlyFileSystem ? "it is on a read-only file system"
            : "its permissions (\(permissions.map { "0" + $0 } ?? "unknown")) do not let this user write it"
        throw DocumentError(.readOnly, path: path,
                            reason: "cannot be opened for writing: \(why); open it with OpenOptions.isReadOnly to read it, or change its permissions to edit it",
                            underlyingError: error)
    }

    /// Makes the missing bundle at `path`: converted from a legacy store found for it, or new and empty when
    /// ``OpenOptions/createIfMissing`` is set; the conversion's report, when there was one.
    private static func makeMissingBundle(at path: FilePath, options: OpenOptions) throws -> ConversionReport? {
        if let legacy = try findLegacyStore(for: path, options: options) {
            do {
                var conversion = options.conversion
                conversion.mediaType = options.mediaType
                return try LegacyConverter(options: conversion, logger: options.logger).convert(legacy, to: path)
            } catch let error as DocumentError {
                throw DocumentError(.legacyConversionFailed, path: path,
                                    reason: "a legacy store was found at \(legacy.source) but could not be converted: \(error.reason)",
                                    underlyingError: error)
            }
        }
        guard options.createIfMissing else {
            throw DocumentError(.notFound, path: path, reason: "no such document, and no legacy store was found for it")
        }
        try BundleWriter.createEmptyDocument(
            at: path, metadata: DocumentMetadata(mediaType: options.mediaType, model: options.model),
            options: WritingOptions(compression: options.saving.compression))
        return nil
    }

    /// The path itself, or where it leads when it is a symbolic link (a missing path is returned as it is).
    static func resolvingSymbolicLinks(_ path: FilePath) throws -> FilePath {
        guard let status = try FileSystem.status(path), status.kind == .symlink else { return path }
        guard let resolved = path.withPlatformString({ realpath($0, nil) }) else {
            throw DocumentError(.notFound, path: path, reason: "is a symbolic link to a file that does not exist",
                                underlyingError: Errno(rawValue: errno))
        }
        defer { free(resolved) }
        return FilePath(platformString: resolved)
    }

    /// Says in the log how the bundle is read: what another zip tool's repack changed is a notice.
    private static func logReadPath(_ reader: BundleReader, options: OpenOptions) {
        for notice in reader.notices { options.logger.notice("\(reader.path): \(notice)") }
        options.logger.debug("\(reader.path): restart index \(reader.restartIndex)")
    }

    /// Refuses, for writing, a bundle of another app: another media type, another model, or a newer model version.
    static func checkIsOfThisApp(_ metadata: DocumentMetadata, options: OpenOptions, path: FilePath) throws {
        guard metadata.mediaType == options.mediaType else {
            throw DocumentError(.documentTypeMismatch, path: path,
                                reason: "is a '\(metadata.mediaType)' document, not '\(options.mediaType)'; it was made by another app and can only be opened read-only")
        }
        try options.migrations?.checkCanMigrate(metadata.model, bundle: path)
    }

    private static func lockWorkingCopy(_ copy: WorkingCopy) throws -> FileDescriptor {
        do {
            let descriptor = try FileDescriptor.open(copy.directory.appending(".lock"), .readWrite,
                                                     options: [.create, .noFollow, .closeOnExec], permissions: [.ownerReadWrite])
            guard FileSystem.lockExclusively(descriptor, wait: false) else {
                try? descriptor.close()  // Squash close error: the lock was not taken.
                throw DocumentError(.inUse, path: copy.directory,
                                    reason: "the working copy is in use by another process (one removing it as stale); try again")
            }
            return descriptor
        } catch let error as Errno {
            throw DocumentError(.cannotCreate, path: copy.directory, reason: "cannot create the working copy",
                                underlyingError: error)
        }
    }

    /// Runs the migrator on the working copy, on this thread: no one else has the connection yet.
    private static func migrate(_ queue: DatabaseQueue, model: inout DocumentMetadata.Model,
                                with migrator: DocumentMigrator,
                                bundle path: FilePath) throws -> DocumentMigrator.Outcome {
        try queue.writeWithoutTransaction { db in try migrator.migrate(db, model: &model, bundle: path) }
    }

    /// A legacy store for a bundle that does not exist: an explicit location, or one beside it with its stem.
    static func findLegacyStore(for bundle: FilePath, options: OpenOptions) throws -> LegacyStore? {
        for location in options.legacyStoreLocations where try FileSystem.exists(location) {
            if case .legacyStore(let store) = try LegacyDetector.detect(at: location) { return store }
        }
        let parent = bundle.removingLastComponent()
        let folder: FilePath = parent.isEmpty ? "." : parent
        guard let stem = bundle.stem, FileSystem.isDirectory(folder) else { return nil }
        for name in try FileSystem.contentsOfDirectory(folder) where name != bundle.lastComponent?.string {
            let candidate = folder.appending(name)
            guard candidate.stem == stem || name == stem else { continue }
            if case .legacyStore(let store) = try LegacyDetector.detect(at: candidate) { return store }
        }
        return nil
    }
}
