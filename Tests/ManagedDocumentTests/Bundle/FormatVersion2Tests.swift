import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Format version 2 (FORMAT.md 13.1): what the writer records, checked by python on its own, and what a reader
/// refuses of it. Version 1 bundles written by the previous release: `Tests/DocumentAppTests/FormatVersion1Tests.swift`.
@Suite("Format version 2: the store digest of segment digests, a CRC-32 per restart segment")
struct FormatVersion2Tests {
    /// python's own reading of a bundle: the metadata's version and store keys, and whether its store digest and
    /// CRC-32s are those of the store's bytes (zipfile, hashlib and zlib; nothing of this package).
    static let independentCheck = """
        import hashlib, json, sys, zipfile, zlib
        archive = zipfile.ZipFile(sys.argv[1])
        metadata = json.loads(archive.read('DocumentMetadata.json'))
        store = metadata['store']
        data = archive.read('StoreContent/persistentStore')
        segments = store['segments']
        step = segments['interval']
        raw = b''.join(hashlib.sha256(data[i:i + step]).digest() for i in range(0, len(data), step))
        assert segments['sha256'] == raw.hex(), 'segment digests'
        digest = hashlib.sha256(b'MDZ-store-digest-2' + len(data).to_bytes(8, 'little') + step.to_bytes(8, 'little') + raw)
        assert store['digest'] == digest.hexdigest(), 'store digest'
        assert 'sha256' not in store, 'no whole-store SHA-256 in version 2'
        restarts = store.get('deflateRestarts')
        if restarts:
            every = restarts['interval']
            crcs = ''.join('%08x' % zlib.crc32(data[i:i + every]) for i in range(0, len(data), every))
            assert restarts['crc32s'] == crcs, 'restart CRC-32s'
            assert step % every == 0, 'digest segments of whole restart segments'
        print(metadata['formatVersion'], 'restarts' if restarts else 'none')
        """

    @Test("every bundle the writer makes when asked for version 2 is version 2, and python finds its digests true",
          arguments: [(2, 2_500_000, 2), (2, 2_500_000, 0), (6, 3_000_000, 2), (0, 1_500_000, 2), (2, 60_000, 2)])
    func writtenAsVersion2(level: Int, bytes: Int, threads: Int) async throws {
        try await withTemporaryDirectory { directory in
            let rows = max(20, bytes / 300)
            let store = try Fixtures.makeStore(at: directory.appending("store.sqlite"), rows: rows, blobSize: 100)
            var options = WritingOptions(compression: level == 0 ? .store : .deflate(level: level))
            options.formatVersion = 2
            options.compressionThreads = threads
            let bundle = directory.appending("Doc.mdz")
            let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                  to: bundle, options: options)
            #expect(metadata.formatVersion == 2 && metadata.store.sha256 == nil && metadata.store.digest != nil)
            let printed = try Python.run(Self.independentCheck, [bundle.string])
            let storeSize = try #require(try FileSystem.status(store)).size
            let expectsRestarts = level > 0 && storeSize >= ArchiveWriter.parallelDeflateThreshold
            #expect(printed == "2 \(expectsRestarts ? "restarts" : "none")\n", "\(printed)")
            _ = try BundleReader(at: bundle).verify(full: true, workingDirectory: directory)
        }
    }

    enum CRCLie: String, CaseIterable, CustomTestStringConvertible {
        case missing, oneShort, uppercase, notHex
        var testDescription: String { rawValue }
    }

    @Test("a restart index in use whose CRC-32s are missing or malformed is refused when the bundle opens",
          arguments: CRCLie.allCases)
    func malformedCRCs(_ lie: CRCLie) async throws {
        try await withTemporaryDirectory { directory in
            let good = directory.appending("Good.mdz")
            let metadata = try DeflateRestartTests.makeBundle(at: good)
            let crcs = try #require(metadata.store.deflateRestarts?.crc32s)
            let value: String
            switch lie {
            case .missing: value = "null"
            case .oneShort: value = "\"\(crcs.dropLast(8))\""
            case .uppercase: value = "\"\(crcs.uppercased())\""
            case .notHex: value = "\"zz\(crcs.dropFirst(2))\""
            }
            let folder = directory.appending("case")
            try FileSystem.createDirectory(folder)
            let bundle = folder.appending("Lying.mdz")
            try Python.rewritingMetadata(of: good.string, to: bundle.string, [("store.deflateRestarts.crc32s", value)],
                                         resealing: false)
            let error = try expectRefusal(bundle, in: folder, code: .metadataMismatch, entry: BundleLayout.store)
            #expect(error?.reason.contains("crc32s") == true, "\(String(describing: error))")
        }
    }

    @Test("a restart segment's CRC-32 that differs from its bytes is refused when the bundle opens: combined, they are not the entry's")
    func wrongCRC() async throws {
        try await withTemporaryDirectory { directory in
            let good = directory.appending("Good.mdz")
            let metadata = try DeflateRestartTests.makeBundle(at: good)
            var crcs = Array(try #require(metadata.store.deflateRestarts?.crc32s).utf8)
            crcs[3 * 8] = crcs[3 * 8] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
            let folder = directory.appending("case")
            try FileSystem.createDirectory(folder)
            let bundle = folder.appending("Lying.mdz")
            try Python.rewritingMetadata(of: good.string, to: bundle.string,
                                         [("store.deflateRestarts.crc32s", "\"\(String(decoding: crcs, as: UTF8.self))\"")],
                                         resealing: false)
            // > FORMAT.md 11.4: the restart segments' CRC-32s, combined, must be the central directory's, so that a
            // > reader that inflates only some segments (in place) serves what every zip tool reads.
            let error = try expectRefusal(bundle, in: folder, code: .metadataMismatch, entry: BundleLayout.store)
            #expect(error?.reason.contains("combine to") == true, "\(String(describing: error))")
            #expect(throws: DocumentError.self) { _ = try BundleStore(at: bundle) }
        }
    }

    @Test("a stale index's CRC-32s are ignored with it; a version 2 bundle's 'store.sha256' (another program's) too")
    func ignoredKeys() async throws {
        try await withTemporaryDirectory { directory in
            let good = directory.appending("Good.mdz")
            _ = try DeflateRestartTests.makeBundle(at: good)
            let stale = directory.appending("Stale.mdz")
            try Python.rewritingMetadata(of: good.string, to: stale.string, [
                ("store.deflateRestarts.compressedSize", "1"), ("store.deflateRestarts.crc32s", "\"not even hex\""),
                ("store.sha256", "\"\(String(repeating: "0", count: 64))\""),
            ], resealing: false)
            let reader = try BundleReader(at: stale)
            guard case .stale = reader.restartIndex else {
                Issue.record("expected a stale index, got \(reader.restartIndex)")
                return
            }
            #expect(reader.metadata.store.sha256 == nil, "version 2 is read by its store digest alone")
            _ = try reader.verify(full: true, workingDirectory: directory)
            let before = try Fixtures.bytes(of: try BundleReader(at: good).extract(into: directory.appending("a")).store)
            #expect(try Fixtures.bytes(of: try reader.extract(into: directory.appending("b")).store) == before)
        }
    }
}
