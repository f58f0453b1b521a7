import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Bundles must be ordinary zip files to tools nobody here wrote.
@Suite("Bundles pass other zip tools' checks, with the media type at byte 38")
struct InteropTests {
    enum Shape: String, CaseIterable, CustomTestStringConvertible {
        case deflate, store, withFolders, zip64
        var testDescription: String { rawValue }
        var options: WritingOptions {
            var options = WritingOptions(compression: self == .store ? .store : .deflate(level: 6))
            options.forcesZIP64 = self == .zip64
            return options
        }
        var withFolders: Bool { self == .withFolders || self == .zip64 }
    }

    /// A bundle of the notes store of 200 rows in `shape`.
    private static func bundle(_ shape: Shape, at path: FilePath) throws {
        try Fixtures.makeBundle(at: path, rows: 200, withFolders: shape.withFolders, options: shape.options)
    }

    @Test("mimetype is the first local header, bare, with the media type at byte 38", arguments: Shape.allCases)
    func mimetypeAtByte38(shape: Shape) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            try Self.bundle(shape, at: bundle)
            let bytes = try Fixtures.bytes(of: bundle)
            let mediaType = Array(BundleLayout.defaultMediaType.utf8)
            #expect(bytes.readLE32(at: 0) == 0x0403_4b50)
            #expect(bytes.readLE16(at: 6) & 0x0008 == 0, "no data descriptor")
            #expect(bytes.readLE16(at: 8) == 0, "stored")
            #expect(bytes.readLE16(at: 26) == 8, "name length")
            #expect(bytes.readLE16(at: 28) == 0, "no extra field")
            #expect(Array(bytes[30..<38]) == Array("mimetype".utf8))
            #expect(Array(bytes[38..<38 + mediaType.count]) == mediaType)
            #expect(bytes.readLE32(at: 18) == UInt32(mediaType.count))
            let reader = try BundleReader(at: bundle)
            #expect(reader.isZIP64 == (shape == .zip64))
            try reader.verifyEntries()
        }
    }

    @Test("unzip -t, zip -T, python3 zipfile, bsdtar and 7z accept the bundle", arguments: Shape.allCases)
    func externalToolsAccept(shape: Shape) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            try Self.bundle(shape, at: bundle)
            let unzip = try run("unzip", ["-t", bundle.string])
            #expect(unzip.status == 0, "\(unzip.output)")
            #expect(unzip.output.contains("No errors detected"))
            let zipT = try run("zip", ["-T", bundle.string])
            #expect(zipT.status == 0, "\(zipT.output)")
            let python = try run("python3", ["-m", "zipfile", "-t", bundle.string])
            #expect(python.status == 0)
            #expect(!python.output.contains("corrupted"), "\(python.output)")
            let bsdtar = try run("bsdtar", ["-xOf", bundle.string])
            #expect(bsdtar.status == 0)
            let sevenZip = try run("7z", ["t", bundle.string])
            #expect(sevenZip.status == 0, "\(sevenZip.output)")
            #expect(sevenZip.output.contains("Everything is Ok"))
            let file = try run("file", ["--brief", bundle.string])
            #expect(file.output.contains("application/vnd.managed-document+zip"), "\(file.output)")
        }
    }

    @Test("what unzip extracts is what the reader extracts")
    func unzipAgrees() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appending("Doc.mdz")
            try Self.bundle(.withFolders, at: bundle)
            let ours = try BundleReader(at: bundle).extract(into: directory.appending("ours"))
            let theirs = directory.appending("theirs")
            #expect(try run("unzip", ["-q", bundle.string, "-d", theirs.string]).status == 0)
            #expect(try Fixtures.bytes(of: ours.store) == Fixtures.bytes(of: theirs.appending(BundleLayout.store)))
        }
    }

    @Test("a zip written by the system zip tool in the bundle layout is read")
    func readsZipToolOutput() async throws {
        try await withTemporaryDirectory { directory in
            // Extract one of ours, then re-pack it with Info-ZIP: mimetype first and stored (-X: no extra fields).
            let bundle = directory.appending("Doc.mdz")
            try Self.bundle(.deflate, at: bundle)
            let tree = directory.appending("tree")
            #expect(try run("unzip", ["-q", bundle.string, "-d", tree.string]).status == 0)
            let repacked = directory.appending("Repacked.mdz")
            #expect(try run("zip", ["-q", "-X", "-0", repacked.string, "mimetype"], in: tree).status == 0)
            #expect(try run("zip", ["-q", "-X", "-r", repacked.string, "DocumentMetadata.json", "StoreContent"],
                            in: tree).status == 0)
            let reader = try BundleReader(at: repacked)
            #expect(reader.entries.contains { $0.isDirectory }, "zip -r adds folder entries, which readers ignore")
            _ = try reader.verify(full: false)
        }
    }
}
