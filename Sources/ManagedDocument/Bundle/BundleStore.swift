#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import GRDB
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// A bundle's store, open read-only for queries, without extracting it when the bundle allows.
///
/// When the bundle records segment digests (`store.segments`, FORMAT.md 11.4) and its store is stored, or deflated
/// with a restart index that describes its stream, SQLite reads the pages straight from the bundle through a
/// read-only VFS: only the segments a query touches are read (and inflated), each checked against its SHA-256 before
/// any of its bytes reach SQLite, and a bounded cache of segments (``defaultCacheSize``) keeps memory flat at any
/// size. Otherwise (an older or another writer's bundle, a repacked deflated store, or segments larger than
/// ``ReadingLimits/maxDigestSegmentSize`` or ``ReadingLimits/maxRestartSegmentSize`` allow in memory) the store is
/// extracted into a private folder, checked as a whole, and opened there; ``access`` and ``reason`` say which path
/// was taken (the reason names the limit a bundle exceeds), and the logger is told.
///
/// The store is read from the file the reader opened: a bundle replaced on disk meanwhile (a save) is not seen.
///
/// ```swift
/// let store = try BundleStore(at: "Notes.mdz")
/// let count = try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") }
/// ```
public final class BundleStore: Sendable {
    /// How the store is read.
    public enum Access: String, Sendable {
        /// Page by page from the bundle, each segment checked against its digest.
        case segments
        /// Extracted into a private folder first (the bundle does not allow reading it in place).
        case extracted
    }

    /// The segment cache's default size: 8 MiB.
    public static let defaultCacheSize = 8 << 20

    /// The bundle.
    public let path: FilePath
    /// How the store is read.
    public let access: Access
    /// Why the store was extracted, when it was.
    public let reason: String?
    /// The bundle's metadata.
    public let metadata: DocumentMetadata
    private let queue: DatabaseQueue
    /// Keeps the slot the connection reads registered, for a store read in place.
    private let registration: StoreSlot.Registration?
    private let scratch: FilePath?

    /// Opens `bundle`'s store read-only.
    ///
    /// - Parameters:
    ///   - bundle: the bundle's path.
    ///   - cacheSize: bytes of inflated segments kept (at least two segments' worth; a segment is at most
    ///     `limits.maxDigestSegmentSize`), in the process's cache that every connection to this bundle file shares:
    ///     the bundle's segments take at most the largest size its open connections asked for, and all bundles'
    ///     together 32 MiB (or that largest size, when more).
    ///   - limits: the reader's limits.
    ///   - workingDirectory: where a store that must be extracted goes (default: the system's temporary folder).
    ///   - logger: told which path was taken.
    /// - Throws: the reader's codes (the bundle is checked as ``BundleReader`` checks it); for an extracted store,
    ///   the codes of ``BundleReader/extract(into:)``.
    public init(at bundle: FilePath, cacheSize: Int = BundleStore.defaultCacheSize, limits: ReadingLimits = .default,
                workingDirectory: FilePath? = nil,
                logger: Logger = Logger(label: "ManagedDocument.store", factory: { _ in SwiftLogNoOpLogHandler() }))
    throws {
        let reader = try BundleReader(at: bundle, limits: limits)
        path = bundle
        metadata = reader.metadata
        var folder: FilePath?
        let store: ReadOnlyConnection
        do {
            store = try ReadOnlyConnection.open(reader, cacheSize: cacheSize, isImmutable: true,
                                           label: "ManagedDocument.bundleStore", logger: logger) {
                let parent = workingDirectory ?? FilePath(FileManager.default.temporaryDirectory.path)
                let made = try FileSystem.makeTemporaryDirectory(in: parent, prefix: ".query-")
                folder = made
                let extracted = try reader.extract(into: made.appending("content"))
                return try StoreInspector.openReadOnly(extracted.store, isPrivate: true,
                                                       immutableURI: StoreInspector.immutableURI(extracted.store))
            }
        } catch {
            if let folder { try? FileSystem.removeTree(folder) }  // Cleanup after a first error.
            throw error
        }
        queue = store.queue
        registration = store.registration
        access = store.registration == nil ? .extracted : .segments
        reason = store.extractionReason
        scratch = folder
    }

    deinit { close() }

    /// Closes the store (removing an extracted copy); later reads fail.
    public func close() {
        try? queue.close()  // Squash close error of a read-only connection.
        if let scratch { try? FileSystem.removeTree(scratch) }  // Squash cleanup error of a private folder.
    }

    /// Runs `body` with the store; a segment that fails its check ends it with a ``DocumentError`` naming the
    /// bundle, the store entry and the segment, never with a wrong row.
    ///
    /// - Throws: ``DocumentError/Code/checksumMismatch`` (a segment that does not match its digest),
    ///   ``DocumentError/Code/corruptArchive`` or ``DocumentError/Code/sizeMismatch`` (a segment that does not
    ///   inflate as its restart index says), SQLite's errors for the query itself, and `body`'s errors.
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try queue.read(body)
        } catch {
            throw ReadOnlyConnection.reported(error, source: registration?.slot.source, path: path)
        }
    }

    /// What the segment cache of a store read in place has done so far. The cache is the process's: every
    /// connection to the same unchanged bundle file (other `BundleStore`s, documents, the `mdzvfs` extension) shares
    /// the segments loaded, and this bundle's share of it is bounded by the largest `cacheSize` its open connections
    /// asked for.
    public struct CacheStatistics: Sendable, Equatable {
        /// The most bytes of this bundle's segments the process's cache held at once while it was open.
        public var peakBytes: Int
        /// The segments this store's connection read from the bundle so far (not those it found loaded by another).
        public var segmentsLoaded: Int
    }

    /// The bytes of this bundle's segments the process's cache held at once at most, and the segments this store
    /// read from the bundle so far (both 0 for an extracted store).
    public var cacheStatistics: CacheStatistics {
        let statistics = (registration?.slot.source as? InPlaceStore)?.cache.statistics ?? (peakBytes: 0, segmentsLoaded: 0)
        return CacheStatistics(peakBytes: statistics.peakBytes, segmentsLoaded: statistics.segmentsLoaded)
    }
}
