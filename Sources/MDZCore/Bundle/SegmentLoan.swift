/// The one rule for when a bundle file may lend its store's compressed segments to the save that replaces it
/// (FORMAT.md 16.1): the file must be the one whose every segment this process verified, unchanged since.
///
/// A loan is made by whoever verified all of the file: the reader that extracted it restart segment by restart
/// segment (``BundleReader/extractVerifying(into:forReuse:)``, through ``init(extracted:inflatedSegmentWise:before:after:)``),
/// or the writer that wrote, re-read and renamed it into place (``BundleWriter/Staged/commit()``, through
/// ``init(written:)``). A document's extracted working store keeps the last one it was given and hands it to its
/// next save (``BundleWriter/StoreInput/file(_:reusing:)``); an overlay's lends its base by ``init(base:)``. In both,
/// ``SegmentReuse`` asks ``terms(from:)`` before it copies a byte and ``isKept(by:)`` once it has copied them.
@_spi(Core) public struct SegmentLoan: Equatable, Sendable {
    /// The identity the bundle file had when all of it was verified: the loan holds while the file has it.
    @_spi(Core) public let identity: FileIdentity

    /// The loan of a bundle its reader extracted, checking every segment digest on the way: only when its store
    /// was inflated restart segment by restart segment (each proven to stand alone and to end as a segment must;
    /// one read in one stream, on a single core or for segments over 1 MiB, proves its bytes, not its cuts), with a
    /// restart index that names its stream, and the file kept its identity from the reader's open to the end.
    @_spi(Core)
    public init?(extracted reader: BundleReader, inflatedSegmentWise: Bool, before: FileIdentity, after: FileIdentity?) {
        guard inflatedSegmentWise, case .used(_, identified: true) = reader.restartIndex, let after,
              before == after else { return nil }
        identity = after
    }

    /// The loan of the bundle a writable working copy's overlay lies over (FORMAT.md 16.2), with the identity its
    /// reader took when it opened it: what a save copies unread keeps the digests and CRC-32s that bundle records.
    @_spi(Core) public init(base identity: FileIdentity) {
        self.identity = identity
    }

    /// The loan of the bundle the writer just put in place, with the identity taken after the rename.
    @_spi(Core) public init?(written identity: FileIdentity?) {
        guard let identity else { return nil }
        self.identity = identity
    }

    /// What the replaced bundle lends: its store entry, restart index and segment digests.
    @_spi(Core) public struct Terms: Sendable {
        @_spi(Core) public let entry: BundleEntry
        @_spi(Core) public let restarts: DeflateRestarts
        @_spi(Core) public let digests: DocumentMetadata.SegmentDigests
    }

    /// Whether `previous`, the bundle now at the save's target, lends its segments, and on what terms.
    @_spi(Core) public enum Answer: Sendable {
        case lends(Terms)
        case refuses(reason: String)
    }

    /// Checks, before a save copies anything, that `previous` is the file lent and that its store can lend.
    @_spi(Core) public func terms(from previous: BundleReader) -> Answer {
        guard identity.hasFineTimes else {
            return .refuses(reason: "the file system keeps whole-second times, too coarse to prove the bundle unchanged")
        }
        guard previous.openedIdentity == identity else {
            return .refuses(reason: "the bundle on disk is not the one this document last read or saved")
        }
        guard let entry = previous.entries.first(where: { $0.role == .store }), entry.isCompressed else {
            return .refuses(reason: "the replaced bundle's store is not deflated")
        }
        guard case .used(_, identified: true) = previous.restartIndex,
              let restarts = previous.metadata.store.deflateRestarts else {
            return .refuses(reason: "the replaced bundle has no restart index that names its stream")
        }
        guard let digests = previous.metadata.store.segments else {
            return .refuses(reason: "the replaced bundle has no segment digests (an older writer's)")
        }
        // > What proves the compressed bytes copied unread are the ones written (FORMAT.md 13.1): without it (an
        // > earlier release's bundle) the store is deflated whole, once; the new bundle records it.
        guard previous.metadata.formatVersion >= 2, restarts.crc32sProblem == nil, restarts.recordsCompressedCRC32Cs,
              restarts.compressedCRC32CsProblem == nil else {
            return .refuses(reason: "the replaced bundle records no CRC-32C of its compressed segments (an earlier release wrote it): this save deflates the store whole, once")
        }
        return .lends(Terms(entry: entry, restarts: restarts, digests: digests))
    }

    /// Whether the file `previous` reads is still the one lent, after its segments were copied (a file changed in
    /// place meanwhile lent bytes that are no longer what was verified).
    @_spi(Core) public func isKept(by previous: BundleReader) -> Bool {
        FileIdentity(previous.descriptor) == identity
    }
}
