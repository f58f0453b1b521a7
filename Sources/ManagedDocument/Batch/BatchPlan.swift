#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// A tree walked and classified once, for the shards of a fleet to convert without walking it again
/// (`docconvert batch ROOT --plan-only FILE`, then `docconvert batch ROOT --plan FILE --shard K/N`).
///
/// On a shared file system every task of an array that walks the tree itself lists every folder and reads the first
/// bytes of every file: N tasks put N times the tree's metadata load on the file server. With a plan, one job walks;
/// each task reads the plan (one sequential file) and touches only its own share of the tree.
///
/// The file is JSON lines: a header line that starts with ``signature`` and names the root, the walk's options, the
/// number of items and the SHA-256 of the rest of the file; then one ``Item`` per line, in the walk's order. A plan
/// that was cut short or changed after it was written is refused whole (its checksum), before anything is converted.
/// A plan that is merely old is safe: every store is detected again under its document's lock when it is
/// converted, an item gone since the plan is reported as such, and the shards split the plan's items by the same
/// hash of the relative path as a walk does, so a tree converted partly with a plan and partly without never has an
/// item converted twice.
///
/// ```swift
/// let header = try BatchConverter(root: "/srv/home").writePlan(to: "/srv/plans/home.plan")
/// var options = BatchOptions()
/// options.shard = try BatchShard(parsing: "3/16")
/// options.plan = try BatchPlan(at: "/srv/plans/home.plan", shard: options.shard)
/// let summary = try await BatchConverter(root: "/srv/home", options: options).run { _ in }
/// ```
public struct BatchPlan: Sendable {
    /// The first bytes of every plan: the key that names the format, first.
    public static let signature = "{\"\(formatKey)\":"
    static let formatKey = "docconvertBatchPlan"
    /// The version written in the ``signature`` key.
    public static let formatVersion = 1
    /// The longest line a plan may have (an item is a few hundred bytes; a path at most 4 KiB).
    static let maxLineLength = 64 * 1024

    /// The plan's first line.
    public struct Header: Codable, Sendable, Equatable {
        /// The root the plan was made from, absolute (a shared volume may be mounted elsewhere where it is used:
        /// item paths are relative to it).
        public var root: String
        /// When the walk started.
        public var createdAt: Date
        /// `docconvert <version>`, or the app that made it.
        public var generator: String
        /// The backup folder the walk left out (`--backup-dir`), when one was given.
        public var backupDirectory: String?
        /// Items in the plan.
        public var items: Int
        /// Items that are stores to convert.
        public var stores: Int
        /// Source bytes of the items.
        public var bytes: Int64
        /// SHA-256 (hex) of every byte after the header line.
        public var sha256: String
    }

    /// One candidate of the walk.
    public struct Item: Codable, Sendable, Equatable {
        /// What the walk found.
        public enum Candidate: String, Codable, Sendable {
            /// A legacy store or package to convert.
            case store
            /// A bundle whose source is no longer beside it, converted by an earlier run.
            case converted
            /// Anything that is not a store.
            case notAStore = "not-a-store"
            /// A folder or file the walk could not read.
            case unreadable
        }

        /// The item's path relative to the root (`/`-separated), as reports name it; for ``Candidate/converted``,
        /// its source's.
        public var source: String
        /// What the walk found.
        public var candidate: Candidate
        /// The report's kind: `sqlite-store`, `uimanageddocument-package`, the provenance's kind of a converted
        /// bundle, or `file`, `folder`, `symlink`, `bundle` (written as those words).
        public var kind: BatchItem.Kind
        /// Source bytes when the walk saw it.
        public var bytes: Int64
        /// For ``Candidate/converted``: the bundle, relative to the root. For ``Candidate/store``: the bundle a run
        /// of the plan makes, by the twin rule as the tree was when the plan was made (`nil` in a plan made before
        /// plans named it: the run applies the rule then).
        public var bundle: String?
        /// For ``Candidate/notAStore``: why.
        public var reason: String?
        /// For ``Candidate/unreadable``: what went wrong.
        public var error: BatchItem.Failure?
    }

    /// Where the plan is.
    public let path: FilePath
    /// Its first line.
    public let header: Header
    /// The share of the plan it was opened for.
    public let shard: BatchShard
    /// The share's items, and their source bytes.
    public let shareItems: Int
    /// Source bytes of the share's items.
    public let shareBytes: Int64
    /// One bit per item line: whether the shard owns it (an eighth of a byte per item of the tree).
    private let owned: [UInt64]

    /// Opens a plan for `shard`'s share and checks it whole, in one pass: its header, the item count and the
    /// checksum of every line, and every line of the share (its shape, its path). Lines of other shards are hashed
    /// and their source read, not otherwise looked at.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when there is no file; ``DocumentError/Code/invalidMetadata`` when
    ///   it is not a plan or was cut short or changed since it was written; ``DocumentError/Code/newerFormat`` for a
    ///   later version; ``DocumentError/Code/pathTraversal`` for an item path that leaves the root.
    public init(at path: FilePath, shard: BatchShard = .all) throws {
        self.path = path
        self.shard = shard
        let descriptor = try FileSystem.openForReading(path)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        var lines = LineReader(descriptor, path: path, maxLineLength: Self.maxLineLength)
        guard let first = try lines.next(), first.isTerminated else { throw Self.notAPlan(path, "it is empty or has no header line") }
        header = try Self.header(from: first.bytes, path: path)
        var hasher = SHA256()
        var count = 0, shareItems = 0, shareBytes: Int64 = 0
        var owned: [UInt64] = []
        while let line = try lines.next() {
            guard line.isTerminated else { throw Self.damaged(path, "its last line is cut short") }
            hasher.update(data: line.bytes)
            hasher.update(data: [UInt8(ascii: "\n")])
            if count % 64 == 0 { owned.append(0) }
            if shard.owns(try Self.source(of: line.bytes, path: path, offset: line.offset)) {
                let item = try Self.item(from: line.bytes, path: path, offset: line.offset)
                owned[count / 64] |= 1 << UInt64(count % 64)
                shareItems += 1
                shareBytes = shareBytes.addingSaturated(item.bytes)
            }
            count += 1
        }
        guard count == header.items else {
            throw Self.damaged(path, "it holds \(count) items and its header says \(header.items)")
        }
        guard hasher.finalize().hexString == header.sha256 else {
            throw Self.damaged(path, "its items do not match the checksum in its header")
        }
        self.owned = owned
        self.shareItems = shareItems
        self.shareBytes = shareBytes
    }

    /// Calls `visit` with every item of the share, in the plan's order, until it returns `false`.
    func forEachItem(_ visit: (Item) -> Bool) throws {
        let descriptor = try FileSystem.openForReading(path)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        var lines = LineReader(descriptor, path: path, maxLineLength: Self.maxLineLength)
        _ = try lines.next()
        var number = 0
        while let line = try lines.next() {
            defer { number += 1 }
            guard number / 64 < owned.count, owned[number / 64] & (1 << UInt64(number % 64)) != 0 else { continue }
            if !visit(try Self.item(from: line.bytes, path: path, offset: line.offset)) { return }
        }
    }

    /// Whether `prefix`, a file's first bytes, is a plan's.
    static func isPlan(prefix: [UInt8]) -> Bool {
        prefix.starts(with: Array(signature.utf8))
    }

    // MARK: Decoding

    private static func header(from bytes: ArraySlice<UInt8>, path: FilePath) throws -> Header {
        guard bytes.starts(with: Array(signature.utf8)) else { throw notAPlan(path, "it does not start with \(signature)") }
        struct Version: Decodable { var docconvertBatchPlan: Int }
        let decoder = Self.decoder
        let version: Version, header: Header
        do {
            version = try decoder.decode(Version.self, from: Data(bytes))
            header = try decoder.decode(Header.self, from: Data(bytes))
        } catch {
            throw notAPlan(path, "its header cannot be read (\(DocumentError.summary(of: error)))")
        }
        guard version.docconvertBatchPlan <= formatVersion else {
            throw DocumentError(.newerFormat, path: path,
                                reason: "is a plan of format \(version.docconvertBatchPlan), newer than this version reads (\(formatVersion)); use the docconvert that made it")
        }
        guard version.docconvertBatchPlan >= 1, header.items >= 0, header.stores >= 0, header.stores <= header.items,
              header.bytes >= 0, header.sha256.utf8.count == 64 else {
            throw damaged(path, "its header's numbers are out of range")
        }
        return header
    }

    /// An item line's source alone (enough to know its shard).
    private static func source(of bytes: ArraySlice<UInt8>, path: FilePath, offset: Int64) throws -> String {
        struct Source: Decodable { var source: String }
        do {
            return try decoder.decode(Source.self, from: Data(bytes)).source
        } catch {
            throw damaged(path, "the line at offset \(offset) is not an item (\(DocumentError.summary(of: error)))")
        }
    }

    private static func item(from bytes: ArraySlice<UInt8>, path: FilePath, offset: Int64) throws -> Item {
        let item: Item
        do {
            item = try decoder.decode(Item.self, from: Data(bytes))
        } catch {
            throw damaged(path, "the line at offset \(offset) is not an item (\(DocumentError.summary(of: error)))")
        }
        guard item.bytes >= 0 else { throw damaged(path, "the item at offset \(offset) has a negative size") }
        for relative in [item.source] + (item.bundle.map { [$0] } ?? []) where !isInsideRoot(relative) {
            throw DocumentError(.pathTraversal, path: path,
                                reason: "names '\(relative)' (offset \(offset)), which is not a path inside the root; the plan was not made by docconvert")
        }
        return item
    }

    /// Whether `relative` names something strictly inside a root: relative, no `.` or `..`, no empty component.
    static func isInsideRoot(_ relative: String) -> Bool {
        guard !relative.isEmpty, !relative.utf8.contains(0) else { return false }
        let path = FilePath(relative)
        return path.isRelative && path.components.allSatisfy { $0.kind == .regular }
            && path.string == relative && !relative.hasSuffix("/")
    }

    static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    private static func notAPlan(_ path: FilePath, _ why: String) -> DocumentError {
        DocumentError(.invalidMetadata, path: path, reason: "is not a batch plan written by docconvert: \(why)")
    }

    private static func damaged(_ path: FilePath, _ why: String) -> DocumentError {
        DocumentError(.invalidMetadata, path: path,
                      reason: "is a damaged batch plan (\(why)): it was cut short or changed after it was written; make it again with --plan-only")
    }
}

/// Writes a plan as the walk goes: the items into an unnamed file beside the plan, hashed as they are written; at the
/// end the header, then those bytes, into the plan's temporary, flushed and renamed into place.
final class BatchPlanWriter {
    private let target: FilePath
    /// The items, written aside while the walk goes (a locked `.NAME.*.partial`: never an item of a walk).
    private let items: AtomicFile
    private var offset: Int64 = 0
    private var hasher = SHA256()
    private(set) var count = 0
    private(set) var stores = 0
    private(set) var bytes: Int64 = 0

    init(target: FilePath) throws {
        self.target = target
        items = try AtomicFile(target: target, replacing: true)
    }

    deinit { items.discard() }

    func add(_ item: BatchPlan.Item) throws {
        var line = try BatchReport.encoder.encode(item)
        line.append(UInt8(ascii: "\n"))
        hasher.update(data: line)
        try line.withUnsafeBytes { buffer in
            do { try FileIO.write(items.descriptor, buffer, at: offset, path: target) } catch {
                throw DocumentError.io("cannot write the plan's items aside", path: target, errno: FileIO.errno(of: error))
            }
        }
        offset += Int64(line.count)
        count += 1
        bytes = bytes.addingSaturated(item.bytes)
        if item.candidate == .store { stores += 1 }
    }

    /// Writes the plan under its name; returns its header.
    func commit(root: FilePath, createdAt: Date, generator: String, backupDirectory: FilePath?) throws -> BatchPlan.Header {
        let header = BatchPlan.Header(root: root.string, createdAt: createdAt, generator: generator,
                                      backupDirectory: backupDirectory?.string, items: count, stores: stores,
                                      bytes: bytes, sha256: hasher.finalize().hexString)
        let fields = try BatchReport.encoder.encode(header)
        let line = Data(BatchPlan.signature.utf8) + Data("\(BatchPlan.formatVersion),".utf8) + fields.dropFirst()
            + Data("\n".utf8)
        let file = try AtomicFile(target: target, replacing: true, removingStale: false)
        do {
            try line.withUnsafeBytes { try FileSystem.writeAll(file.descriptor, $0, path: file.temporaryPath) }
            try copyItems(to: file.descriptor, path: file.temporaryPath)
            try file.commit()
        } catch {
            file.discard()
            throw error
        }
        return header
    }

    private func copyItems(to output: FileDescriptor, path: FilePath) throws {
        var position: Int64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LineReader.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        while position < offset {
            let count = try FileSystem.read(items.descriptor, at: position, into: buffer, path: target)
            guard count > 0 else { break }
            try FileSystem.writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<count]), path: path)
            position += Int64(count)
        }
    }
}
