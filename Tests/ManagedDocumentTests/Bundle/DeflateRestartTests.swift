import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// `store.deflateRestarts` lets a reader inflate the store on several cores; it comes from the metadata, so it is
/// untrusted: an index that does not describe the entry is refused when the bundle opens, and one whose segments do
/// not inflate as it says is refused while inflating, with nothing written outside the working place.
@Suite("Deflate restart indexes: used to inflate on every core, refused when they lie")
struct DeflateRestartTests {
    /// A bundle whose store (about 3 MiB, a dozen segments) was deflated on two threads, with its restart index.
    static func makeBundle(at bundle: FilePath, threads: Int = 2,
                           compression: WritingOptions.Compression = .deflate(level: 6)) throws -> DocumentMetadata {
        var options = WritingOptions(compression: compression)
        options.compressionThreads = threads
        options.formatVersion = 2  // these tests rewrite version 2's restart index, which its metadata holds
        return try Fixtures.makeBundle(at: bundle, rows: 9_000, blobSize: 200, options: options)
    }

    /// Rewrites the bundle's metadata with `edit` applied to `store.deflateRestarts` (as JSON), stored uncompressed.
    /// The format version 2 CRC-32s (`crc32s`) are computed again at the edited interval from the store's bytes, and
    /// the CRC-32Cs (`compressedCRC32Cs`) at the edited offsets from the compressed stream, as an honest writer
    /// would, so that an edit tests the rule it breaks.
    static func editRestarts(of bundle: FilePath, _ edit: (inout [String: Any]) -> Void) throws {
        let reader = try BundleReader(at: bundle)
        let metadata = reader.metadata
        let scratch = bundle.removingLastComponent().appending(".crc-\(UUID().uuidString)")
        let content = try Fixtures.bytes(of: try reader.extract(into: scratch).store)
        try FileSystem.removeTree(scratch)
        var json = try #require(try JSONSerialization.jsonObject(with: Data(metadata.encoded())) as? [String: Any])
        var store = try #require(json["store"] as? [String: Any])
        var restarts = store["deflateRestarts"] as? [String: Any] ?? [:]
        edit(&restarts)
        if let interval = restarts["interval"] as? Int, interval > 0 {
            restarts["crc32s"] = DeflateRestarts.spelled(stride(from: 0, to: content.count, by: interval).map { start in
                var crc = CRC32()
                content[start..<min(content.count, start + interval)].withUnsafeBytes { crc.update($0) }
                return crc.value
            })
        }
        // > The compressed bytes' CRC-32Cs at the edited offsets, where they name ranges of the stream (an index
        // > that does not is refused before they are read).
        if restarts["compressedCRC32Cs"] != nil, let entry = reader.entry(named: BundleLayout.store) {
            let file = try Fixtures.bytes(of: bundle)
            let stream = Array(file[Int(entry.dataOffset)..<Int(entry.dataOffset + entry.compressedSize)])
            let offsets = Self.offsets(restarts)
            let ends = Array(offsets.dropFirst()) + [stream.count]
            if zip(offsets, ends).allSatisfy({ 0 <= $0 && $0 <= $1 && $1 <= stream.count }) {
                restarts["compressedCRC32Cs"] = DeflateRestarts.spelled(zip(offsets, ends).map { start, end in
                    stream[start..<end].withUnsafeBytes { CRC32C.of($0) }
                })
            } else {
                restarts["compressedCRC32Cs"] = nil
            }
        }
        store["deflateRestarts"] = restarts
        json["store"] = store
        let bytes = Array(try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]))
        var crc = CRC32()
        crc.update(bytes)
        try ZipSurgery.edit(bundle) { archive in
            archive.modify(BundleLayout.metadata) { entry in
                entry.localMethod = 0
                entry.localFlags &= ~0x0008
                entry.localCRC32 = crc.value
                entry.localCompressedSize = UInt32(bytes.count)
                entry.localUncompressedSize = UInt32(bytes.count)
                entry.localExtra = []
                entry.payload = bytes
                entry.record.method = 0
                entry.record.flags &= ~0x0008
                entry.record.crc32 = crc.value
                entry.record.compressedSize = UInt64(bytes.count)
                entry.record.uncompressedSize = UInt64(bytes.count)
            }
        }
    }

    static func offsets(_ restarts: [String: Any]) -> [Int] { (restarts["offsets"] as? [Int]) ?? [] }

    @Test("the writer records one restart per segment, and the store reads back through them byte for byte")
    func indexIsRecorded() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            let metadata = try Self.makeBundle(at: bundle)
            let restarts = try #require(metadata.store.deflateRestarts)
            let reader = try BundleReader(at: bundle)
            let entry = reader.storeEntry
            #expect(restarts.interval == 128 << 10)
            #expect(restarts.offsets.count == Int((entry.size + 131_071) / 131_072))
            #expect(restarts.offsets.count >= 8, "the store spans several segments")
            #expect(restarts.offsets.first == 0 && zip(restarts.offsets, restarts.offsets.dropFirst()).allSatisfy { $0 < $1 })
            let extracted = try reader.extract(into: directory.appending("first"))
            let theirs = directory.appending("theirs")
            #expect(try run("unzip", ["-q", bundle.string, BundleLayout.store, "-d", theirs.string]).status == 0)
            #expect(try Fixtures.bytes(of: extracted.store) == Fixtures.bytes(of: theirs.appending(BundleLayout.store)))
            _ = try reader.verify(full: true)
        }
    }

    @Test("one compression thread (a batch job's share of the cores) still writes a restartable stream")
    func oneThreadStillRestarts() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            let metadata = try Self.makeBundle(at: bundle, threads: 1)
            let restarts = try #require(metadata.store.deflateRestarts)
            #expect(restarts.offsets.count >= 8)
            let reader = try BundleReader(at: bundle)
            _ = try reader.verify(full: false)
            #expect(try run("unzip", ["-tq", bundle.string]).status == 0)
        }
    }

    @Test("a coarser index that still tells the truth (every other restart) is accepted")
    func coarserIndex() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            _ = try Self.makeBundle(at: bundle)
            let before = try Fixtures.bytes(of: try BundleReader(at: bundle).extract(into: directory.appending("a")).store)
            try Self.editRestarts(of: bundle) { restarts in
                restarts["interval"] = 256 << 10
                restarts["offsets"] = Self.offsets(restarts).enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
            }
            let reader = try BundleReader(at: bundle)
            #expect(reader.metadata.store.deflateRestarts?.interval == 256 << 10)
            let after = try Fixtures.bytes(of: try reader.extract(into: directory.appending("b")).store)
            #expect(after == before)
        }
    }

    enum OpenLie: String, CaseIterable, CustomTestStringConvertible {
        case missingSegment, firstNotZero, notIncreasing, pastTheEnd, tinyInterval, segmentTooLong
        var testDescription: String { rawValue }
    }

    @Test("an index that does not describe the store entry is refused when the bundle opens", arguments: OpenLie.allCases)
    func refusedAtOpen(_ lie: OpenLie) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            _ = try Self.makeBundle(at: bundle, compression: .deflate(level: 6))
            let storeEntry = try BundleReader(at: bundle).storeEntry
            let compressedSize = Int(storeEntry.compressedSize), storeSize = Int(storeEntry.size)
            try Self.editRestarts(of: bundle) { restarts in
                var offsets = Self.offsets(restarts)
                switch lie {
                case .missingSegment: offsets.removeLast()
                case .firstNotZero: offsets[0] = 1
                case .notIncreasing: offsets[2] = offsets[1]
                case .pastTheEnd: offsets[offsets.count - 1] = compressedSize + 10
                case .tinyInterval: restarts["interval"] = 4096
                case .segmentTooLong:
                    // The right number of 64 KiB segments, but the first takes 200,000 bytes: no deflate needs that.
                    restarts["interval"] = 64 << 10
                    let count = (storeSize + 65_535) / 65_536
                    offsets = [0] + (1..<count).map { 200_000 + $0 }
                }
                restarts["offsets"] = offsets
            }
            try expectRefusal(bundle, in: directory, at: .open, code: .metadataMismatch, entry: BundleLayout.store)
        }
    }

    enum InflateLie: String, CaseIterable, CustomTestStringConvertible {
        case shiftedOffset, indexOverOneStream, damagedSegment
        var testDescription: String { rawValue }
    }

    @Test("an index whose segments do not inflate as it says is refused while inflating",
          .enabled(if: ParallelDeflater.availableCores > 1, "one core: the store is inflated in one stream, the index unused"),
          arguments: InflateLie.allCases)
    func refusedWhileInflating(_ lie: InflateLie) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            let metadata = try Self.makeBundle(at: bundle, threads: lie == .indexOverOneStream ? 0 : 2)
            let entry = try BundleReader(at: bundle).storeEntry
            switch lie {
            case .shiftedOffset:
                try Self.editRestarts(of: bundle) { restarts in
                    var offsets = Self.offsets(restarts)
                    offsets[3] += 1
                    restarts["offsets"] = offsets
                }
            case .indexOverOneStream:
                // An index spread evenly over the stream, instead of the one the writer recorded, points into
                // blocks, and it names this very stream (its compressed size and CRC-32): a lie, not a stale hint.
                let count = Int((entry.size + 262_143) / 262_144)
                try Self.editRestarts(of: bundle) { restarts in
                    restarts["interval"] = 256 << 10
                    restarts["offsets"] = (0..<count).map { $0 * Int(entry.compressedSize) / count }
                    restarts["compressedSize"] = Int(entry.compressedSize)
                    restarts["crc32"] = Int(entry.crc32)
                }
            case .damagedSegment:
                let offset = try #require(metadata.store.deflateRestarts).offsets[5] + 100
                try ZipSurgery.edit(bundle) { archive in
                    archive.modify(BundleLayout.store) { $0.payload[Int(offset)] ^= 0x5A }
                }
            }
            try expectRefusal(bundle, in: directory, at: .extract,
                              codes: [.corruptArchive, .sizeMismatch, .checksumMismatch], entry: BundleLayout.store)
            try expectRefusal(bundle, in: directory, at: .verify,
                              codes: [.corruptArchive, .sizeMismatch, .checksumMismatch], entry: BundleLayout.store)
        }
    }

    enum StaleHint: String, CaseIterable, CustomTestStringConvertible {
        case storedEntry, otherStream, olderWriterOverOneStream
        var testDescription: String { rawValue }
    }

    @Test("a stale index (another stream than the one it names, or a stored store) is ignored: the store reads in one stream, checked",
          arguments: StaleHint.allCases)
    func staleHintsAreIgnored(_ hint: StaleHint) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            let metadata = try Self.makeBundle(at: bundle, threads: hint == .olderWriterOverOneStream ? 0 : 2,
                                               compression: hint == .storedEntry ? .store : .deflate(level: 6))
            let entry = try BundleReader(at: bundle).storeEntry
            let count = Int((entry.size + 262_143) / 262_144)
            try Self.editRestarts(of: bundle) { restarts in
                restarts["interval"] = 256 << 10
                restarts["offsets"] = (0..<count).map { $0 * Int(max(entry.compressedSize, 1)) / count }
                switch hint {
                case .storedEntry: break
                case .otherStream:  // what a repack leaves: the writer's identity of a stream that is gone
                    restarts["compressedSize"] = Int(entry.compressedSize) + 1000
                    restarts["crc32"] = Int(entry.crc32)
                case .olderWriterOverOneStream:  // no identity, as older writers wrote it, over a stream it does not fit
                    restarts["compressedSize"] = nil
                    restarts["crc32"] = nil
                }
            }
            let reader = try BundleReader(at: bundle)
            switch hint {
            case .olderWriterOverOneStream: #expect(reader.restartIndex == .used(segments: count, identified: false))
            default:
                guard case .stale = reader.restartIndex else {
                    Issue.record("expected a stale index, got \(reader.restartIndex)")
                    return
                }
            }
            let extracted = try reader.extract(into: directory.appending("first"))
            #expect(Fixtures.storeDigest(of: try Fixtures.bytes(of: extracted.store),
                                         interval: metadata.store.segments?.interval) == metadata.store.digest)
            _ = try reader.verify(full: true, workingDirectory: directory)
            try FileSystem.removeTree(extracted.directory)

            // Content is still the contract: a damaged byte in the same repacked bundle is refused.
            try ZipSurgery.edit(bundle) { archive in
                archive.modify(BundleLayout.store) { $0.payload[$0.payload.count / 2] ^= 0x5A }
            }
            try expectRefusal(bundle, in: directory, at: .extract,
                              codes: [.corruptArchive, .sizeMismatch, .checksumMismatch], entry: BundleLayout.store)
        }
    }
}
