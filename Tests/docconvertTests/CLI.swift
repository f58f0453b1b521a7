import Foundation
import SystemPackage
import TestSupport

/// Scratch folders of the command tests. The command itself is run by `Docconvert.run` (TestSupport).
enum CLI {
    static func temporaryDirectory() throws -> FilePath {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("dc-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return FilePath(url.path)
    }
}
