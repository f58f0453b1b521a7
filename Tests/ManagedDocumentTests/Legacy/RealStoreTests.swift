import Foundation
import SystemPackage
import TestSupport
import Testing
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

    @Test("each real store converts with every row as SQLite reads it, sources untouched", arguments: sources)
    func convertsLosslessly(relative: String) async throws {
        let root = try #require(Corpus.root)
        try await withTemporaryDirectory { directory in
            // Work on a copy of the store's folder: the corpus is read-only, and WAL sidecars must stay intact.
            let original = root.appending(relative)
            let folder = directory.appending("work")
            #expect(try run("cp", ["-R", original.removingLastComponent().string, folder.string]).status == 0)
            let source = folder.appending(original.lastComponent!.string)
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

    @Test("only what starts like a property list reaches Foundation's parser (which leaks on inputs it refuses)")
    func propertyListSniffing() {
        #expect(CoreDataMetadata.looksLikePropertyList(Data("bplist00\u{0}".utf8)))
        #expect(CoreDataMetadata.looksLikePropertyList(Data("<?xml version=\"1.0\"?><plist/>".utf8)))
        #expect(CoreDataMetadata.looksLikePropertyList(Data("\u{FEFF}\n <plist/>".utf8)))
        for junk in ["PK\u{3}\u{4}", "", "bplist", "{\"a\": 1}", "SQLite format 3"] {
            #expect(!CoreDataMetadata.looksLikePropertyList(Data(junk.utf8)), "\(junk)")
        }
    }

    @Test("orphan sidecars are found as sidecars without a store, and never converted")
    func orphanSidecars() throws {
        let files = Corpus.files(in: "coredata/wire/orphan-sidecars")
        #expect(Corpus.root == nil || files.count >= 2, "the corpus is there, so its orphan sidecars must be: \(files.count)")
        for file in files {
            #expect(try LegacyDetector.detect(at: file) == .sidecar(store: nil))
        }
    }
}
