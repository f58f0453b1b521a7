// Controls for the hostile-bundle suite: the tools that damage bundles (ZipSurgery) leave a bundle good when they
// change nothing. No FORMAT.md section; every other file of the suite checks one.

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("a good bundle taken apart and put back together unchanged still opens, extracts and verifies")
    func surgeryAloneIsHarmless() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            let original = try Fixtures.bytes(of: bundle)
            try ZipSurgery.edit(bundle) { _ in }
            #expect(try Fixtures.bytes(of: bundle) == original)
            let reader = try BundleReader(at: bundle)
            try reader.extract(into: directory.appending("out"))
            _ = try reader.verify(full: true, workingDirectory: directory)
        }
    }

    @Test("a bundle written from untouched parts opens, extracts and verifies", arguments: [true, false])
    func partsAloneAreGood(compressed: Bool) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add(Self.readme, Array("hello".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts, compressed: compressed)
            let reader = try BundleReader(at: bundle)
            #expect(reader.entries.map(\.name) == [BundleLayout.mimetype, BundleLayout.store, Self.readme,
                                                   BundleLayout.metadata])
            let extracted = try reader.extract(into: directory.appending("out"))
            #expect(try Fixtures.bytes(of: extracted.store) == parts.store)
            _ = try reader.verify(full: true, workingDirectory: directory)
        }
    }
}
