import Crypto
import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Bundles whose `DocumentMetadata.json` says absurd numbers, every other byte as the library wrote it: the numbers
/// are refused with a specific error (never an arithmetic trap), and the self-consistent absurd ones are read within a
/// bounded memory.
@Suite("Absurd numbers in a bundle's metadata: refused with a DocumentError, never a trap; memory stays bounded")
struct HostileMetadataTests {
    /// A bundle of about 2 MiB of text rows, deflated with a restart index (128 KiB) and segment digests (128 KiB),
    /// written by the library itself in format version 2, whose metadata holds them (version 3's index:
    /// `HostileBundleTests+StoreIndex.swift`).
    static func makeBundle(_ bundle: FilePath, folder: FilePath, rows: Int = 1500) throws {
        let store = try Fixtures.makeListStore(
            at: folder.appending("source-\(UUID().uuidString).sqlite"), column: "body",
            values: (0..<rows).map { String(repeating: "note \($0) ", count: 120) })
        try Fixtures.makeBundle(at: bundle, store: store, options: Fixtures.version2)
    }

    /// An absurd number, and the code it must be refused with.
    struct Absurdity: CustomTestStringConvertible, Sendable {
        var name: String
        var edits: [(String, String)]
        var code: DocumentError.Code
        var testDescription: String { name }
    }

    static let int64Max = "9223372036854775807"

    static let absurdities: [Absurdity] = [
        Absurdity(name: "segments.interval = 2^63 - 1", edits: [("store.segments.interval", int64Max)],
                  code: .metadataMismatch),
        Absurdity(name: "segments.interval = 2^63 - 2^17 (a multiple of the restart interval)",
                  edits: [("store.segments.interval", "9223372036854644736")], code: .metadataMismatch),
        Absurdity(name: "segments.interval = -2^63", edits: [("store.segments.interval", "-9223372036854775808")],
                  code: .metadataMismatch),
        Absurdity(name: "segments.interval = -65536", edits: [("store.segments.interval", "-65536")],
                  code: .metadataMismatch),
        Absurdity(name: "segments.interval = 0", edits: [("store.segments.interval", "0")], code: .metadataMismatch),
        Absurdity(name: "segments.interval = 65537, not a multiple of the restart interval (digests kept)",
                  edits: [("store.segments.interval", "65537")], code: .metadataMismatch),
        Absurdity(name: "segments.interval = 2^64 (beyond 64 bits)", edits: [("store.segments.interval", "18446744073709551616")],
                  code: .invalidMetadata),
        Absurdity(name: "segments.sha256 one digest short",
                  edits: [("store.segments.sha256", "\"" + String(repeating: "ab", count: 32) + "\"")],
                  code: .metadataMismatch),
        Absurdity(name: "store.size = 2^63 - 1", edits: [("store.size", int64Max)], code: .metadataMismatch),
        Absurdity(name: "store.size = -1", edits: [("store.size", "-1")], code: .metadataMismatch),
        Absurdity(name: "store.size = -2^63", edits: [("store.size", "-9223372036854775808")], code: .metadataMismatch),
        Absurdity(name: "deflateRestarts.interval = 2^63 - 1 (it names the stream)",
                  edits: [("store.deflateRestarts.interval", int64Max)], code: .metadataMismatch),
        Absurdity(name: "deflateRestarts.interval = -2^63 (it names the stream)",
                  edits: [("store.deflateRestarts.interval", "-9223372036854775808")], code: .metadataMismatch),
        Absurdity(name: "deflateRestarts.offsets = [0, 2^63 - 1]",
                  edits: [("store.deflateRestarts.offsets", "[0, \(int64Max)]")], code: .metadataMismatch),
        Absurdity(name: "deflateRestarts.offsets = [0, -1]", edits: [("store.deflateRestarts.offsets", "[0, -1]")],
                  code: .metadataMismatch),
        Absurdity(name: "provenance.size = -1",
                  edits: [("provenance", #"{"kind": "sqlite", "fileName": "x.sqlite", "size": -1, "files": [], "convertedAt": "2026-01-01T00:00:00Z"}"#)],
                  code: .invalidMetadata),
        Absurdity(name: "provenance.files[0].size = -2^63",
                  edits: [("provenance", #"{"kind": "sqlite", "fileName": "x.sqlite", "size": 1, "files": [{"name": "x.sqlite", "size": -9223372036854775808, "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}], "convertedAt": "2026-01-01T00:00:00Z"}"#)],
                  code: .invalidMetadata),
    ]

    @Test("an absurd number is refused with its code by BundleReader, BundleStore and a read-only Document",
          arguments: absurdities)
    func refused(_ absurdity: Absurdity) async throws {
        try await withTemporaryDirectory { folder in
            let good = folder.appending("Good.mdz")
            try Self.makeBundle(good, folder: folder)
            let bundle = folder.appending("Absurd.mdz")
            try Python.rewritingMetadata(of: good.string, to: bundle.string, absurdity.edits)

            let opening = #expect(throws: DocumentError.self) { try BundleReader(at: bundle) }
            #expect(opening?.code == absurdity.code, "\(opening.map { "\($0)" } ?? "no error")")
            #expect(opening?.path == bundle)
            let querying = #expect(throws: DocumentError.self) { try BundleStore(at: bundle) }
            #expect(querying?.code == absurdity.code, "\(querying.map { "\($0)" } ?? "no error")")
            var options = appOptions(folder)
            options.isReadOnly = true
            options.createIfMissing = false
            let document = await #expect(throws: DocumentError.self) { try await Document.open(at: bundle, options: options) }
            #expect(document?.code == absurdity.code, "\(document.map { "\($0)" } ?? "no error")")
            var writable = appOptions(folder)
            writable.createIfMissing = false
            let editing = await #expect(throws: DocumentError.self) { try await Document.open(at: bundle, options: writable) }
            #expect(editing?.code == absurdity.code, "\(editing.map { "\($0)" } ?? "no error")")
        }
    }

    /// The SHA-256 of `bundle`'s whole store (a version 2 bundle records none: its segments are hashed instead).
    static func wholeSHA256(of bundle: FilePath, folder: FilePath) throws -> String {
        let scratch = folder.appending("whole-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: scratch.string) }  // Squash cleanup error.
        let store = try BundleReader(at: bundle).extract(into: scratch).store
        return SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: store.string)))
            .map { String(format: "%02x", $0) }.joined()
    }

    /// A self-consistent bundle with absurd but true numbers, and whether its store is read in place.
    struct Oddity: CustomTestStringConvertible, Sendable {
        var name: String
        /// Given the store's size and SHA-256, the edits.
        var edits: @Sendable (_ size: Int64, _ sha256: String) -> [(String, String)]
        var access: BundleStore.Access
        var reason: String?
        var testDescription: String { name }
    }

    static let oddities: [Oddity] = [
        Oddity(name: "one digest segment of 2^63 - 1 bytes (the store's SHA-256), restart index every 128 KiB",
               edits: { _, sha256 in [("store.segments.interval", int64Max), ("store.segments.sha256", "\"\(sha256)\"")] },
               access: .extracted, reason: "not cut at its restart points"),
        Oddity(name: "one restart segment of 2^63 - 1 bytes, digests every 128 KiB",
               edits: { _, _ in [("store.deflateRestarts.interval", int64Max), ("store.deflateRestarts.offsets", "[0]")] },
               access: .extracted, reason: "not cut at its restart points"),
        Oddity(name: "the same in format version 1 (the store's SHA-256 and no CRC-32 per restart segment)",
               edits: { _, sha256 in
                   [("formatVersion", "1"), ("store.sha256", "\"\(sha256)\""),
                    ("store.deflateRestarts.interval", int64Max), ("store.deflateRestarts.offsets", "[0]")]
               },
               access: .extracted, reason: "not cut at its restart points"),
        Oddity(name: "one restart segment and one digest segment of 2^63 - 1 bytes each",
               edits: { _, sha256 in
                   [("store.segments.interval", int64Max), ("store.segments.sha256", "\"\(sha256)\""),
                    ("store.deflateRestarts.interval", int64Max), ("store.deflateRestarts.offsets", "[0]")]
               },
               access: .segments, reason: nil),
        Oddity(name: "one restart segment and one digest segment of the store's size",
               edits: { size, sha256 in
                   [("store.segments.interval", "\(size)"), ("store.segments.sha256", "\"\(sha256)\""),
                    ("store.deflateRestarts.interval", "\(size)"), ("store.deflateRestarts.offsets", "[0]")]
               },
               access: .segments, reason: nil),
        Oddity(name: "a restart index of another stream (compressedSize 2^63 - 1): stale, ignored",
               edits: { _, _ in [("store.deflateRestarts.compressedSize", int64Max)] },
               access: .extracted, reason: "the deflated store's restart index is stale"),
    ]

    @Test("absurd but true numbers: the bundle opens, verifies, extracts, and its store reads right in place or extracted",
          arguments: oddities)
    func served(_ oddity: Oddity) async throws {
        try await withTemporaryDirectory { folder in
            let good = folder.appending("Good.mdz")
            try Self.makeBundle(good, folder: folder)
            let original = try BundleReader(at: good).metadata.store
            let sha256 = try Self.wholeSHA256(of: good, folder: folder)
            let bundle = folder.appending("Odd.mdz")
            try Python.rewritingMetadata(of: good.string, to: bundle.string, oddity.edits(original.size, sha256))

            let reader = try BundleReader(at: bundle)
            _ = try reader.verify(full: false, workingDirectory: folder)
            try reader.extract(into: folder.appending("extracted"))
            // > A store this small is served whole from memory when its segment route is closed; with the whole
            // > store over the limit on what is held at once, the segment route alone decides.
            var segmentsOnly = ReadingLimits()
            if oddity.access == .extracted { segmentsOnly.maxRestartSegmentSize = UInt64(original.size - 1) }
            let store = try BundleStore(at: bundle, limits: segmentsOnly, workingDirectory: folder)
            defer { store.close() }
            #expect(store.access == oddity.access, "\(store.reason ?? "")")
            if let reason = oddity.reason { #expect(store.reason?.contains(reason) == true, "\(store.reason ?? "")") }
            #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 1500)
            let whole = try BundleStore(at: bundle, workingDirectory: folder)
            defer { whole.close() }
            #expect(whole.access == .segments, "\(whole.reason ?? "")")
            #expect(try whole.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 1500)
            #expect(try await bundleContent(bundle, folder: folder) == (try await bundleContent(good, folder: folder)))
        }
    }

    @Test("segments past ReadingLimits' bounds are not read in place: the reason names the limit, the rows read the same")
    func segmentLimits() async throws {
        try await withTemporaryDirectory { folder in
            let good = folder.appending("Good.mdz")
            try Self.makeBundle(good, folder: folder)
            let original = try BundleReader(at: good).metadata.store
            let bundle = folder.appending("OneSegment.mdz")
            try Python.rewritingMetadata(of: good.string, to: bundle.string, [
                ("store.segments.interval", "\(original.size)"),
                ("store.segments.sha256", "\"\(try Self.wholeSHA256(of: good, folder: folder))\""),
                ("store.deflateRestarts.interval", "\(original.size)"), ("store.deflateRestarts.offsets", "[0]"),
            ])
            #expect(original.size > 1 << 20)

            var digestLimit = ReadingLimits()
            digestLimit.maxDigestSegmentSize = 1 << 20
            var restartLimit = ReadingLimits()
            restartLimit.maxRestartSegmentSize = 1 << 20
            for (limits, name) in [(digestLimit, "maxDigestSegmentSize"), (restartLimit, "maxRestartSegmentSize")] {
                let store = try BundleStore(at: bundle, limits: limits, workingDirectory: folder)
                #expect(store.access == .extracted)
                #expect(store.reason?.contains("ReadingLimits.\(name) = 1048576") == true, "\(store.reason ?? "")")
                #expect(try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") } == 1500)
                store.close()

                var options = appOptions(folder)
                options.isReadOnly = true
                options.createIfMissing = false
                options.limits = limits
                let document = try await Document.open(at: bundle, options: options)
                let content = try await document.reader.read { db in try StoreContent(db) }
                try await document.close()
                #expect(content == (try await bundleContent(good, folder: folder)))
            }
            // > The library's own bundle, within the limits (128 KiB segments): read in place.
            let store = try BundleStore(at: good, limits: digestLimit)
            #expect(store.access == .segments, "\(store.reason ?? "")")
            store.close()
        }
    }

    @Test("the defaults admit the segments the library writes for a store of 64 GiB, and bound what they hold")
    func defaultLimits() {
        let limits = ReadingLimits()
        #expect(limits.maxRestartSegmentSize == 4 << 20)
        #expect(limits.maxDigestSegmentSize == 16 << 20)
        #expect(limits.maxTotalUncompressedSize == 64 << 30)
    }
}
