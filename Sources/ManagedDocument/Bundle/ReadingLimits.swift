/// The bounds a reader enforces on an untrusted bundle before and while it inflates anything.
///
/// The defaults admit any bundle this library writes for stores up to 64 GiB and stop zip bombs early:
///
/// ```swift
/// var limits = ReadingLimits()
/// limits.maxTotalUncompressedSize = 1 << 30   // this app never has documents over 1 GiB
/// let reader = try BundleReader(at: path, limits: limits)
/// ```
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

    /// The default limits (see each property).
    public init() {}

    /// The defaults.
    public static var `default`: ReadingLimits { ReadingLimits() }
}
