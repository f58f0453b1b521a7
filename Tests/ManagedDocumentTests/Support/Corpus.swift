import Foundation
import SystemPackage

/// The shared corpus of real third-party files, `../shared/corpus` relative to the package root.
enum Corpus {
    static var root: FilePath? {
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let corpus = packageRoot.deletingLastPathComponent().appendingPathComponent("shared/corpus")
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: corpus.path, isDirectory: &isDirectory), isDirectory.boolValue
        else {
            print("skipping corpus checks: \(corpus.path) is absent")
            return nil
        }
        return FilePath(corpus.path)
    }

    /// Every regular file below a corpus folder, sorted.
    static func files(in folder: String) -> [FilePath] {
        guard let root else { return [] }
        let base = root.appending(folder)
        guard let enumerator = FileManager.default.enumerator(atPath: base.string) else { return [] }
        var result: [FilePath] = []
        while let relative = enumerator.nextObject() as? String {
            let path = base.appending(relative)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path.string, isDirectory: &isDirectory), !isDirectory.boolValue {
                result.append(path)
            }
        }
        return result.sorted { $0.string < $1.string }
    }
}
