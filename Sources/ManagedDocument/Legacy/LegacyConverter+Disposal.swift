import SystemPackage
@_spi(Core) import MDZCore

extension LegacyConverter {
    /// Keeps, backs up or deletes the legacy files; called only once their bundle is durable and verified.
    ///
    /// The main store file goes first: a crash midway leaves at most orphan sidecars, which SQLite never reads
    /// without their store, and running the conversion again finishes the job. Files already gone are skipped.
    ///
    /// Unless they are kept, the files are moved or deleted under an exclusive lock on the store, which no SQLite
    /// connection can share, and only when the store and its `-wal` still match `stamps` (taken with the state the
    /// bundle holds): a commit made since then is never moved away from under its app nor lost.
    ///
    /// A store is in use when a SQLite connection holds a lock on it, or when another process has the store or one
    /// of its sidecars open at all, as `/proc` shows (``OpenDescriptors``, checked under the lock: a rollback-journal
    /// connection between transactions holds no lock, and its next commit would go to the moved file).
    ///
    /// - Throws: ``DocumentError/Code/storeBusy`` when the store is in use past the timeout or changed since
    ///   `stamps`; nothing was moved then.
    func dispose(_ legacy: LegacyStore, provenance: DocumentMetadata.Provenance, unchangedSince stamps: [FileStamp])
        throws -> (location: FilePath?, files: [String]) {
        guard options.legacyPolicy != .keep else { return (nil, []) }
        let hold = stamps.isEmpty ? nil
            : try SourceSnapshot.lockForDisposal(of: legacy, unchangedSince: stamps, busyTimeout: options.busyTimeout)
        defer { try? hold?.close() }  // Squash close error of a read-only descriptor; closing drops the lock.
        let parent = legacy.source.removingLastComponent()
        let folder: FilePath = parent.isEmpty ? "." : parent
        var items: [FilePath] = legacy.isPackage ? [legacy.source] : [legacy.store] + legacy.sidecars
        if !legacy.isPackage, let support = legacy.supportFolder { items.append(support) }
        items = try items.filter { try FileSystem.exists($0) }
        // > Without the store's lock (its main file is gone: what is left of a disposal cut short), the leftovers are
        // > still not taken from a process that has one open.
        if hold == nil, options.legacyPolicy != .keep,
           let holder = OpenDescriptors.shared.holder(of: items, scannedAfter: OpenDescriptors.now()) {
            throw DocumentError(.storeBusy, path: legacy.source,
                                reason: "\(holder.description) has \(holder.path) open, so it cannot be moved or deleted; close it there and run the same command again")
        }
        func failed(_ error: DocumentError) -> DocumentError {
            DocumentError(error.code, path: legacy.source,
                          reason: "the bundle is complete and verified, but the legacy files could not be \(options.legacyPolicy == .delete ? "deleted" : "moved") (\(error.path.map { "\($0): " } ?? "")\(error.reason)); fix that and run the same command again",
                          underlyingError: error.underlyingError)
        }
        switch options.legacyPolicy {
        case .keep:
            return (nil, [])
        case .delete:
            do {
                for item in items { try FileSystem.removeTree(item) }
                try FileSystem.syncDirectory(folder)
            } catch let error as DocumentError { throw failed(error) }
            return (nil, items.map(\.string))
        case .backup:
            let root = options.backupDirectory ?? folder.appending("docconvert-backup")
            let name = legacy.source.lastComponent?.string ?? "store"
            var destination = root
            var moved: [String] = []
            do {
                destination = try BackupFolder(under: root, name: name, provenance: provenance, moving: items).path
                for item in items {
                    guard let itemName = item.lastComponent else { continue }
                    try BackupFolder.moveWithoutReplacing(item, to: destination.appending(itemName))
                    moved.append(item.string)
                }
                try FileSystem.syncDirectory(destination)
                try FileSystem.syncDirectory(folder)
            } catch let error as DocumentError {
                if (error.underlyingError as? Errno) == .improperLink {
                    throw failed(DocumentError(error.code, path: error.path,
                                               reason: "the backup folder \(root) is on another volume; choose one on the same volume with --backup-dir",
                                               underlyingError: error.underlyingError))
                }
                throw failed(error)
            }
            return (destination, moved)
        }
    }
}

extension LegacyDetector {
    /// What is left of a loose store whose main file was already disposed of (sidecars, support folder).
    static func leftovers(of source: FilePath, provenance: DocumentMetadata.Provenance) -> LegacyStore {
        let isPackage = provenance.kind == LegacyStore.Kind.uiManagedDocumentPackage.rawValue
        let grouped = (try? group(store: source, source: source, isPackage: isPackage))  // unreadable: nothing left
            ?? LegacyStore(source: source, store: source, isPackage: isPackage, sidecars: [], packageFiles: [])
        return grouped
    }
}
