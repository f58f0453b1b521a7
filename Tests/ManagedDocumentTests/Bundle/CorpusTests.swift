import Foundation
import SystemPackage
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// Real third-party zip files, zip bombs and Anki packages from `../shared/corpus`: none is a bundle, each must be
/// refused with a ``DocumentError`` (never a crash or a hang), and nothing may be written outside the folder an
/// extraction is asked to use. The zip bombs are only ever opened by ``BundleReader``, never by another tool.
@Suite("Real zip files, zip bombs and Anki packages from the corpus are refused")
struct CorpusTests {
    static let zipFiles = Corpus.files(in: "zip-real") + Corpus.files(in: "zip-bombs")
    static let ankiFiles = Corpus.files(in: "anki")

    /// The names in `folder` and its subfolders, to see that nothing appeared there.
    static func listing(_ folder: FilePath) -> [String] {
        (FileManager.default.subpaths(atPath: folder.string) ?? []).sorted()
    }

    @Test("the corpus folders hold files", .enabled(if: Corpus.root != nil, "the corpus is absent"))
    func corpusIsThere() {
        #expect(!Self.zipFiles.isEmpty)
        #expect(Self.zipFiles.contains { $0.string.contains("zip-bombs/") })
        #expect(!Self.ankiFiles.isEmpty)
    }

    @Test("a real zip file or zip bomb is refused and nothing is written outside the working folder",
          .enabled(if: Corpus.root != nil, "the corpus is absent"), .timeLimit(.minutes(1)),
          arguments: zipFiles)
    func zipFileRefused(file: FilePath) async throws {
        let corpusFolder = file.removingLastComponent()
        let corpusBefore = Self.listing(corpusFolder)
        let slipTargets = ["/tmp/evil.txt", "/Temp/evil.txt"].filter { FileManager.default.fileExists(atPath: $0) }
        try await withTemporaryDirectory { directory in
            let out = directory.appending("out")
            let error = #expect(throws: DocumentError.self, "\(file) should be refused") {
                let reader = try BundleReader(at: file)
                try reader.extract(into: out)
            }
            if let error {
                #expect(error.path == file || error.path == out, "the error should name the file: \(error)")
            }
            let names = try FileSystem.contentsOfDirectory(directory)
            #expect(Set(names).subtracting(["out"]).isEmpty, "only 'out' may appear: \(names)")
            if FileSystem.isDirectory(out) {
                #expect(try FileSystem.contentsOfDirectory(out).isEmpty, "'out' should be empty after a refusal")
            }
        }
        #expect(Self.listing(corpusFolder) == corpusBefore, "nothing may appear beside the corpus file")
        #expect(["/tmp/evil.txt", "/Temp/evil.txt"].filter { FileManager.default.fileExists(atPath: $0) }
                == slipTargets, "a zip-slip target appeared")
    }

    @Test("an Anki package (a zip holding SQLite) or collection is not a document",
          .enabled(if: Corpus.root != nil, "the corpus is absent"), .timeLimit(.minutes(1)),
          arguments: ankiFiles)
    func ankiFileRefused(file: FilePath) async throws {
        let corpusFolder = file.removingLastComponent()
        let corpusBefore = Self.listing(corpusFolder)
        let error = #expect(throws: DocumentError.self, "\(file) should be refused") { try BundleReader(at: file) }
        #expect(error?.code == .notADocument, "\(String(describing: error))")
        #expect(error?.path == file)
        if file.extension == "anki2" {
            #expect(error?.reason.contains("LegacyConverter") == true, "a SQLite file gets the convert hint")
        }
        #expect(Self.listing(corpusFolder) == corpusBefore, "nothing may appear beside the corpus file")
    }
}
