import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Bundles that another zip tool rewrote with their content intact: the restart index is then a stale hint, and the
/// content (sizes, CRC-32, SHA-256) is what counts. Each repack is made by the real tool.
@Suite("Bundles repacked by other zip tools open, verify, extract and save")
struct RepackTests {
    enum Tool: String, CaseIterable, CustomTestStringConvertible {
        case infoZip = "zip -r"
        case pythonDeflated = "python zipfile, deflated"
        case pythonStored = "python zipfile, stored"
        case sevenZip = "7z a -tzip"
        case bsdtar = "bsdtar --format zip"
        var testDescription: String { rawValue }
    }

    static let additionalName = "AdditionalContent/Notizen – café ☕.txt"

    /// A bundle whose store is large enough to carry a restart index, with a non-ASCII additional file.
    private func makeOriginal(in directory: FilePath) throws -> (bundle: FilePath, metadata: DocumentMetadata) {
        let work = directory.appending("work")
        try FileSystem.createDirectory(work.appending("AdditionalContent"))
        let store = try Fixtures.makeStore(at: work.appending("store.sqlite"), rows: 6000)
        try Data("grüße\n".utf8).write(to: URL(fileURLWithPath: work.appending(Self.additionalName).string))
        let bundle = directory.appending("Original.mdz")
        let metadata = try Fixtures.makeBundle(at: bundle, store: store, additionalContent: work.appending("AdditionalContent"))
        try FileSystem.removeTree(work)
        return (bundle, metadata)
    }

    /// Unzips `bundle` and zips it again with `tool` as a user would; python also adds an unknown metadata key, as a
    /// newer writer might. `zip` and python keep `mimetype` first and stored; `7z` and `bsdtar` do not (they add extra
    /// fields, compress or reorder it), which the reader notes.
    private func repack(_ bundle: FilePath, with tool: Tool, into target: FilePath, in directory: FilePath) throws {
        let unpacked = directory.appending("unpacked")
        let unzip = try run("unzip", ["-q", bundle.string, "-d", unpacked.string])
        #expect(unzip.status == 0, "\(unzip.output)")
        switch tool {
        case .infoZip:
            let first = try run("zip", ["-X", "-0", "-q", target.string, "mimetype"], in: unpacked)
            let rest = try run("zip", ["-X", "-r", "-q", target.string, ".", "-x", "mimetype"], in: unpacked)
            #expect(first.status == 0 && rest.status == 0, "\(first.output) \(rest.output)")
        case .sevenZip:
            let made = try run("7z", ["a", "-tzip", "-bso0", target.string, "mimetype", "DocumentMetadata.json",
                                      "StoreContent", "AdditionalContent"], in: unpacked)
            #expect(made.status == 0, "\(made.output)")
        case .bsdtar:
            let made = try run("bsdtar", ["--format", "zip", "-cf", target.string, "mimetype", "DocumentMetadata.json",
                                          "StoreContent", "AdditionalContent"], in: unpacked)
            #expect(made.status == 0, "\(made.output)")
        case .pythonDeflated, .pythonStored:
            try Python.run("""
                import json, os, sys, zipfile
                source, target, mode = sys.argv[1], sys.argv[2], sys.argv[3]
                method = zipfile.ZIP_DEFLATED if mode == 'deflated' else zipfile.ZIP_STORED
                with open(os.path.join(source, 'DocumentMetadata.json'), encoding='utf-8') as f:
                    metadata = json.load(f)
                metadata['x-vendor-note'] = {'by': 'another tool', 'n': 1}
                with zipfile.ZipFile(target, 'w') as z:
                    z.write(os.path.join(source, 'mimetype'), 'mimetype', compress_type=zipfile.ZIP_STORED)
                    z.writestr('DocumentMetadata.json', json.dumps(metadata, ensure_ascii=False), compress_type=method)
                    for root, dirs, files in os.walk(source):
                        dirs.sort()
                        for name in sorted(files):
                            path = os.path.join(root, name)
                            arc = os.path.relpath(path, source)
                            if arc not in ('mimetype', 'DocumentMetadata.json'):
                                z.write(path, arc, compress_type=method)
                """, [unpacked.string, target.string, tool == .pythonDeflated ? "deflated" : "stored"])
        }
        try FileSystem.removeTree(unpacked)
        #expect(FileSystem.isRegularFile(target), "\(tool.rawValue) made no archive")
    }

    @Test("a repack opens with its index ignored, verifies, extracts the same bytes, opens as a Document, and a save makes it a normal bundle again",
          arguments: Tool.allCases)
    func repackRoundTrip(_ tool: Tool) async throws {
        try await withTemporaryDirectory { directory in
            let (original, metadata) = try makeOriginal(in: directory)
            #expect(try BundleReader(at: original).restartIndex == .used(segments: metadata.store.deflateRestarts?.offsets.count ?? -1,
                                                                          identified: true))
            let repacked = directory.appending("Repacked.mdz")
            try repack(original, with: tool, into: repacked, in: directory)

            let reader = try BundleReader(at: repacked)
            guard case .stale = reader.restartIndex else {
                Issue.record("\(tool.rawValue): the index should be stale, it is \(reader.restartIndex)")
                return
            }
            #expect(reader.entry(named: Self.additionalName) != nil, "the non-ASCII name survived")
            // > Segment digests describe the content, not its compression: never stale, still checked by verify.
            #expect(metadata.store.segments != nil && reader.metadata.store.segments == metadata.store.segments)
            let keepsLayout = tool == .infoZip || tool == .pythonDeflated || tool == .pythonStored
            #expect(reader.isMediaTypeSniffable == keepsLayout, "\(reader.notices)")
            _ = try reader.verify(full: true, workingDirectory: directory)
            let extracted = try reader.extract(into: directory.appending("extracted"))
            #expect(Fixtures.storeDigest(of: try Fixtures.bytes(of: extracted.store),
                                         interval: metadata.store.segments?.interval) == metadata.store.digest)
            #expect(try Data(contentsOf: URL(fileURLWithPath: directory.appending("extracted").appending(Self.additionalName).string))
                    == Data("grüße\n".utf8))
            let cli = try run(builtProduct("docconvert"), ["verify", repacked.string])
            #expect(cli.status == 0, "\(cli.output)")
            #expect(cli.output.contains("notice:") && cli.output.contains("stale"), "\(cli.output)")

            var options = Document.OpenOptions()
            options.workingDirectory = directory.appending("working")
            options.isReadOnly = true
            let viewer = try await Document.open(at: repacked, options: options)
            let rows = try await viewer.reader.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM note") }
            #expect(rows == 6000)
            try await viewer.close()

            options.isReadOnly = false
            let editor = try await Document.open(at: repacked, options: options)
            try await editor.writer.write { db in try db.execute(sql: "CREATE TABLE edited(x)") }
            try await editor.close()
            let saved = try BundleReader(at: repacked)
            #expect(saved.isMediaTypeSniffable && saved.notices.isEmpty, "a save lays the bundle out again: \(saved.notices)")
            guard case .used(_, true) = saved.restartIndex else {
                Issue.record("after a save the index should be ours again, it is \(saved.restartIndex)")
                return
            }
            _ = try saved.verify(full: true, workingDirectory: directory)
            #expect(saved.entry(named: Self.additionalName) != nil)
        }
    }
}

