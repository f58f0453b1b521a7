// Hostile bundles, docs/FORMAT.md section 6, "Entry names".
// Rules 1 to 12, in the order the reader checks them (15.3).

import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

extension HostileBundleTests {
    @Test("an entry name with a '..' component is path traversal", arguments: [
        "AdditionalContent/../../evil", "../x", "AdditionalContent/images/../../../x", "AdditionalContent/..",
    ])
    func dotDotName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .pathTraversal, entry: name)
        }
    }

    @Test("an absolute entry name is path traversal", arguments: ["/etc/passwd", "/AdditionalContent/x", "//server/x"])
    func absoluteName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .pathTraversal, entry: name)
        }
    }

    @Test("an entry name starting with a drive letter is path traversal", arguments: ["C:/evil", "c:evil", "Z:"])
    func driveLetterName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .pathTraversal, entry: name)
        }
    }

    @Test("an entry name with a backslash is invalid", arguments: [
        #"AdditionalContent\evil"#, #"AdditionalContent/..\..\evil"#, #"\\server\share"#,
    ])
    func backslashName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName, entry: name)
        }
    }

    @Test("an entry name with a control character is invalid", arguments: [
        "AdditionalContent/a\u{0}b", "AdditionalContent/a\nb", "AdditionalContent/a\u{1B}[2Jb",
        "AdditionalContent/\u{7F}",
    ])
    func controlCharacterName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName, entry: name)
            // The printed line shows the whole name, its control characters escaped (not cut at a NUL).
            let error = #expect(throws: DocumentError.self) { _ = try BundleReader(at: bundle) }
            let line = error?.description ?? ""
            #expect(!line.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "\(line.debugDescription)")
            #expect(line.contains("AdditionalContent/") && line.contains("\\u{"), "\(line)")
        }
    }

    @Test("an entry name that is not UTF-8 is invalid", arguments: [
        Array("AdditionalContent/".utf8) + [0xFF, 0x41], Array("AdditionalContent/".utf8) + [0xC0, 0xAF, 0x65],
        Array("AdditionalContent/".utf8) + [0xED, 0xA0, 0x80],
    ])
    func invalidUTF8Name(raw: [UInt8]) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: raw, in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName,
                              entry: String(decoding: raw, as: UTF8.self))
        }
    }

    @Test("an empty or '.' component, or a ':' in an entry name, is invalid", arguments: [
        "AdditionalContent//x", "AdditionalContent/./x", "AdditionalContent/a:b",
    ])
    func emptyOrDotComponentName(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .invalidEntryName, entry: name)
        }
    }

    @Test("an entry name longer than the limit is refused before it is used")
    func tooLongName() async throws {
        try await withTemporaryDirectory { directory in
            let name = "AdditionalContent/" + String(repeating: "a", count: 1_100)
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            // The error shows the name's first 200 bytes.
            try expectRefusal(bundle, in: directory, code: .limitExceeded, entry: String(name.prefix(200)))
        }
    }

    @Test("an entry name outside the format's layout is not allowed", arguments: [
        "Extra/file", "foo", "StoreContent/persistentStore-wal", "StoreContent/other", "Extra/",
    ])
    func entryNotAllowed(name: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(name.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .entryNotAllowed, entry: name)
        }
    }

    @Test("two entries with the same name are refused")
    func duplicateNames() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try Self.bundle(renamingReadmeTo: Array(Self.picture.utf8), in: directory)
            try expectRefusal(bundle, in: directory, code: .duplicateEntry, entry: Self.picture)
        }
    }

    @Test("two names equal under Unicode canonical equivalence (NFC and NFD) are duplicates")
    func canonicallyEquivalentNames() async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            parts.add("AdditionalContent/caf\u{E9}.txt", Array("composed".utf8))
            parts.add("AdditionalContent/cafe\u{301}.txt", Array("decomposed".utf8))
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            // On a normalizing file system (APFS, HFS+) the two would be one file.
            try expectRefusal(bundle, in: directory, codes: [.duplicateEntry],
                              entries: ["AdditionalContent/caf\u{E9}.txt", "AdditionalContent/cafe\u{301}.txt"])
        }
    }

    @Test("a file entry below another file entry can never be extracted and is refused", arguments: [true, false])
    func fileBelowFile(fileFirst: Bool) async throws {
        try await withTemporaryDirectory { directory in
            var parts = try ZipSurgery.makeParts(in: directory)
            let inner = Self.readme + "/inner"
            if fileFirst { parts.add(Self.readme, Array("hello".utf8)) }
            parts.add(inner, Array("inner".utf8))
            if !fileFirst { parts.add(Self.readme, Array("hello".utf8)) }
            let bundle = directory.appending("Notes.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: parts)
            try expectRefusal(bundle, in: directory, at: .extract,
                              codes: [.duplicateEntry, .entryNotAllowed, .invalidEntryName, .corruptArchive],
                              entries: [inner, Self.readme])
        }
    }
}
