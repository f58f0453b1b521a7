// Hostile bundles, docs/FORMAT.md section 8, "Compression".
// Methods other than stored and deflate (15.3), and deflate streams that do or do not match their entry (15.6).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("an entry compressed with another method than stored or deflate is refused", arguments: [
        UInt16(12), 14, 9, 93, 95, 99,
    ])
    func unsupportedCompression(method: UInt16) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) {
                    $0.record.method = method
                    $0.localMethod = method
                }
            }
            try expectRefusal(bundle, in: directory, code: .unsupportedCompression, entry: BundleLayout.store)
        }
    }

    /// Ways a deflated entry's stream can disagree with the entry that holds it.
    enum BadStream: String, CaseIterable, CustomTestStringConvertible {
        /// A whole stream, then bytes nobody would read.
        case bytesAfterTheStream
        /// A stored block that is not marked final: the stream never ends.
        case noFinalBlock
        /// A stored block longer than the bytes that follow.
        case cutShort
        /// Block type 3, which deflate reserves.
        case reservedBlockType
        /// A whole stream whose CRC-32 in the directory and local header is wrong.
        case wrongCRC
        var testDescription: String { rawValue }
    }

    @Test("a deflated entry whose stream does not match the entry is refused while it is read",
          arguments: BadStream.allCases)
    func deflatedStreamMismatch(_ bad: BadStream) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let content = Array("hello".utf8)
            var crc = CRC32()
            crc.update(content)
            var stream = ZipSurgery.deflateStoredBlock(content)
            var entryCRC = crc.value
            switch bad {
            case .bytesAfterTheStream: stream += [0x03, 0x00, 0x2A]
            case .noFinalBlock: stream[0] = 0x00
            case .cutShort: stream.removeLast(2)
            case .reservedBlockType: stream = [0x07] + Array(stream.dropFirst())
            case .wrongCRC: entryCRC ^= 0x0101_0101
            }
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { entry in
                    // > Sizes and CRC-32 in the local header, no data descriptor: the payload is the stream alone.
                    entry.localFlags &= ~0x0008
                    entry.record.flags &= ~0x0008
                    entry.localMethod = 8
                    entry.record.method = 8
                    entry.localCRC32 = entryCRC
                    entry.record.crc32 = entryCRC
                    entry.localCompressedSize = UInt32(stream.count)
                    entry.record.compressedSize = UInt64(stream.count)
                    entry.localUncompressedSize = UInt32(content.count)
                    entry.record.uncompressedSize = UInt64(content.count)
                    entry.payload = stream
                }
            }
            #expect(throws: Never.self) { try BundleReader(at: bundle) }
            let code: DocumentError.Code = bad == .wrongCRC ? .checksumMismatch : .corruptArchive
            try expectRefusal(bundle, in: directory, at: .extract, code: code, entry: Self.readme)
        }
    }

    @Test("a deflated entry written as one plain stream by another tool reads back byte for byte")
    func plainStreamFromElsewhere() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let content = Array("hello".utf8)
            var crc = CRC32()
            crc.update(content)
            // > A non-final empty stored block, then the final one: two blocks, one stream.
            let stream: [UInt8] = [0x00, 0x00, 0x00, 0xFF, 0xFF] + ZipSurgery.deflateStoredBlock(content)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) { entry in
                    entry.localFlags &= ~0x0008
                    entry.record.flags &= ~0x0008
                    entry.localCRC32 = crc.value
                    entry.record.crc32 = crc.value
                    entry.localCompressedSize = UInt32(stream.count)
                    entry.record.compressedSize = UInt64(stream.count)
                    entry.payload = stream
                }
            }
            let extracted = try BundleReader(at: bundle).extract(into: directory.appending("out"))
            #expect(try Fixtures.bytes(of: extracted.additionalContent!.appending("readme.txt")) == content)
        }
    }
}
