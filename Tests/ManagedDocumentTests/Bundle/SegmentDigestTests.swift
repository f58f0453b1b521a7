import Crypto
import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// `store.segments` (FORMAT.md 11.4): one SHA-256 per segment of the store, written for every store, checked by
/// `verify`, refused when malformed, true after a repack.
@Suite("Segment digests: one SHA-256 per segment of the store, true to its bytes and checked")
struct SegmentDigestTests {
    /// A store of about `bytes` bytes at `pageSize`, rows of random blobs (so deflate cannot shrink it away).
    static func store(at path: FilePath, bytes: Int, pageSize: Int) throws -> FilePath {
        try Fixtures.makeBlobStore(at: path, rows: bytes / 700, blobSize: 400, seed: UInt64(pageSize + bytes),
                                   pageSize: pageSize) { String(repeating: "row \($0) ", count: 20) }
    }

    /// The SHA-256 of each `interval` bytes of `bytes`.
    static func digests(of bytes: [UInt8], interval: Int) -> [String] {
        stride(from: 0, to: bytes.count, by: interval).map { start in
            SHA256.hash(data: bytes[start..<min(bytes.count, start + interval)]).hexString
        }
    }

    @Test("every store the writer packs carries one digest per segment, the last partial one included",
          arguments: [(0, 4096, 300_000), (2, 1024, 700_000), (6, 65_536, 1_500_000), (2, 4096, 20_000)])
    func written(level: Int, pageSize: Int, bytes: Int) async throws {
        try await withTemporaryDirectory { directory in
            let store = try Self.store(at: directory.appending("store.sqlite"), bytes: bytes, pageSize: pageSize)
            var options = WritingOptions()
            options.compression = level == 0 ? .store : .deflate(level: level)
            let bundle = directory.appending("Doc.mdz")
            let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                  to: bundle, options: options)
            let segments = try #require(metadata.store.segments)
            let content = try Fixtures.bytes(of: store)
            // > Under 1 MiB (no restart index): one segment, its digest the whole store's SHA-256.
            let interval = content.count < 1 << 20 ? 1 << 20 : 131_072
            #expect(segments.interval == Int64(interval))
            #expect(segments.digests == Self.digests(of: content, interval: interval))
            #expect(segments.count == (content.count + interval - 1) / interval)
            if content.count < 1 << 20 { #expect(segments.digests == [SHA256.hash(data: content).hexString]) }
            if let restarts = metadata.store.deflateRestarts {
                #expect(segments.interval % restarts.interval == 0, "a digest covers whole restart segments")
            }
            let reader = try BundleReader(at: bundle)
            #expect(reader.metadata.store.segments == segments)
            _ = try reader.verify(full: false, workingDirectory: directory)
        }
    }

    @Test("a writer's verification against the bytes it packed refuses one byte changed, fewer bytes, other digests")
    func comparedWithPackedBytes() async throws {
        try await withTemporaryDirectory { directory in
            let store = try Self.store(at: directory.appending("store.sqlite"), bytes: 300_000, pageSize: 4096)
            let bundle = directory.appending("Doc.mdz")
            let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                  to: bundle, options: WritingOptions())
            let digests = try #require(metadata.store.segments)
            let packed = try Fixtures.bytes(of: store)
            let reader = try BundleReader(at: bundle)
            func verify(_ bytes: [UInt8], _ digests: DocumentMetadata.SegmentDigests) -> DocumentError.Code? {
                do {
                    try bytes.withUnsafeBytes { try reader.verifyEntries(comparingStoreWith: $0, digests: digests) }
                    return nil
                } catch let error as DocumentError {
                    return error.code
                } catch {
                    return .ioFailure
                }
            }
            #expect(verify(packed, digests) == nil)
            var changed = packed
            changed[packed.count - 5] ^= 0x01  // past the header: only the comparison can see it
            #expect(verify(changed, digests) == .checksumMismatch)
            #expect(verify(Array(packed.dropLast(4096)), digests) == .checksumMismatch, "fewer bytes")
            let other = DocumentMetadata.SegmentDigests(interval: digests.interval,
                                                        digests: [String(repeating: "0", count: 64)])
            #expect(verify(packed, other) == .checksumMismatch, "digests the metadata does not record")
        }
    }

    @Test("verify names the segment whose digest differs: the first, one in the middle, the last (partial) one",
          arguments: [0, 2, -1])
    func damagedDigest(position: Int) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory, rows: 2000)
            let interval = 65_536
            var digests = Self.digests(of: parts.store, interval: interval)
            #expect(digests.count >= 4 && parts.store.count % interval != 0, "\(parts.store.count) bytes")
            let index = position < 0 ? digests.count - 1 : position
            digests[index] = String(repeating: "0", count: 64)
            parts.metadata.store.segments = DocumentMetadata.SegmentDigests(interval: Int64(interval), digests: digests)
            parts.reseal()  // version 2: the store digest names the lying segments, so the bundle opens
            var version1 = parts
            version1.metadata.formatVersion = 1
            version1.metadata.store.digest = nil
            version1.metadata.store.sha256 = ZipSurgery.sha256(parts.store)
            for (version, parts) in [(2, parts), (1, version1)] {
                for compressed in [true, false] {
                    let bundle = directory.appending("Damaged-\(version)-\(compressed).mdz")
                    try ZipSurgery.writeBundle(at: bundle, parts: parts, compressed: compressed)
                    let reader = try BundleReader(at: bundle)  // the shape is right: it opens
                    let error = try #require(throws: DocumentError.self) {
                        _ = try reader.verify(full: false, workingDirectory: directory)
                    }
                    #expect(error.code == .checksumMismatch)
                    #expect(error.reason.contains("segment \(index) "), "\(error)")
                    let out = directory.appending("out-\(version)-\(compressed)")
                    if version == 1 {
                        // > Version 1 extraction checks the store's SHA-256, which is right: it goes on.
                        _ = try reader.extract(into: out)
                    } else {
                        // > Version 2 has no whole-store SHA-256: every read of the store checks its segments.
                        let refusal = try #require(throws: DocumentError.self) { try reader.extract(into: out) }
                        #expect(refusal.code == .checksumMismatch && refusal.reason.contains("segment \(index) "))
                    }
                }
            }
        }
    }

    @Test("malformed segment digests are refused when the bundle opens")
    func malformed() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory, rows: 2000)
            let good = Self.digests(of: parts.store, interval: 65_536)
            let cases: [(String, Int64, [String])] = [
                ("interval too small", 4096, Self.digests(of: parts.store, interval: 4096)),
                ("one digest missing", 65_536, Array(good.dropLast())),
                ("one digest too many", 65_536, good + [good[0]]),
                ("uppercase hex", 65_536, [good[0].uppercased()] + good.dropFirst()),
                ("not hex", 65_536, ["zz" + good[0].dropFirst(2)] + good.dropFirst()),
            ]
            for (label, interval, digests) in cases {
                var broken = parts
                broken.metadata.store.segments = DocumentMetadata.SegmentDigests(interval: interval, digests: digests)
                let bundle = directory.appending("Broken.mdz")
                try? FileSystem.removeFile(bundle)
                try ZipSurgery.writeBundle(at: bundle, parts: broken)
                let error = try #require(throws: DocumentError.self, "\(label)") { _ = try BundleReader(at: bundle) }
                #expect(error.code == .metadataMismatch, "\(label): \(error)")
                #expect(error.description.contains("store.segments"), "\(label): \(error)")
            }
            // > Without any (a version 1 writer, another writer): opens and verifies as before.
            let older = parts.asVersion1(keepingSegments: false)
            let bundle = directory.appending("Older.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: older)
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: directory)
        }
    }

    @Test("a flipped byte in any segment of the store is found: by the store's SHA-256 on extraction, by verify")
    func flippedByte() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory, rows: 2000)
            var withDigests = parts
            withDigests.metadata.store.segments = DocumentMetadata.SegmentDigests(
                interval: 65_536, digests: Self.digests(of: parts.store, interval: 65_536))
            for offset in [100, 65_536, parts.store.count - 1] {
                var damaged = withDigests
                damaged.store[offset] ^= 0x40  // the metadata still describes the undamaged store
                let bundle = directory.appending("Flipped-\(offset).mdz")
                try ZipSurgery.writeBundle(at: bundle, parts: damaged, compressed: false)
                let reader = try BundleReader(at: bundle)
                let error = try #require(throws: DocumentError.self) {
                    _ = try reader.verify(full: false, workingDirectory: directory)
                }
                #expect(error.code == .checksumMismatch, "byte \(offset): \(error)")
            }
        }
    }
}
