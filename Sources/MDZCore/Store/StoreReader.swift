import SystemPackage

/// A SQLite store's bytes, read by offset from any thread: the one way this package reads a store without SQLite.
///
/// What SQLite reads through the VFS (a ``ServedStore``: a bundle's store served in place, ``InPlaceStore``, or an
/// extracted file, ``StoreFileReader``), what a save packs (a file, a store read into memory, or a writable
/// document's overlay over its bundle) and the header reads every one of them needs (``header(entry:bundle:)``,
/// ``changeCounter()``, ``stateBytes()``) all go through it.
@_spi(Core) public protocol StoreReader: Sendable {
    /// The store's size in bytes (when it was opened, for a file; a file that grows is read as it is now).
    var size: Int64 { get }
    /// The bundle or file it reads, which names the store in errors.
    var origin: FilePath { get }
    /// Copies `count` bytes at `offset` into `buffer`; returns how many there were (fewer at the store's end).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int
    /// Tells the kernel the bytes will be read in order, once (advice only; nothing by default).
    func adviseSequential()
    /// Asks for the bytes in `range` ahead of the reads (advice only; nothing by default).
    func readAhead(_ range: Range<Int64>)
}

extension StoreReader {
    @_spi(Core) public func adviseSequential() {}
    @_spi(Core) public func readAhead(_ range: Range<Int64>) {}

    /// Fills `buffer` from `offset`, or up to the end; returns the bytes read.
    @_spi(Core) public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        guard let address = buffer.baseAddress, !buffer.isEmpty else { return 0 }
        return try read(into: address, count: buffer.count, at: offset)
    }

    /// Whether bytes lie past ``size`` now (a file that grew while it was read).
    @_spi(Core) public func hasGrown() throws -> Bool { try !bytes(at: size, count: 1).isEmpty }

    /// `count` bytes at `offset` (fewer at the end).
    @_spi(Core) public func bytes(at offset: Int64, count: Int) throws -> [UInt8] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        let read = try bytes.withUnsafeMutableBytes { try self.read(into: $0.baseAddress!, count: count, at: offset) }
        return Array(bytes.prefix(read))
    }

    /// The store's SQLite header, checked (``StoreHeader/init(checking:of:entry:bundle:)``).
    ///
    /// - Throws: ``DocumentError/Code/notSQLite`` naming `bundle` and `entry` when given, ``origin`` otherwise; or
    ///   the read's own error.
    @_spi(Core) public func header(entry: String? = nil, bundle: FilePath? = nil) throws -> StoreHeader {
        try StoreHeader(checking: bytes(at: 0, count: StoreHeader.length), of: origin, entry: entry, bundle: bundle)
    }

    /// The header's file change counter (``StoreHeader/changeCounterRange``), which SQLite bumps at every commit.
    ///
    /// - Throws: ``DocumentError/Code/storeCorrupt`` when the header is cut short; or the read's own error.
    @_spi(Core) public func changeCounter() throws -> UInt32 {
        let range = StoreHeader.changeCounterRange
        guard let counter = StoreHeader.changeCounter(try bytes(at: Int64(range.lowerBound), count: range.count)) else {
            throw DocumentError(.storeCorrupt, path: origin, reason: "the store's header is cut short")
        }
        return counter
    }

    /// The ``StoreHeader/stateRange`` bytes (fewer when the store is shorter): what SQLite compares to tell whether
    /// the store changed under its cache.
    @_spi(Core) public func stateBytes() throws -> [UInt8] {
        try bytes(at: Int64(StoreHeader.stateRange.lowerBound), count: StoreHeader.stateRange.count)
    }
}
