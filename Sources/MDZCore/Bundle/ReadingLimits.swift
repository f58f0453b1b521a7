import SystemPackage

/// The bounds a reader enforces on an untrusted bundle before and while it inflates anything.
///
/// The defaults admit any bundle this library writes for stores up to 64 GiB and stop zip bombs early:
///
/// ```swift
/// var limits = ReadingLimits()
/// limits.maxTotalUncompressedSize = 1 << 30   // this app never has documents over 1 GiB
/// let reader = try BundleReader(at: path, limits: limits)
/// ```
///
/// Two limits bound what reading a store in place holds in memory (``BundleStore``, a read-only ``Document``):
/// ``maxRestartSegmentSize`` and ``maxDigestSegmentSize``. A bundle beyond them is not refused: its store is
/// extracted and read from the copy instead (extraction streams in bounded buffers whatever the bundle declares), and
/// the reason given names the limit. An app that raises ``maxTotalUncompressedSize`` past 64 GiB and wants such
/// stores read in place raises them in proportion (the writer's segments grow with the store: FORMAT.md 11.4).
public struct ReadingLimits: Sendable, Equatable {
    /// The most entries a bundle may have (default 100,000).
    public var maxEntryCount: Int = 100_000
    /// The longest entry name, in UTF-8 bytes (default 1,024).
    public var maxNameLength: Int = 1_024
    /// The most bytes all entries may inflate to together (default 64 GiB).
    public var maxTotalUncompressedSize: UInt64 = 64 << 30
    /// The highest ratio of an entry's size to its compressed size, checked for entries over 1 MiB
    /// (default 1,100: deflate itself cannot exceed about 1,032).
    public var maxCompressionRatio: UInt64 = 1_100
    /// The largest `DocumentMetadata.json` (default 16 MiB).
    public var maxMetadataSize: UInt64 = 16 << 20
    /// The largest central directory read into memory (default 64 MiB).
    public var maxDirectorySize: UInt64 = 64 << 20
    /// The largest restart segment (`store.deflateRestarts.interval`, in uncompressed bytes, or the store's size
    /// when that is smaller) a store read in place may have: each is read and inflated whole (default 4 MiB, the
    /// restart interval this library writes for a store of 64 GiB).
    ///
    /// A bundle over it is read from an extracted copy; its reason names this limit. Segments over 4 GiB (2³² − 1
    /// bytes) are never read in place, whatever the limit.
    public var maxRestartSegmentSize: UInt64 = 4 << 20
    /// The largest digest segment (`store.segments.interval`, in uncompressed bytes, or the store's size when that
    /// is smaller) a store read in place may have: each is held whole in memory while it is checked against its
    /// SHA-256, and the cache keeps whole ones (default 16 MiB, the digest interval this library writes for a store
    /// of 64 GiB).
    ///
    /// Reading in place holds at most a few segments at once (``BundleStore``: the cache, at least two segments,
    /// and those being read), so this limit bounds its memory whatever the bundle declares. A bundle over it is read
    /// from an extracted copy; its reason names this limit. Segments over 4 GiB are never read in place.
    public var maxDigestSegmentSize: UInt64 = 16 << 20

    /// The default limits (see each property).
    public init() {}

    /// Refuses limits no reader can follow (a negative count), before anything is read.
    ///
    /// - Throws: ``DocumentError/Code/invalidArgument``, naming the limit.
    @_spi(Core) public func validate(for path: FilePath) throws {
        for (name, value) in [("maxEntryCount", maxEntryCount), ("maxNameLength", maxNameLength)] where value < 0 {
            throw DocumentError(.invalidArgument, path: path,
                                reason: "ReadingLimits.\(name) is \(value); give 0 or more")
        }
    }

    /// The defaults.
    public static var `default`: ReadingLimits { ReadingLimits() }
}
