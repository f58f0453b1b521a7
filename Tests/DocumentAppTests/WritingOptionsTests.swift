import Foundation
import GRDB
import ManagedDocument
import SystemPackage
import TestSupport
import Testing

/// Writing options an app may set to any value of their type: none traps, and the bundle still reads everywhere.
@Suite("Writing options at the ends of their types")
struct WritingOptionsTests {
    @Test("any modification time the metadata can hold writes a bundle other tools read: before 1980, after 2107",
          arguments: [Date.distantPast.timeIntervalSince1970, -1, Date.distantFuture.timeIntervalSince1970,
                      4_354_819_199, 253_402_300_799, -62_167_219_200])
    func anyModificationTime(_ seconds: Double) async throws {
        try await withTemporaryDirectory { folder in
            let store = try Fixtures.makeListStore(at: folder.appending("store.sqlite"), column: "text", values: ["kept"])
            for compression in [WritingOptions.Compression.deflate, .store] {
                var options = WritingOptions(compression: compression)
                options.modificationTime = Date(timeIntervalSince1970: seconds)
                let bundle = folder.appending("Doc-\(compression == .store ? "store" : "deflate").mdz")
                let metadata = try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(),
                                                      to: bundle, options: options)
                #expect(metadata.modifiedAt.timeIntervalSince1970 == seconds.rounded(.down))
                let unzip = try run("unzip", ["-tq", bundle.string])
                #expect(unzip.status == 0, "\(unzip.output)")
                let python = try run("python3", ["-m", "zipfile", "-t", bundle.string])
                #expect(python.status == 0, "\(python.output)")
                _ = try BundleReader(at: bundle).verify(full: true)
            }
        }
    }

    @Test("a modification time the metadata cannot hold is refused before anything is written, never a trap",
          arguments: [-62_167_219_201, 253_402_300_800, 1e300, -.infinity, .infinity, .nan])
    func timeOutOfRange(_ seconds: Double) async throws {
        // (Built here from seconds: Foundation's description of an infinite date traps in a test's name.)
        try await withTemporaryDirectory { folder in
            let store = try Fixtures.makeListStore(at: folder.appending("store.sqlite"), column: "text", values: ["kept"])
            var options = WritingOptions()
            options.modificationTime = Date(timeIntervalSince1970: seconds)
            let bundle = folder.appending("Doc.mdz")
            let error = #expect(throws: DocumentError.self) {
                try BundleWriter.write(BundleContent(store: store), metadata: DocumentMetadata(), to: bundle,
                                       options: options)
            }
            #expect(error?.code == .invalidArgument && error?.reason.contains("modificationTime") == true,
                    "\(String(describing: error))")
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.string) == ["store.sqlite"])
        }
    }

}
