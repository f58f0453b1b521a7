import Foundation
@_spi(Core) import MDZCore
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Stores read in place are checked and packed from one read of their bytes when they are small (at most 1 MiB), and
/// from the file otherwise; from outside, both give a bundle whose store is the source's bytes. Public API only.
@Suite("stores read in place, small and large: the bundle's store is the source's bytes")
struct InPlaceImageTests {
    @Test("a store under, at about and over 1 MiB converts in place into a bundle holding its exact bytes",
          arguments: [20, 1_700, 2_400])
    func exactBytes(rows: Int) async throws {
        try await withTemporaryDirectory { directory in
            let source = try Fixtures.makeStore(at: directory.appending("Notes.sqlite"), rows: rows, blobSize: 400)
            let original = try Data(contentsOf: URL(fileURLWithPath: source.string))
            var options = ConversionOptions()
            options.legacyPolicy = .keep
            let report = try LegacyConverter(options: options).convert(storeAt: source)
            #expect(report.outcome == .converted)
            let reader = try BundleReader(at: FilePath(report.bundle))
            let verification = try reader.verify(full: true)
            #expect(verification.rowCounts.values.reduce(0, +) == report.rowCounts.values.reduce(0, +))
            let extracted = directory.appending("extracted.sqlite")
            _ = try reader.extractStore(to: extracted)
            #expect(try Data(contentsOf: URL(fileURLWithPath: extracted.string)) == original)
            #expect(try Data(contentsOf: URL(fileURLWithPath: source.string)) == original, "the source is unchanged")
            #expect(report.sourceSHA256 == ZipSurgery.sha256(Array(original)), "packed in place: the SHA-256 of the bytes packed")
            #expect(report.storeDigest == reader.metadata.store.digest)
        }
    }
}
