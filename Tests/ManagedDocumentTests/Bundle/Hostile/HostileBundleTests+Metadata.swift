// Hostile bundles, docs/FORMAT.md section 11, "DocumentMetadata.json".
// Metadata that is malformed, from another format or version, or that disagrees with the archive or the store
// (15.5, 15.7).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("metadata that is not JSON is invalid", arguments: [
        "{ \"format\": ", "not json at all", "[1, 2, 3]", "null", "", "{\"format\": \"managed-document\", }",
    ])
    func malformedMetadata(text: String) async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: Array(text.utf8))
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata missing a required key is invalid", arguments: [
        "format", "formatVersion", "documentID", "createdAt", "modifiedAt", "generator", "mediaType", "store",
        "model", "entries", "store.digest", "store.segments", "store.size", "store.schemaFingerprint",
    ])
    func metadataMissingKey(key: String) async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let json = try parts.metadataJSON { object in
                let path = key.split(separator: ".").map(String.init)
                if path.count == 1 {
                    object.removeValue(forKey: key)
                } else if var inner = object[path[0]] as? [String: Any] {
                    inner.removeValue(forKey: path[1])
                    object[path[0]] = inner
                }
            }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: json)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata with a value of the wrong type is invalid", arguments: [
        "formatVersion=\"1\"", "formatVersion=1.5", "documentID=\"not-a-uuid\"", "createdAt=\"yesterday\"",
        "store=[]", "entries={}",
    ])
    func metadataWrongType(assignment: String) async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let split = assignment.split(separator: "=", maxSplits: 1).map(String.init)
            let value = try JSONSerialization.jsonObject(with: Data(split[1].utf8), options: [.fragmentsAllowed])
            let json = try parts.metadataJSON { $0[split[0]] = value }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: json)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata whose format is not managed-document is invalid", arguments: [
        "other-format", "", "Managed-Document", "managed-document ",
    ])
    func metadataWrongFormat(format: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.format = format
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata from a newer format version is refused as newer", arguments: [4, 99, Int(Int32.max)])
    func newerFormat(version: Int) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = version
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            let error = try expectRefusal(bundle, in: directory, code: .newerFormat, entry: BundleLayout.metadata)
            #expect(error?.reason.contains("\(version)") == true)
        }
    }

    @Test("metadata with a format version below 1 is invalid", arguments: [0, -1])
    func formatVersionBelowOne(version: Int) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = version
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata lying about the store's size is refused", arguments: [Int64(1), -1, 1 << 40])
    func metadataLiesAboutStoreSize(delta: Int64) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.size += delta
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    @Test("metadata naming another store entry is refused")
    func metadataNamesAnotherStore() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.entry = "StoreContent/other"
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
        }
    }

    @Test("metadata whose store SHA-256 (version 1) or store digest (version 2) is not a SHA-256 is refused",
          arguments: [1, 2], [
        "", "abc", String(repeating: "A", count: 64), String(repeating: "g", count: 64),
    ])
    func metadataStoreHashNotHex(version: Int, hash: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = version
            if version == 1 {
                parts.metadata.store.sha256 = hash
            } else {
                parts.metadata.store.digest = hash
            }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
        }
    }

    @Test("a version 1 bundle without 'store.sha256' is invalid; with it, it needs no digest or segments")
    func version1Keys() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.formatVersion = 1
            let missing = directory.appending("Missing.mdz")
            try ZipSurgery.writeBundle(at: missing, parts: parts)
            try expectRefusal(missing, in: directory, code: .invalidMetadata, entry: BundleLayout.metadata)

            parts.metadata.store.sha256 = ZipSurgery.sha256(parts.store)
            parts.metadata.store.digest = String(repeating: "0", count: 64)  // a key version 1 does not know: ignored
            parts.metadata.store.segments = nil
            let good = directory.appending("Good.mdz")
            try ZipSurgery.writeBundle(at: good, parts: parts)
            let reader = try BundleReader(at: good)
            #expect(reader.metadata.store.digest == nil && reader.metadata.store.contentDigest == parts.metadata.store.sha256)
            _ = try reader.verify(full: true, workingDirectory: directory)
        }
    }

    @Test("a version 2 store digest that does not name the recorded segments is refused at open (13.1)", arguments: [
        "another digest", "size off by one", "interval doubled",
    ])
    func storeDigestMismatch(lie: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory, rows: 400)
            let segments = try #require(parts.metadata.store.segments)
            switch lie {
            case "another digest": parts.metadata.store.digest = ZipSurgery.sha256(Array("other".utf8))
            case "size off by one":
                parts.metadata.store.digest = segments.storeDigest(size: parts.metadata.store.size + 1)
            default:
                var doubled = segments
                doubled.interval *= 2
                parts.metadata.store.digest = doubled.storeDigest(size: parts.metadata.store.size)
            }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            let error = try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
            #expect(error?.reason.contains("'store.digest'") == true, "\(String(describing: error))")
        }
    }

    @Test("metadata listing an entry the archive does not hold is refused")
    func metadataListsAbsentEntry() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.entries = [DocumentMetadata.Entry(name: "AdditionalContent/ghost", size: 5,
                                                             sha256: ZipSurgery.sha256(Array("ghost".utf8)))]
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: BundleLayout.metadata)
        }
    }

    @Test("an entry the metadata does not list is refused")
    func metadataOmitsEntry() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            parts.metadata.entries = []
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: Self.readme)
        }
    }

    @Test("metadata lying about an entry's size is refused")
    func metadataLiesAboutEntrySize() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            parts.metadata.entries[0].size = 6
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .metadataMismatch, entry: Self.readme)
        }
    }

    @Test("metadata lying about the store's page size is refused on verify")
    func metadataLiesAboutPageSize() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.pageSize = parts.metadata.store.pageSize == 1024 ? 4096 : 1024
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    @Test("metadata lying about the store's user_version is refused on verify")
    func metadataLiesAboutUserVersion() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.userVersion += 1
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    @Test("metadata lying about the store's schema fingerprint is refused on verify")
    func metadataLiesAboutSchema() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.schemaFingerprint = ZipSurgery.sha256(Array("CREATE TABLE other(x)".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .verify, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }
}
