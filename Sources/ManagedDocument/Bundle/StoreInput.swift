#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// A store made of a bundle's store (its base) and the pages written over it since, as SQLite sees it: a writable
/// document's overlay (FORMAT.md 16.2). A save reads it by offset (``StoreReader/size`` is the size SQLite sees,
/// ``StoreReader/origin`` the folder the written pages are kept in), and copies the base's restart segments that no
/// written page touches without reading them (``SegmentReuse``).
protocol LayeredStore: AnyObject, StoreReader {
    /// The bytes of each block ``presentPages`` counts.
    var pageSize: Int { get }
    /// The blocks written over the base (they may differ from it); every other block below ``baseLimit`` is the
    /// base's.
    var presentPages: PageSet { get }
    /// Where the base's bytes end for this store: past it a block not written is zeros (the store was truncated
    /// below the base's size, then grew).
    var baseLimit: Int64 { get }
}

extension BundleWriter {
    /// What a bundle's store is packed from: one of three kinds of input, each with what a save may reuse.
    enum StoreInput {
        /// The SQLite file at a path; with the loan of the bundle it replaces, the segments whose bytes are
        /// unchanged are copied from that bundle compressed (FORMAT.md 16.1).
        case file(FilePath, reusing: SegmentLoan? = nil)
        /// The bytes of a file, read (and checked) already: packed as they are, the file not read again.
        case inMemory(InMemoryStore)
        /// A bundle's store with the pages written over it (16.2); with `base` (the reader of that
        /// bundle), the base's segments no written page touches are copied unread, otherwise `whyWhole` says why the
        /// save reads all of it.
        case layered(any LayeredStore, base: BundleReader?, whyWhole: String)

        /// The file that names the store in errors.
        var path: FilePath {
            switch self {
            case .file(let path, _): return path
            case .inMemory(let store): return store.origin
            case .layered(let store, _, _): return store.origin
            }
        }

        /// A reader of the store's bytes: the file's (opened now; a file that grows is read as it is now, past
        /// ``StoreReader/size``, for the caller to compare), or the store itself.
        func reader() throws -> any StoreReader {
            switch self {
            case .file(let path, _): return try StoreFileReader(path)
            case .inMemory(let store): return store
            case .layered(let store, _, _): return store
            }
        }
    }

    /// One bundle to write aside and verify (``stage(_:)``): its store, its other content, its metadata and where
    /// it goes, with how.
    struct Request {
        /// The store.
        var store: StoreInput
        /// A Core Data external-data folder, packed byte for byte.
        var externalData: FilePath?
        /// A folder of app files that travel with the document.
        var additionalContent: FilePath?
        /// The metadata to complete (the store's facts, digests, dates and entries are filled in).
        var metadata: DocumentMetadata
        /// The bundle's path.
        var target: FilePath
        /// Whether the bundle may replace a file at ``target`` when committed (a document's save); without it a file
        /// there is ``DocumentError/Code/alreadyExists``, now or at the commit.
        var replacingExisting = false
        /// Compression and threads.
        var options: WritingOptions
        /// The store's facts when the caller has just inspected it (and not changed it since), so the store is not
        /// opened once more; a layered store's must be given.
        var storeFacts: StoreFacts?
        /// A file whose permission bits the new bundle may not exceed (a converted store's privacy carries over).
        var permissionsOf: FilePath?
        /// Compute the store's whole-file SHA-256 too (``EntryDigest/sha256``), which format version 2 does not
        /// record: a converter that packs the source's own file records it as the source's.
        var hashingStoreWhole = false
        /// Changes the metadata once the store is packed, given what was packed (its size, and its SHA-256 when
        /// asked), before the metadata entry is written.
        var completingMetadata: (inout DocumentMetadata, EntryDigest) throws -> Void = { _, _ in }

        /// A request to write `store` with `content`'s folders, under `metadata`, to `target`.
        init(_ store: StoreInput, folders content: BundleContent? = nil, metadata: DocumentMetadata,
             to target: FilePath, options: WritingOptions) {
            self.store = store
            self.externalData = content?.externalData
            self.additionalContent = content?.additionalContent
            self.metadata = metadata
            self.target = target
            self.options = options
        }
    }
}
