import SystemPackage
@_spi(Core) import MDZCore

/// What a writable open does with the working copy a process that died left for its bundle.
extension Document {
    /// What an open found in the working copy's folder of the bundle, once it decided what to keep.
    enum Leftover: Equatable {
        /// No folder (none was there, or the one there was discarded).
        case none
        /// An extracted store to recover (a working copy as releases before 16.2 made it).
        case extracted
        /// An overlay and map that lie over the bundle as it is now, to recover; whether they hold changes the
        /// bundle does not have.
        case overlay(hasChanges: Bool)
    }

    /// Decides what to do with the working copy folder a process that died left for `reader`'s bundle (the
    /// document's lock is held): recovered when ``OpenOptions/recovery`` says so and it lies over this bundle's
    /// store (made over it, or over the store a save put in place from it: ``OverlayMap/coverage(ofStoreDigest:size:)``),
    /// decided by the store's digest and size, never by the file's times or the reader's limits; removed otherwise.
    /// An overlay made over another store is refused with ``DocumentError/Code/metadataMismatch``, and nothing is
    /// removed: its changes are in no bundle.
    static func examineWorkingCopy(_ copy: WorkingCopy, reader: BundleReader, options: OpenOptions,
                                   path: FilePath) throws -> Leftover {
        guard FileSystem.isDirectory(copy.directory) else { return .none }
        guard options.recovery == .recover else {
            try WorkingCopy.remove(copy.directory)
            return .none
        }
        let digest = reader.metadata.store.contentDigest
        if let map = try OverlayStore.readMap(in: copy.directory) {
            switch map.coverage(ofStoreDigest: digest, size: reader.metadata.store.size) {
            case .madeOver(let hasChanges), .savedInto(let hasChanges):
                return .overlay(hasChanges: hasChanges)
            case .neither:
                throw DocumentError(.metadataMismatch, path: path,
                                    reason: "a working copy with unsaved changes (left by a process that ended at \(copy.directory)) was made over another version of the document, which has been replaced since; nothing was removed: move that folder away, or open with RecoveryPolicy.discard to drop the changes")
            }
        } else if let base = copy.readBase(), base.storeDigest == digest, FileSystem.isRegularFile(copy.store) {
            return .extracted
        }
        try WorkingCopy.remove(copy.directory)
        return .none
    }
}
