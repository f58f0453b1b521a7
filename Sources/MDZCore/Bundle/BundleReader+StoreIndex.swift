import SystemPackage

/// 15.5 for format version 3 (FORMAT.md 13.2): the store index entry, read whole and checked against the metadata's
/// `store.index` before any byte of the store is read.
extension BundleReader {
    /// Fills `metadata.store.segments` and `metadata.store.deflateRestarts` (which a version 3 metadata text does not
    /// hold) from the store index entry, once its size, header and hash tree are checked against `store.index`; refuses
    /// the index entry in a bundle of an earlier version, which does not define it.
    @_spi(Core) public static func loadStoreIndex(into metadata: inout DocumentMetadata, entries: [BundleEntry],
                                                  in file: OpenedBundle) throws {
        let path = file.path
        let found = entries.first { $0.role == .storeIndex }
        func mismatch(_ reason: String, entry: String = BundleLayout.metadata) -> DocumentError {
            DocumentError(.metadataMismatch, path: path, entry: entry,
                          reason: reason + "; the metadata does not describe this bundle")
        }
        guard metadata.formatVersion >= 3, let reference = metadata.store.index else {
            if let found {
                throw mismatch("the bundle holds a store index, which format version \(metadata.formatVersion) does not define",
                               entry: found.name)
            }
            return
        }
        guard reference.entry == BundleLayout.storeIndex else {
            throw mismatch("'store.index.entry' is '\(reference.entry)', not '\(BundleLayout.storeIndex)'")
        }
        guard let entry = found else {
            throw DocumentError(.missingEntry, path: path, entry: BundleLayout.storeIndex,
                                reason: "is missing; a bundle of format version 3 has one (it holds the store's segment digests)")
        }
        guard isSHA256(reference.root) else { throw mismatch("'store.index.root' is not a SHA-256") }
        // > Numbers from the bundle: the interval and the size checked before any arithmetic on them.
        let size = metadata.store.size
        guard reference.interval >= 65_536 else {
            throw mismatch("'store.index.interval' is \(reference.interval); it is at least 65536")
        }
        guard let count = DocumentMetadata.SegmentDigests.count(forSize: size, interval: reference.interval),
              let expectedSize = StoreIndex.entrySize(forCount: Int(clamping: count)) else {
            throw mismatch("'store.size' is \(size); a size is at least 0")
        }
        let hasRestarts = reference.compressedSize != nil || reference.crc32 != nil
        guard !hasRestarts || (reference.compressedSize != nil && reference.crc32 != nil) else {
            throw mismatch("'store.index' names half a stream: it gives 'compressedSize' and 'crc32' together or neither")
        }
        // > Its size follows from the metadata's: checked before a byte is read, so what is read is bounded by them.
        guard entry.size == UInt64(expectedSize) else {
            throw mismatch("holds \(entry.size) bytes where the \(count) segments of \(reference.interval) bytes of the store need \(expectedSize)",
                           entry: entry.name)
        }
        let bytes = try readEntry(entry, from: file.descriptor, path: path)
        let layout = StoreIndex.Layout(size: size, interval: reference.interval, hasRestarts: hasRestarts)
        let decoded: StoreIndex.Decoded
        do {
            decoded = try StoreIndex.decode(bytes, layout: layout, root: reference.root)
        } catch .mismatch(let reason) {
            throw mismatch(reason, entry: entry.name)
        } catch .damaged(let reason) {
            throw DocumentError(.checksumMismatch, path: path, entry: entry.name,
                                reason: "\(reason); the bundle is damaged, restore it from a backup; no byte of the store was used")
        }
        // > The store digest, from the records' bytes: the check of 13.1 that ``check(_:mediaType:entries:path:)``
        // > makes of a version 2 metadata's spelled digests, which here come from the index, spelled right.
        guard let digest = metadata.store.digest, isSHA256(digest) else { throw mismatch("'store.digest' is not a SHA-256") }
        guard decoded.storeDigest == digest else {
            throw mismatch("'store.digest' is not the digest of 'store.size' and the store index's segment digests")
        }
        // > Kept as the index holds them: 32 bytes a digest, numbers for the rest; spelled only if someone asks.
        metadata.store.segments = DocumentMetadata.SegmentDigests(interval: reference.interval, rawDigests: decoded.digests)
        metadata.store.deflateRestarts = hasRestarts
            ? DeflateRestarts(interval: reference.interval, offsets: decoded.offsets,
                              compressedSize: reference.compressedSize, crc32: reference.crc32,
                              crc32Values: decoded.crc32s ?? [], compressedCRC32CValues: decoded.compressedCRC32Cs ?? [])
            : nil
    }
}
