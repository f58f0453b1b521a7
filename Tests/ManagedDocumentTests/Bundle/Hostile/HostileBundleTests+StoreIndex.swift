// Hostile bundles, docs/FORMAT.md section 13.2, "Format version 3: the store index".
// The index entry is read whole and checked against `store.index` when the bundle opens (15.5): its size against the
// store's, its header against the metadata, its records and hash tree against the root; every number in it is a
// bundle's, so a lie is refused with an error naming the entry, never a trap.

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// A version 3 bundle made from ``ZipSurgery/Parts``: the store stored, its index (64 KiB segments, no restart
/// points) stored after it, and metadata that refers to it; each test breaks one thing.
struct Version3Parts {
    var parts: ZipSurgery.Parts
    var layout: StoreIndex.Layout
    var index: [UInt8]
    var reference: DocumentMetadata.StoreIndexReference

    init(_ parts: ZipSurgery.Parts) throws {
        self.parts = parts
        let segments = try #require(parts.metadata.store.segments)
        layout = StoreIndex.Layout(size: parts.metadata.store.size, interval: segments.interval, hasRestarts: false)
        let records = try #require(StoreIndex.Records(segments, restarts: nil))
        let (bytes, root) = StoreIndex.encode(records, layout: layout)
        index = bytes
        reference = DocumentMetadata.StoreIndexReference(entry: BundleLayout.storeIndex, root: root,
                                                         interval: segments.interval)
    }

    /// Re-roots the index after a test changed its bytes, as a lying writer would.
    mutating func reroot() throws {
        let count = try #require(layout.count)
        reference.root = try #require(StoreIndex.root(ofEntry: index, count: count))
    }

    /// Writes the bundle: `version` 3 metadata refers to the index (version 2 keeps the segments in the metadata),
    /// the index entry is left out with `omittingIndex`, deflated with `deflatingIndex`.
    func write(at path: FilePath, version: Int = 3, omittingIndex: Bool = false, deflatingIndex: Bool = false,
               editing edit: ((inout [String: Any]) -> Void)? = nil) throws {
        var metadata = parts.metadata
        metadata.formatVersion = version
        if version >= 3 {
            metadata.store.index = reference
            metadata.store.segments = nil
        }
        var copy = parts
        copy.metadata = metadata
        var items = [ZipSurgery.Item(BundleLayout.store, parts.store, compressed: false)]
        if !omittingIndex { items.append(ZipSurgery.Item(BundleLayout.storeIndex, index, compressed: deflatingIndex)) }
        items.append(ZipSurgery.Item(BundleLayout.metadata,
                                     try edit.map { try copy.metadataJSON(editing: $0) } ?? copy.metadataJSON()))
        try ZipSurgery.writeArchive(at: path, entries: items)
    }
}

extension HostileBundleTests {
    @Test("a version 3 bundle made by hand opens, extracts and verifies; so does one whose index another tool deflated (13.2)",
          arguments: [false, true])
    func storeIndexHonest(deflated: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let version3 = try Version3Parts(try ZipSurgery.makeParts(in: directory, rows: 400))
            let bundle = directory.appending("Notes.mdz")
            try version3.write(at: bundle, deflatingIndex: deflated)
            let reader = try BundleReader(at: bundle)
            #expect(reader.metadata.formatVersion == 3)
            #expect(reader.metadata.store.segments == version3.parts.metadata.store.segments)
            #expect(reader.metadata.store.deflateRestarts == nil)
            let out = directory.appending("out")
            try FileSystem.createDirectory(out)
            _ = try reader.verify(full: true, workingDirectory: out)
        }
    }

    @Test("a version 3 metadata text that also carries segment digests is read by its index alone (13.2)")
    func storeIndexIgnoresMetadataDigests() async throws {
        try await withTemporaryDirectory { directory in
            let version3 = try Version3Parts(try ZipSurgery.makeParts(in: directory, rows: 400))
            let bundle = directory.appending("Notes.mdz")
            let lie = String(repeating: "0", count: 64 * (version3.layout.count ?? 0))
            try version3.write(at: bundle) { object in
                var store = object["store"] as? [String: Any] ?? [:]
                store["segments"] = ["interval": 65_536, "sha256": lie]
                object["store"] = store
            }
            let reader = try BundleReader(at: bundle)
            #expect(reader.metadata.store.segments == version3.parts.metadata.store.segments)
            try reader.extract(into: directory.appending("out"))
        }
    }

    enum IndexLie: String, CaseIterable, CustomTestStringConvertible {
        case record, treeBlock, magic, storeSize, flags, reserved, longer, shorter, missing, inVersion2, rootNotHex,
             halfStream, restartFieldsWithoutRestarts
        var testDescription: String { rawValue }
    }

    @Test("a store index that is not the one the metadata describes is refused when the bundle opens, naming what (13.2)",
          arguments: IndexLie.allCases)
    func storeIndexLie(_ lie: IndexLie) async throws {
        try await withTemporaryDirectory { directory in
            // > More than 85 records (48 bytes each) fill two record blocks: the tree then stores a block.
            let rows = lie == .treeBlock ? 18_000 : 400
            var version3 = try Version3Parts(try ZipSurgery.makeParts(in: directory, rows: rows))
            let count = try #require(version3.layout.count)
            var code = DocumentError.Code.metadataMismatch
            var entry: String? = BundleLayout.storeIndex
            var says = ""
            var version = 3, omitting = false
            switch lie {
            case .record:
                version3.index[StoreIndex.headerSize + 5] ^= 0x01
                (code, says) = (.checksumMismatch, "do not hash to 'store.index.root'")
            case .treeBlock:
                try #require(count > StoreIndex.blockSize / StoreIndex.recordSize)
                version3.index[StoreIndex.headerSize + count * StoreIndex.recordSize + 7] ^= 0x01
                (code, says) = (.checksumMismatch, "hash tree block 0")
            case .magic:
                version3.index[0] = UInt8(ascii: "X")
                try version3.reroot()
                says = "magic"
            case .storeSize:
                version3.index.writeLE(UInt64(version3.layout.size - 1), at: 16)
                try version3.reroot()
                says = "store size"
            case .flags:
                version3.index.writeLE(StoreIndex.hasRestartsFlag, at: 40)
                try version3.reroot()
                says = "flags"
            case .reserved:
                version3.index[50] = 1
                try version3.reroot()
                says = "reserved bytes"
            case .longer:
                version3.index += [UInt8](repeating: 0, count: StoreIndex.blockSize)
                says = "need"
            case .shorter:
                version3.index.removeLast(StoreIndex.recordSize)
                says = "need"
            case .missing:
                omitting = true
                (code, says) = (.missingEntry, "format version 3 has one")
            case .inVersion2:
                version = 2
                says = "format version 2 does not define"
            case .rootNotHex:
                version3.reference.root = version3.reference.root.uppercased()
                (entry, says) = (BundleLayout.metadata, "'store.index.root' is not a SHA-256")
            case .halfStream:
                version3.reference.compressedSize = Int64(version3.parts.store.count)
                (entry, says) = (BundleLayout.metadata, "half a stream")
            case .restartFieldsWithoutRestarts:
                version3.index.writeLE(UInt32(0xDEAD_BEEF), at: StoreIndex.headerSize + 40)
                try version3.reroot()
                says = "record 0 has restart fields"
            }
            let bundle = directory.appending("Notes.mdz")
            try version3.write(at: bundle, version: version, omittingIndex: omitting)
            let error = try expectRefusal(bundle, in: directory, code: code, entry: entry)
            #expect(error?.reason.contains(says) == true, "\(String(describing: error))")
        }
    }

    @Test("a version 3 interval out of range is refused, never a trap: 0, below 64 KiB, 2⁶² and 2⁶³ − 1 (13.2)",
          arguments: [Int64(0), -1, 65_535, 1 << 62, Int64.max])
    func storeIndexInterval(_ interval: Int64) async throws {
        try await withTemporaryDirectory { directory in
            var version3 = try Version3Parts(try ZipSurgery.makeParts(in: directory, rows: 400))
            version3.reference.interval = interval
            let bundle = directory.appending("Notes.mdz")
            try version3.write(at: bundle)
            try expectRefusal(bundle, in: directory, codes: [.metadataMismatch],
                              entries: [BundleLayout.metadata, BundleLayout.storeIndex])
        }
    }

    @Test("a version 3 record whose digest lies, under a root that names it, is refused when the store is read, naming the segment (13.2)",
          arguments: [RefusalStep.extract, .verify])
    func storeIndexLyingDigest(step: RefusalStep) async throws {
        try await withTemporaryDirectory { directory in
            var version3 = try Version3Parts(try ZipSurgery.makeParts(in: directory, rows: 400))
            try #require((version3.layout.count ?? 0) >= 2)
            version3.index[StoreIndex.headerSize + StoreIndex.recordSize + 3] ^= 0x40  // segment 1's digest
            try version3.reroot()
            // > The store digest must name the lying digests too, or the reader refuses the metadata first.
            var lying = version3.parts.metadata.store.segments!.digests
            lying[1] = Array(version3.index[(StoreIndex.headerSize + StoreIndex.recordSize)..<(StoreIndex.headerSize + StoreIndex.recordSize + 32)]).hexString
            version3.parts.metadata.store.segments?.sha256 = lying.joined()
            version3.parts.reseal()
            let bundle = directory.appending("Notes.mdz")
            try version3.write(at: bundle)
            let error = try expectRefusal(bundle, in: directory, at: step, code: .checksumMismatch,
                                          entry: BundleLayout.store)
            #expect(error?.reason.contains("segment 1") == true, "\(String(describing: error))")
        }
    }
}
