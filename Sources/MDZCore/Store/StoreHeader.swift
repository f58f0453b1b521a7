import SystemPackage

/// SQLite's 100-byte database header (https://sqlite.org/fileformat2.html#the_database_header): the one reader of
/// its bytes in the package. Every number in it is checked where it is read (a store may come from a hostile bundle).
@_spi(Core) public struct StoreHeader: Sendable, Equatable {
    /// Bytes in the header.
    @_spi(Core) public static let length = 100
    /// The 16 bytes every SQLite database starts with.
    @_spi(Core) public static let magic = Array("SQLite format 3\u{0}".utf8)
    /// Where the file change counter lies (bytes 24-27, big-endian): every transaction that changes the file in
    /// rollback-journal mode increments it, and nothing else does.
    @_spi(Core) public static let changeCounterRange = 24..<28
    /// The fields by which SQLite tells one state of a file from another at its next read (bytes 24-43: change
    /// counter, page count, first free-list page, free-list pages, schema cookie): two states that agree on all of
    /// them are taken for the same, and the one SQLite saw last keeps its cached pages.
    @_spi(Core) public static let stateRange = 24..<44

    /// The header's 100 bytes.
    @_spi(Core) public let bytes: [UInt8]

    /// The header of a store that starts with `bytes`; `nil` when they are fewer than 100 or are not SQLite's.
    @_spi(Core) public init?(_ bytes: [UInt8]) {
        guard bytes.count >= Self.length, Self.hasMagic(bytes) else { return nil }
        self.bytes = Array(bytes.prefix(Self.length))
    }

    /// The header of the store at `path` (read from its first 100 bytes).
    ///
    /// - Throws: ``DocumentError/Code/notSQLite`` (naming `bundle` and `entry` when given) when the file is shorter
    ///   or does not start with SQLite's header.
    @_spi(Core) public init(of path: FilePath, entry: String? = nil, bundle: FilePath? = nil) throws {
        let descriptor = try FileSystem.openForReading(path)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        try self.init(checking: try FileSystem.read(descriptor, at: 0, count: Self.length, path: path), of: path,
                      entry: entry, bundle: bundle)
    }

    /// The header of a store whose first bytes (`bytes`, read from `path` already) are at hand.
    ///
    /// - Throws: ``DocumentError/Code/notSQLite`` when they are not a whole SQLite header.
    @_spi(Core)
    public init(checking bytes: [UInt8], of path: FilePath, entry: String? = nil, bundle: FilePath? = nil) throws {
        guard let header = StoreHeader(bytes) else {
            throw DocumentError(.notSQLite, path: bundle ?? path, entry: entry,
                                reason: "is not a SQLite database (no SQLite header)")
        }
        self = header
    }

    /// Whether `bytes` start with SQLite's 16-byte magic string (a file's first bytes: its kind, not yet a header).
    @_spi(Core) public static func hasMagic(_ bytes: [UInt8]) -> Bool {
        bytes.count >= magic.count && bytes[0..<magic.count].elementsEqual(magic)
    }

    /// Whether the read and write versions say WAL (bytes 18 and 19 equal to 2).
    @_spi(Core) public var isWAL: Bool { bytes[18] == 2 || bytes[19] == 2 }

    /// The page size (bytes 16-17, big-endian, 1 standing for 65536), when it is one SQLite allows: a power of two
    /// from 512 to 65536.
    @_spi(Core) public var pageSize: Int? { Self.pageSize(bytes) }

    /// The page size the first 18 bytes of a store name, when valid (``pageSize``); `nil` for fewer bytes.
    @_spi(Core) public static func pageSize(_ bytes: [UInt8]) -> Int? {
        guard let raw = rawPageSize(bytes) else { return nil }
        let size = raw == 1 ? 65_536 : raw
        guard size >= 512, size <= 65_536, size & (size - 1) == 0 else { return nil }
        return size
    }

    /// The page size field as written (bytes 16-17, big-endian), valid or not, for an error to quote; `nil` for
    /// fewer than 18 bytes.
    @_spi(Core) public static func rawPageSize(_ bytes: [UInt8]) -> Int? {
        bytes.count >= 18 ? Int(bytes[16]) << 8 | Int(bytes[17]) : nil
    }

    /// `PRAGMA user_version` (bytes 60-63, a big-endian signed 32-bit integer).
    @_spi(Core) public var userVersion: Int32 { Int32(bitPattern: Self.bigEndian32(bytes, at: 60)) }

    /// Why this header, the store's first bytes, contradicts what `store` (the metadata) records or is what a bundle
    /// must not hold: the page size, `user_version`, or WAL mode (FORMAT.md 11.4); `nil` when it agrees. What a reader
    /// serving the store in place checks when it opens, without SQLite (the schema fingerprint needs SQLite to read
    /// the schema: `verify` checks it).
    @_spi(Core)
    public func disagreement(with store: DocumentMetadata.Store) -> (code: DocumentError.Code, reason: String)? {
        if isWAL {
            return (.storeInWALMode, "the store's header says WAL mode (bytes 18-19), which a bundle must not be at rest")
        }
        if pageSize != store.pageSize {
            return (.metadataMismatch, "the metadata says page size \(store.pageSize) but the store's header says \(pageSize.map(String.init) ?? "an invalid one (\(Self.rawPageSize(bytes) ?? 0))"); the metadata lies")
        }
        if userVersion != store.userVersion {
            return (.metadataMismatch, "the metadata says user_version \(store.userVersion) but the store's header says \(userVersion); the metadata lies")
        }
        return nil
    }

    /// The file change counter (``changeCounterRange``).
    @_spi(Core) public var changeCounter: UInt32 { Self.bigEndian32(bytes, at: 24) }

    /// The change counter from the 4 bytes at ``changeCounterRange`` read alone; `nil` when fewer were read.
    @_spi(Core) public static func changeCounter(_ bytes: [UInt8]) -> UInt32? {
        bytes.count == 4 ? bigEndian32(bytes, at: 0) : nil
    }

    /// The size the database says it has: the page size times the in-header page count (bytes 28-31), when that
    /// count is valid (not 0, and bytes 92-95 equal the change counter, as every SQLite since 3.7.0 writes them);
    /// `nil` when the header does not say. Cannot overflow: at most 65536 × (2^32 - 1).
    @_spi(Core) public var declaredSize: UInt64? {
        guard let pageSize else { return nil }
        let pages = Self.bigEndian32(bytes, at: 28)
        guard pages > 0, Self.bigEndian32(bytes, at: 92) == changeCounter else { return nil }
        return UInt64(pageSize) * UInt64(pages)
    }

    /// Whether `old` and `new`, the ``stateRange`` bytes of two stores read whole, cannot be told apart by SQLite.
    @_spi(Core) public static func statesCollide(_ old: [UInt8], _ new: [UInt8]) -> Bool {
        old.count == stateRange.count && new.count == stateRange.count && old == new
    }

    private static func bigEndian32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// How far a packed store may run past the size its header declares before a reader refuses it: twice the
    /// declared size plus 1 MiB (an honest store has at most a little junk after its last page; a valid header
    /// followed by a gigabyte of zeros is a decompression bomb). A declared size is at most 65,536 × 2³², so
    /// nothing overflows; a larger argument saturates.
    @_spi(Core) public static func sizeBound(declared: UInt64) -> UInt64 {
        let (doubled, overflow) = declared.multipliedReportingOverflow(by: 2)
        let (bound, over) = doubled.addingReportingOverflow(1 << 20)
        return overflow || over ? .max : bound
    }
}
