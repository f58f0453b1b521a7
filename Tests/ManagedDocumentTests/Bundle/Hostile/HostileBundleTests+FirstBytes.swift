// Hostile bundles, docs/FORMAT.md section 4, "The first bytes of a bundle".
// The `mimetype` entry: where it lies, how it is stored, its content and its CRC-32 (15.4, 15.5), and what is
// read with a notice rather than refused.

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("a mimetype entry that is not the first entry is read, with a notice (another tool's repack)")
    func mimetypeNotFirst() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { archive in
                let mimetype = archive.entries.removeFirst()
                archive.entries.insert(mimetype, at: 1)
            }
            try expectReadWithNotice(bundle, in: directory, saying: "is not the first entry")
        }
    }

    @Test("a compressed mimetype entry is read, with a notice")
    func mimetypeCompressed() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { entry in
                    entry.payload = ZipSurgery.deflateStoredBlock(entry.payload)
                    entry.localMethod = 8
                    entry.localCompressedSize = UInt32(entry.payload.count)
                    entry.record.method = 8
                    entry.record.versionNeeded = 20
                    entry.record.compressedSize = UInt64(entry.payload.count)
                }
            }
            try expectReadWithNotice(bundle, in: directory, saying: "is compressed")
        }
    }

    @Test("a mimetype entry with an extra field is read, with a notice")
    func mimetypeExtraField() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { $0.localExtra = [0xFE, 0xCA, 0x02, 0x00, 0x00, 0x00] }
            }
            try expectReadWithNotice(bundle, in: directory, saying: "has an extra field")
        }
    }

    @Test("a mimetype entry with a data descriptor is read, with a notice")
    func mimetypeDataDescriptor() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { entry in
                    entry.localFlags |= 0x0008
                    entry.record.flags |= 0x0008
                    var descriptor: [UInt8] = []
                    descriptor.appendLE(UInt32(0x0807_4b50))
                    descriptor.appendLE(entry.record.crc32)
                    descriptor.appendLE(UInt32(entry.payload.count))
                    descriptor.appendLE(UInt32(entry.payload.count))
                    entry.payload += descriptor
                }
            }
            try expectReadWithNotice(bundle, in: directory, saying: "has a data descriptor")
        }
    }

    @Test("bytes prefixed to a bundle (a stub, offsets adjusted by zip -A) are refused")
    func prefixedStub() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try Fixtures.write(Array("#!/bin/sh\necho not a bundle\nexit 0\n".utf8) + (try Fixtures.bytes(of: bundle)), to: bundle)
            let adjusted = try run("zip", ["-A", "-q", bundle.string])
            #expect(adjusted.status == 0, "\(adjusted.output)")
            try expectRefusal(bundle, in: directory, code: .mimetypeNotFirst, entry: BundleLayout.mimetype)
        }
    }

    /// A bundle whose `mimetype` layout another tool changed: read, verified and extracted, with a notice.
    private func expectReadWithNotice(_ bundle: FilePath, in directory: FilePath, saying text: String) throws {
        let reader = try BundleReader(at: bundle)
        #expect(!reader.isMediaTypeSniffable)
        #expect(reader.notices.contains { $0.contains(text) && $0.contains("byte 38") }, "\(reader.notices)")
        #expect(reader.mediaType == BundleLayout.defaultMediaType)
        _ = try reader.verify(full: true, workingDirectory: directory)
        _ = try reader.extract(into: directory.appending("read-\(UUID().uuidString)"))
    }

    @Test("a mimetype entry whose content is not a media type is refused", arguments: [
        "hello world", "text/plain\n", "application", "a/b/c", "/x", "x/", "ünïcødé/x", "",
        "application/" + String(repeating: "x", count: 300),
    ])
    func mimetypeNotAMediaType(content: String) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.metadata.mediaType = content
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, mediaType: content)
            try expectRefusal(bundle, in: directory, code: .invalidMimetype, entry: BundleLayout.mimetype)
        }
    }

    @Test("a mimetype entry whose CRC-32 does not match its content is refused")
    func mimetypeBadCRC() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.mimetype) { entry in
                    entry.record.crc32 ^= 1
                    entry.localCRC32 ^= 1
                }
            }
            try expectRefusal(bundle, in: directory, code: .checksumMismatch, entry: BundleLayout.mimetype)
        }
    }

    @Test("a mimetype entry that differs from the metadata's mediaType is refused")
    func mediaTypeMismatch() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, mediaType: "application/x-other+zip")
            try expectRefusal(bundle, in: directory, code: .mediaTypeMismatch, entry: BundleLayout.mimetype)
        }
    }
}
