// Hostile bundles, docs/FORMAT.md section 5, "Entries and their order".
// The required entries (15.2, 15.5): `mimetype`, `DocumentMetadata.json` and the store.

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("a bundle without DocumentMetadata.json is refused")
    func missingMetadata() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [.init(BundleLayout.store, parts.store)])
            try expectRefusal(bundle, in: directory, code: .missingEntry, entry: BundleLayout.metadata)
        }
    }

    @Test("a bundle without a store is refused")
    func missingStore() async throws {
        try await withTemporaryDirectory { directory in
            let parts = try ZipSurgery.makeParts(in: directory)
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeArchive(at: bundle, entries: [
                .init("AdditionalContent/readme.txt", Array("hello".utf8)),
                .init(BundleLayout.metadata, try parts.metadataJSON()),
            ])
            try expectRefusal(bundle, in: directory, code: .missingEntry, entry: BundleLayout.store)
        }
    }

    @Test("a zip archive without a mimetype entry is not a document")
    func zipWithoutMimetype() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.entries.removeFirst() }
            try expectRefusal(bundle, in: directory, code: .notADocument, entry: nil)
        }
    }
}
