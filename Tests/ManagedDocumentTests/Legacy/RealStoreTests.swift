import Foundation
import GRDB
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Real Core Data stores and UIManagedDocument packages from `../shared/corpus`, which nobody here wrote.
@Suite("Real stores from the corpus convert losslessly")
struct RealStoreTests {
    /// Every store (main file with a SQLite header) and package in the corpus, as paths relative to it.
    static var sources: [String] {
        guard let root = Corpus.root else { return [] }
        var result: [String] = []
        for path in Corpus.files(in: "coredata") {
            let name = path.lastComponent!.string
            if LegacyDetector.sidecarSuffixes.contains(where: { name.hasSuffix($0) }) { continue }
            result.append(String(path.string.dropFirst(root.string.count + 1)))
        }
        if let packages = try? FileSystem.contentsOfDirectory(root.appending("packages")) {
            for group in packages {
                for package in (try? FileSystem.contentsOfDirectory(root.appending("packages/\(group)"))) ?? [] {
                    result.append("packages/\(group)/\(package)")
                }
            }
        }
        return result.sorted()
    }

    /// A copy of the folder that holds corpus store `relative` (the corpus is read-only, and WAL sidecars must stay
    /// intact): the copied folder, and the store (or package) in it.
    static func copy(_ relative: String, from root: FilePath, into directory: FilePath) throws
    -> (folder: FilePath, source: FilePath) {
        let original = root.appending(relative)
        let folder = directory.appending("work")
        try #require(try run("cp", ["-R", original.removingLastComponent().string, folder.string]).status == 0)
        return (folder, folder.appending(original.lastComponent!.string))
    }

    @Test("each real store converts with every row as SQLite reads it, sources untouched",
          .enabled(if: Corpus.root != nil, "the corpus is absent"), arguments: sources)
    func convertsLosslessly(relative: String) async throws {
        let root = try #require(Corpus.root)
        try await withTemporaryDirectory { directory in
            let (folder, source) = try Self.copy(relative, from: root, into: directory)
            let isPackage = FileSystem.isDirectory(source)
            let store = isPackage ? source.appending("StoreContent/persistentStore") : source
            let expected = try Fixtures.digestsAsSQLiteReads(store)
            let before = try Fixtures.fileHashes(folder)

            var options = ConversionOptions()
            options.legacyPolicy = .keep
            let report = try LegacyConverter(options: options).convert(storeAt: source, to: directory.appending("out.mdz"))
            #expect(report.kind == (isPackage ? .uiManagedDocumentPackage : .coreDataSQLite))
            #expect(try Fixtures.bundleDigests(FilePath(report.bundle)) == expected)
            #expect(try Fixtures.fileHashes(folder) == before, "the source files changed")
            let provenance = try #require(try BundleReader(at: FilePath(report.bundle)).metadata.provenance)
            let coreData = try #require(provenance.coreData)
            #expect(coreData.storeUUID?.count == 36)
            #expect(coreData.storeType == "SQLite")
            #expect(!coreData.modelVersionHashes.isEmpty)
            #expect(coreData.frameworkVersion != nil)
        }
    }

    @Test("each real store's bundle written as format version 1 opens for writing, saves a change as version 3 and verifies, row by row",
          arguments: sources)
    func version1SavesAsVersion2(relative: String) async throws {
        let root = try #require(Corpus.root)
        try await withTemporaryDirectory { directory in
            let source = try Self.copy(relative, from: root, into: directory).source
            var options = ConversionOptions()
            options.legacyPolicy = .keep
            let report = try LegacyConverter(options: options).convert(storeAt: source, to: directory.appending("new.mdz"))
            // > The same content as a version 1 writer described it: store.sha256, no store digest, no CRC-32s.
            let reader = try BundleReader(at: FilePath(report.bundle))
            let extracted = try reader.extract(into: directory.appending("extracted"))
            var parts = ZipSurgery.Parts(store: try Fixtures.bytes(of: extracted.store), metadata: reader.metadata)
            for entry in reader.metadata.entries {
                parts.additional.append((entry.name, try Fixtures.bytes(of: extracted.directory.appending(entry.name))))
            }
            var older = parts.asVersion1(keepingSegments: true)
            older.metadata.store.deflateRestarts = nil
            let bundle = directory.appending("older.mdz")
            try ZipSurgery.writeBundle(at: bundle, parts: older)
            #expect(try BundleReader(at: bundle).metadata.formatVersion == 1)
            // > The model: the same change made to the extracted store.
            let change = "CREATE TABLE corpus_note(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO corpus_note(body) VALUES ('saved as version 2')"
            let model = try DatabaseQueue(path: extracted.store.string)
            try await model.write { try $0.execute(sql: change) }
            try model.close()
            var openOptions = Document.OpenOptions()
            openOptions.workingDirectory = directory.appending("working")
            let document = try await Document.open(at: bundle, options: openOptions)
            try await document.writer.write { try $0.execute(sql: change) }
            try await document.save()
            try await document.close()
            let saved = try BundleReader(at: bundle)
            #expect(saved.metadata.formatVersion == 3 && saved.metadata.store.digest != nil && saved.metadata.store.sha256 == nil)
            _ = try saved.verify(full: true, workingDirectory: directory)
            #expect(try Fixtures.bundleDigests(bundle) == Fixtures.rowDigests(of: extracted.store))
        }
    }

    @Test("only what starts like a property list reaches Foundation's parser (which leaks on inputs it refuses)")
    func propertyListSniffing() {
        #expect(CoreDataMetadata.looksLikePropertyList(Data("bplist00\u{0}".utf8)))
        #expect(CoreDataMetadata.looksLikePropertyList(Data("<?xml version=\"1.0\"?><plist/>".utf8)))
        #expect(CoreDataMetadata.looksLikePropertyList(Data("\u{FEFF}\n <plist/>".utf8)))
        for junk in ["PK\u{3}\u{4}", "", "bplist", "{\"a\": 1}", "SQLite format 3"] {
            #expect(!CoreDataMetadata.looksLikePropertyList(Data(junk.utf8)), "\(junk)")
        }
    }

    @Test("orphan sidecars are found as sidecars without a store, and never converted",
          .enabled(if: Corpus.root != nil, "the corpus is absent"))
    func orphanSidecars() throws {
        let files = Corpus.files(in: "coredata/wire/orphan-sidecars")
        #expect(files.count >= 2, "the corpus is there, so its orphan sidecars must be: \(files.count)")
        for file in files {
            #expect(try LegacyDetector.detect(at: file) == .sidecar(store: nil))
        }
    }
}
