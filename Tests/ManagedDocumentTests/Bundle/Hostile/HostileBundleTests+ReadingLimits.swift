// Hostile bundles, docs/FORMAT.md section 14, "Reading limits".
// Each `ReadingLimits` bound, checked before anything is inflated, and bombs stopped while inflating (15.6).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("a bundle with more entries than the limit is refused")
    func entryCountLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxEntryCount = 4
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: nil, limits: limits)
        }
    }

    @Test("a bundle whose entries inflate beyond the total-size limit is refused")
    func totalSizeLimit() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            var limits = ReadingLimits()
            limits.maxTotalUncompressedSize = 4_096
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: BundleLayout.store, limits: limits)
        }
    }

    @Test("an entry whose declared sizes exceed the compression-ratio limit is refused")
    func compressionRatioLimit() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            let name = "AdditionalContent/zeros"
            parts.add(name, [UInt8](repeating: 0, count: 4 << 20))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            var limits = ReadingLimits()
            limits.maxCompressionRatio = 100
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: name, limits: limits)
        }
    }

    @Test("a declared size beyond the default ratio limit is refused before anything is inflated")
    func declaredRatioBomb() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.picture) { $0.record.uncompressedSize = 32 << 30 }
            }
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: Self.picture)
        }
    }

    @Test("an entry name longer than a small name limit is refused")
    func nameLengthLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxNameLength = 24
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: BundleLayout.store, limits: limits)
        }
    }

    @Test("metadata larger than the metadata limit is refused")
    func metadataSizeLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxMetadataSize = 64
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: BundleLayout.metadata,
                              limits: limits)
        }
    }

    @Test("a central directory larger than the directory limit is refused")
    func directorySizeLimit() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            var limits = ReadingLimits()
            limits.maxDirectorySize = 64
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: nil, limits: limits)
        }
    }

    @Test("a metadata entry that inflates beyond its declared size is refused while it is read")
    func metadataBomb() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            var json = try parts.metadataJSON()
            json += [UInt8](repeating: 0x20, count: 20 << 20)  // trailing whitespace: still valid JSON
            try ZipSurgery.writeBundle(at: bundle, parts: parts, metadata: json)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.metadata) { entry in
                    entry.record.uncompressedSize = 4_096
                    entry.localUncompressedSize = entry.localUncompressedSize == 0 ? 0 : 4_096
                    let descriptor = entry.payload.count - 16
                    if descriptor >= 0, entry.payload.readLE32(at: descriptor) == 0x0807_4b50 {
                        entry.payload.writeLE(UInt32(4_096), at: descriptor + 12)
                    }
                }
            }
            try expectRefusal(bundle, in: directory, codes: [.sizeMismatch, .checksumMismatch],
                              entry: BundleLayout.metadata)
        }
    }

    @Test("a deflate bomb that inflates far beyond its declared size stops within a buffer of it")
    func deflateBomb() async throws {
        try await withTemporaryDirectory { directory in
            let declared = 1 << 20
            let name = "AdditionalContent/bomb"
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.entries = [DocumentMetadata.Entry(
                name: name, size: Int64(declared), sha256: ZipSurgery.sha256([UInt8](repeating: 0, count: declared)))]
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [
                .init(BundleLayout.store, parts.store),
                .init(name, zeros: 50 << 20),
                .init(BundleLayout.metadata, try parts.metadataJSON()),
            ])
            try ZipSurgery.edit(bundle) {
                $0.modify(name) { entry in
                    #expect(entry.record.method == 8)
                    #expect(entry.record.compressedSize < 1 << 20)
                    entry.record.uncompressedSize = UInt64(declared)
                    entry.localUncompressedSize = entry.localUncompressedSize == 0 ? 0 : UInt32(declared)
                    // The data descriptor lies too.
                    let descriptor = entry.payload.count - 16
                    if descriptor >= 0, entry.payload.readLE32(at: descriptor) == 0x0807_4b50 {
                        entry.payload.writeLE(UInt32(declared), at: descriptor + 12)
                    }
                }
            }
            let reader = try BundleReader(at: bundle)
            #expect(reader.entry(named: name)?.size == UInt64(declared))

            // What the streaming check leaves on disk when it stops (extract removes it afterwards).
            let out = directory.appending("out")
            try FileSystem.createDirectory(out)
            let partial = #expect(throws: DocumentError.self) { try reader.streamEntries(into: out) { _ in true } }
            #expect([.sizeMismatch, .checksumMismatch].contains(partial?.code), "\(String(describing: partial))")
            let written = (try FileSystem.status(out.appending(name)))?.size ?? 0
            #expect(written <= Int64(declared + (2 << 20)), "the bomb wrote \(written) bytes")
            try FileSystem.removeTree(out)

            try expectRefusal(bundle, in: directory, at: .extract, codes: [.sizeMismatch, .checksumMismatch],
                              entry: name)
            try expectRefusal(bundle, in: directory, at: .verify, codes: [.sizeMismatch, .checksumMismatch],
                              entry: name)
            let verifying = #expect(throws: DocumentError.self) { try reader.verifyEntries() }
            #expect([.sizeMismatch, .checksumMismatch].contains(verifying?.code))
        }
    }

    @Test("a valid store followed by 64 MiB of zeros, sizes and SHA-256 consistent, is refused before it is inflated")
    func paddedStore() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.store.deflateRestarts = nil
            let declared = StoreHeader(Array(parts.store.prefix(100)))?.declaredSize
            #expect(declared == UInt64(parts.store.count), "the fixture's header states its size")
            parts.replaceStore(parts.store + [UInt8](repeating: 0, count: 64 << 20))
            let bundle = directory.appending("Padded.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [
                .init(BundleLayout.store, parts.store),
                .init(BundleLayout.metadata, try parts.metadataJSON()),
            ])
            #expect(try FileSystem.status(bundle)!.size < 1 << 20, "a small bundle")
            try expectRefusal(bundle, in: directory, at: .extract, codes: [.sizeMismatch], entry: BundleLayout.store)
            try expectRefusal(bundle, in: directory, at: .verify, codes: [.sizeMismatch], entry: BundleLayout.store)
            let reader = try BundleReader(at: bundle)
            let out = directory.appending("out")
            try FileSystem.createDirectory(out)
            _ = #expect(throws: DocumentError.self) { try reader.streamEntries(into: out) { _ in true } }
            let written = (try FileSystem.status(out.appending(BundleLayout.store)))?.size ?? 0
            #expect(written <= 1 << 20, "stopped after the header: \(written) bytes written")

            // A little junk after the last page (an honest file cut or grown by a crash) is still read.
            var honest = try ZipSurgery.makeParts(in: directory.appending("honest"))
            honest.metadata.store.deflateRestarts = nil
            honest.replaceStore(honest.store + [UInt8](repeating: 0, count: 4096))
            let tolerated = directory.appending("Honest.mdz")
            try ZipSurgery.writeArchive(at: tolerated, entries: [
                .init(BundleLayout.store, honest.store),
                .init(BundleLayout.metadata, try honest.metadataJSON()),
            ])
            try BundleReader(at: tolerated).verifyEntries()
        }
    }
}
