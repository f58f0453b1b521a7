// Hostile bundles, docs/FORMAT.md section 7, "Entry kinds, attributes and encryption".
// Links, devices, DOS folder attributes, a file named like a folder, and encryption flags (15.3, 15.4).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("a symbolic-link entry is refused")
    func symlinkEntry() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.modify(Self.readme) { $0.setUnixMode(0o120777) } }
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: Self.readme)
        }
    }

    @Test("a device, FIFO or socket entry is refused", arguments: [
        UInt32(0o020644), 0o060644, 0o010644, 0o140644,
    ])
    func deviceEntry(mode: UInt32) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) { $0.modify(Self.readme) { $0.setUnixMode(mode) } }
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: Self.readme)
        }
    }

    @Test("a file entry marked as a folder by DOS attributes is refused")
    func dosFolderAttribute() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(Self.readme) {
                    $0.record.versionMadeBy = 0x0014  // MS-DOS
                    $0.record.externalAttributes = 0x10
                }
            }
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: Self.readme)
        }
    }

    @Test("a regular-file entry whose name ends in '/' is refused")
    func fileNamedLikeAFolder() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add("AdditionalContent/folder/", [])
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, code: .nonRegularEntry, entry: "AdditionalContent/folder/")
        }
    }

    /// Where an encryption flag is set.
    enum EncryptionMark: String, Sendable, CaseIterable {
        case directoryTraditional, directoryStrong, localOnly
    }

    @Test("an entry flagged as encrypted is refused", arguments: EncryptionMark.allCases)
    func encryptedEntry(mark: EncryptionMark) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.goodBundle(in: directory)
            try ZipSurgery.edit(bundle) {
                $0.modify(BundleLayout.store) {
                    switch mark {
                    case .directoryTraditional:
                        $0.record.flags |= 0x0001
                        $0.localFlags |= 0x0001
                    case .directoryStrong:
                        $0.record.flags |= 0x0041
                        $0.localFlags |= 0x0041
                    case .localOnly:
                        $0.localFlags |= 0x0001
                    }
                }
            }
            try expectRefusal(bundle, in: directory, code: .encryptedEntry, entry: BundleLayout.store)
        }
    }
}
