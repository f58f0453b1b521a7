#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

extension Document {
    /// The bundle `target` names, or every bundle under the folder `target`, sorted by path.
    ///
    /// Bundles are found by content (the zip signature and the `mimetype` entry), whatever their names. The tree is
    /// walked by the rule a batch conversion walks it (one walker below ``BatchConverter``, the fleet plan and this
    /// call), so that every bundle a batch wrote is found here: hidden folders and files are included
    /// (`.local/share/…`); symbolic links are never followed; the tools' own temporaries and document locks,
    /// `docconvert-backup` folders, Core Data support folders and the inside of UIManagedDocument packages are
    /// skipped (a batch's report spools are read and found not to be bundles). A `target` that is a file
    /// but not a bundle throws the reader's specific reason.
    ///
    /// ```swift
    /// for bundle in try Document.bundles(under: "/srv/documents") {
    ///     print(bundle, try Document.metadata(at: bundle).model.version ?? "-")
    /// }
    /// ```
    ///
    /// - Parameter target: A bundle, or a folder to search.
    /// - Returns: The bundles, sorted by path.
    /// - Throws: ``DocumentError/Code/notFound`` when `target` does not exist; the reader's codes when it is a file
    ///   but not a bundle; ``DocumentError/Code/ioFailure`` when a folder cannot be listed.
    public static func bundles(under target: FilePath) throws -> [FilePath] {
        if case .bundle = try LegacyDetector.detect(at: target) { return [target] }
        guard (try FileSystem.status(target))?.kind == .directory else {
            _ = try BundleReader(at: target)  // throws the specific reason it is not a bundle
            return [target]
        }
        guard !StoreTreeWalker.isPackage(target) else { return [] }  // a package holds a store, not bundles
        var found: [FilePath] = []
        var failure: (any Error)?
        StoreTreeWalker(root: target).walk { entry in
            switch entry {
            case .file(let path, _, let status) where status.kind == .regular:
                do {
                    if case .bundle = try LegacyDetector.detect(at: path, status: status) { found.append(path) }
                } catch let error as DocumentError where error.code == .notFound {
                    return true  // vanished since listed
                } catch {
                    failure = error
                    return false
                }
            case .unreadable(_, _, let error):
                failure = error
                return false
            case .file, .package:
                break  // links, devices, sockets; packages
            }
            return true
        }
        if let failure { throw failure }
        return found.sorted { $0.string < $1.string }
    }
}
