// Hostile bundles, docs/FORMAT.md section 3, "The zip container".
// The refusals of section 15.1 (the file), 15.2 (end records and central directory) and 15.4 (where the bytes lie),
// and a record hidden beyond the entry count (15.6).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("two directory records pointing at the same local header are overlapping entries")
    func overlappingEntries() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let copy = "AdditionalContent/overlap"
            try ZipSurgery.edit(bundle, editingDirectory: { records in
                var record = records.first { $0.name == Array(BundleLayout.store.utf8) }!
                record.name = Array(copy.utf8)
                records.append(record)
            }) { _ in }
            // Which of the two is named depends on the order of the sort; one of them must be.
            try expectRefusal(bundle, in: directory, codes: [.overlappingEntries],
                              entries: [BundleLayout.store, copy])
        }
    }

    @Test("a directory record pointing into another entry's data is an overlap")
    func recordPointsIntoData() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle, editingDirectory: { records in
                let store = records.first { $0.name == Array(BundleLayout.store.utf8) }!
                var record = store
                record.name = Array("AdditionalContent/inner".utf8)
                record.localHeaderOffset = store.localHeaderOffset + 100
                records.append(record)
            }) { _ in }
            try expectRefusal(bundle, in: directory, code: .overlappingEntries, entry: "AdditionalContent/inner")
        }
    }

    /// Where a directory record the end record does not count points.
    enum HiddenRecord: String, Sendable, CaseIterable {
        /// At a listed entry's local header, under another name (other readers list one more entry).
        case sharingALocalHeader
        /// At a local header and data of its own, after the listed entries.
        case withItsOwnData
    }

    @Test("a directory record hidden beyond the end record's entry count is refused", arguments: HiddenRecord.allCases)
    func hiddenDirectoryRecord(hidden: HiddenRecord) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let name = "../../evil.txt"
            switch hidden {
            case .sharingALocalHeader:
                try ZipSurgery.edit(bundle, editingDirectory: { records in
                    var record = records.first { $0.name == Array(Self.readme.utf8) }!
                    record.name = Array(name.utf8)
                    records.append(record)
                }, hiddenRecords: 1) { _ in }
            case .withItsOwnData:
                try ZipSurgery.edit(bundle, hiddenRecords: 1) { archive in
                    var entry = archive.entries[archive.index(of: Self.readme)]
                    entry.rename(to: Array(name.utf8))
                    archive.entries.append(entry)
                }
            }
            // Python's zipfile and bsdtar list the hidden entry; the reader must not accept what it did not check.
            try expectRefusal(bundle, in: directory, at: .extract, codes: [.corruptArchive],
                              entries: [nil, name, Self.readme])
        }
    }

    @Test("an entry whose data runs past the end of the file is a truncated archive")
    func dataRunsPastTheFile() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let size = try Fixtures.bytes(of: bundle).count
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) { $0.record.compressedSize = UInt64(size) * 4 }
            }
            try expectRefusal(bundle, in: directory, codes: [.truncatedArchive, .corruptArchive],
                              entry: BundleLayout.store)
        }
    }

    /// Where a copy was cut off.
    enum Cut: String, Sendable, CaseIterable {
        case oneByteShort, half, afterMimetype
    }

    @Test("a bundle cut short, its end records lost, is a truncated or corrupt archive", arguments: Cut.allCases)
    func cutShort(cut: Cut) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let bytes = try Fixtures.bytes(of: bundle)
            let length = switch cut {
            case .oneByteShort: bytes.count - 1
            case .half: bytes.count / 2
            case .afterMimetype: BundleLayout.mediaTypeOffset + BundleLayout.defaultMediaType.utf8.count
            }
            try Fixtures.write(Array(bytes.prefix(length)), to: bundle)
            try expectRefusal(bundle, in: directory, codes: [.truncatedArchive, .corruptArchive], entry: nil)
        }
    }

    @Test("a directory record pointing where there is no local header is a corrupt archive")
    func recordPointsAtNoHeader() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { $0.localHeader.writeLE(UInt32(0x1234_5678), at: 0) }
            }
            try expectRefusal(bundle, in: directory, code: .corruptArchive, entry: Self.readme)
        }
    }

    @Test("a local header whose name disagrees with the directory is a corrupt archive")
    func localNameDisagrees() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.modify(Self.readme) { $0.localName = Array("../../../../tmp/evil".utf8) } }
            try expectRefusal(bundle, in: directory, code: .corruptArchive, entry: Self.readme)
        }
    }

    @Test("a local header whose sizes disagree with the directory is a corrupt archive")
    func localSizesDisagree() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { entry in
                    #expect(entry.localUncompressedSize == 5)
                    entry.localUncompressedSize = 5_000
                }
            }
            try expectRefusal(bundle, in: directory, at: .extract, codes: [.corruptArchive, .sizeMismatch],
                              entry: Self.readme)
        }
    }

    @Test("a file that is not a zip archive is refused", arguments: ["empty", "text", "random", "pdf"])
    func notAZipArchive(kind: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Notes.mdz")
            var generator = SeededGenerator(seed: 7)
            let bytes: [UInt8] = switch kind {
            case "empty": []
            case "text": Array("Dear diary, today I opened a bundle.\n".utf8)
            case "random": (0..<8_192).map { _ in UInt8.random(in: 0...255, using: &generator) }
            default: Array("%PDF-1.4\n%\u{E2}\u{E3}\n1 0 obj << /Type /Catalog >> endobj\ntrailer << >>\n%%EOF\n".utf8)
            }
            try Fixtures.write(bytes, to: bundle)
            try expectRefusal(bundle, in: directory, code: .notAZipArchive, entry: nil)
        }
    }

    @Test("a SQLite store passed as a bundle is not a document, and the error says how to convert it")
    func sqliteStoreAsBundle() async throws {
        try await withTemporaryDirectory { directory in
            let store = try Fixtures.makeStore(at: directory.appending("Notes.sqlite"), rows: 3)
            let error = try expectRefusal(store, in: directory, code: .notADocument, entry: nil)
            #expect(error?.reason.contains("LegacyConverter") == true, "\(String(describing: error))")
        }
    }
}
