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
/// document's overlay (FORMAT.md 16.2). A save reads it by offset, and copies the base's restart segments that no
/// written page touches without reading them (``SegmentReuse``).
protocol ComposedStore: AnyObject, Sendable {
    /// The file the written pages are kept in, which names the store in errors.
    var overlayPath: FilePath { get }
    /// The store's size as SQLite sees it.
    var logicalSize: Int64 { get }
    /// The bytes of each block ``presentPages`` counts.
    var pageSize: Int { get }
    /// The blocks written over the base (they may differ from it); every other block below ``baseLimit`` is the
    /// base's.
    var presentPages: PageSet { get }
    /// Where the base's bytes end for this store: past it a block not written is zeros (the store was truncated
    /// below the base's size, then grew).
    var baseLimit: Int64 { get }
    /// Copies `count` bytes at `offset` into `buffer`; returns how many lie inside ``logicalSize``.
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int
    /// Asks the kernel to read the written blocks in `range` ahead (advice only).
    func readAhead(_ range: Range<Int64>)
}

extension BundleWriter {
    /// What a bundle's store is packed from: one of three kinds of input, each with what a save may reuse.
    enum StoreInput {
        /// The SQLite file at a path; with the loan of the bundle it replaces, the segments whose bytes are
        /// unchanged are copied from that bundle compressed (FORMAT.md 16.1).
        case file(FilePath, reusing: SegmentLoan? = nil)
        /// The bytes of the file at `path`, read (and checked) already: packed as they are, the file not read again.
        case image(StoreImage, path: FilePath)
        /// A store composed of a bundle's store and the pages written over it (16.2); with `base` (the reader of that
        /// bundle), the base's segments no written page touches are copied unread, otherwise `whyWhole` says why the
        /// save reads all of it.
        case composed(any ComposedStore, base: BundleReader?, whyWhole: String)

        /// The file that names the store in errors.
        var path: FilePath {
            switch self {
            case .file(let path, _), .image(_, let path): return path
            case .composed(let store, _, _): return store.overlayPath
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
        /// opened once more; a composed store's must be given.
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

/// The bytes of a store being packed, read by offset from any thread: a file's (through one descriptor, closed
/// when the last user lets go) or those a ``ComposedStore`` composes. The writer reads them in order, and the reuse
/// planner's hashing thread ahead of it.
final class StoreBytes: @unchecked Sendable {
    /// The file that names the store in errors.
    let path: FilePath
    /// The store's size when packing began.
    let size: Int64
    /// The composed store read, when it is one.
    let composed: (any ComposedStore)?
    private let descriptor: FileDescriptor?

    /// The bytes of `input` (not an image: its bytes are at hand).
    init(_ input: BundleWriter.StoreInput) throws {
        path = input.path
        switch input {
        case .file(let file, _), .image(_, let file):
            let descriptor = try FileSystem.openForReading(file)
            guard let status = try? FileSystem.status(file) else {
                try? descriptor.close()  // Squash close error of a read-only descriptor.
                throw DocumentError(.notFound, path: file, reason: "no such file")
            }
            self.descriptor = descriptor
            size = status.size
            composed = nil
        case .composed(let store, _, _):
            descriptor = nil
            size = store.logicalSize
            composed = store
        }
    }

    deinit { try? descriptor?.close() }  // Squash close error of a read-only descriptor.

    /// Fills `buffer` from `offset`, or up to the end; returns the bytes read. A file is read as it is now (past
    /// ``size`` when it grew: the caller compares); a composed store up to its logical size.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        guard let address = buffer.baseAddress, !buffer.isEmpty else { return 0 }
        if let descriptor { return try FileSystem.read(descriptor, at: offset, into: buffer, path: path) }
        return try composed!.read(into: address, count: buffer.count, at: offset)
    }

    /// `count` bytes at `offset` (fewer at the end).
    func bytes(at offset: Int64, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let read = try bytes.withUnsafeMutableBytes { try self.read(into: $0, at: offset) }
        return Array(bytes[0..<read])
    }

    /// Whether bytes lie past ``size`` now (a file that grew while it was packed).
    func hasGrown() throws -> Bool {
        guard descriptor != nil else { return false }
        var byte: UInt8 = 0
        return try withUnsafeMutableBytes(of: &byte) { try read(into: $0, at: size) } > 0
    }

    /// Tells the kernel the bytes will be read in order, once (advice only).
    func adviseSequential() {
        guard let descriptor else { return }
        _ = posix_fadvise(descriptor.rawValue, 0, 0, POSIX_FADV_SEQUENTIAL)
        _ = posix_fadvise(descriptor.rawValue, 0, 0, POSIX_FADV_WILLNEED)
    }

    /// Asks for the bytes in `range` ahead of the reads (advice only; a file's kernel read-ahead does it alone).
    func readAhead(_ range: Range<Int64>) { composed?.readAhead(range) }
}
