import Crypto
import Foundation
import SystemPackage

/// Where an open document's store lives while it is edited: a private folder that is never the bundle.
///
/// Working copies live under ``Document/OpenOptions/workingDirectory`` (default:
/// `$TMPDIR/ManagedDocument-working`, or `/tmp/ManagedDocument-working`), one folder per bundle path
/// (`<first 16 hex digits of SHA-256 of the bundle's absolute path>`), holding:
/// - `.lock`: held with `flock(2)` while a process uses the copy;
/// - `base.json`: the bundle's store SHA-256 the copy was made from;
/// - `content/`: the bundle's content, laid out as in the bundle.
/// A copy whose lock nobody holds belongs to a process that died: it is recovered or discarded on the next open,
/// and ``Document/removeStaleWorkingCopies(in:olderThan:)`` removes old ones.
struct WorkingCopy {
    let directory: FilePath
    var content: FilePath { directory.appending("content") }
    var store: FilePath { content.appending(BundleLayout.store) }
    var externalData: FilePath { content.appending(BundleLayout.externalDataPrefix) }
    var additionalContent: FilePath { content.appending(BundleLayout.additionalContentPrefix) }
    var baseFile: FilePath { directory.appending("base.json") }

    struct Base: Codable, Equatable {
        var bundle: String
        var storeSHA256: String
    }

    static func root(_ option: FilePath?) -> FilePath {
        if let option { return option }
        let temporary = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        return FilePath(temporary).appending("ManagedDocument-working")
    }

    /// The working copy folder of a bundle (not created).
    static func location(for bundle: FilePath, root: FilePath) -> WorkingCopy {
        let absolute = bundle.isAbsolute ? bundle
            : FilePath(FileManager.default.currentDirectoryPath).pushing(bundle).lexicallyNormalized()
        let key = SHA256.hash(data: Array(absolute.string.utf8)).hexString.prefix(16)
        return WorkingCopy(directory: root.appending(String(key)))
    }

    /// A fresh, unique folder for a read-only snapshot.
    static func snapshot(root: FilePath) throws -> WorkingCopy {
        try FileSystem.createDirectory(root)
        return WorkingCopy(directory: try FileSystem.makeTemporaryDirectory(in: root, prefix: "read-"))
    }

    func readBase() -> Base? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: baseFile.string)) else { return nil }  // none
        return try? JSONDecoder().decode(Base.self, from: data)  // unreadable: treated as no base at all
    }

    func writeBase(_ base: Base) throws {
        do {
            try JSONEncoder().encode(base).write(to: URL(fileURLWithPath: baseFile.string), options: .atomic)
        } catch {
            throw DocumentError(.ioFailure, path: baseFile, reason: "cannot record the working copy's base")
        }
    }
}

extension SHA256.Digest {
    fileprivate var hexStringValue: String { hexString }
}
