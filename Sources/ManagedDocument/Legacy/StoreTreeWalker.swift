#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// Walks a folder of stores and documents by the one rule every search of this package follows (a batch's items,
/// a fleet plan's, ``Document/bundles(under:)``): depth-first and streaming (one open directory stream per level,
/// never a whole listing, so memory does not grow with the number of entries); hidden folders and files included;
/// symbolic links reported, never followed.
///
/// What it does not report, because each is part of something else or belongs to the tools: Core Data support
/// folders (`.STEM_SUPPORT`), the converter's temporaries (`.NAME.*.partial`, `.NAME.*.partial.d`: removed when stale
/// and ``removesStaleTemporaries`` is set), document locks (`.NAME.mdz.lock`), names ending in one of
/// ``ownSuffixes`` (a batch's report spools), backup folders (`docconvert-backup`, and ``backupDirectory``), and the
/// inside of UIManagedDocument packages (a package is reported whole).
struct StoreTreeWalker {
    /// What the walk found.
    enum Entry {
        /// A UIManagedDocument package (a folder holding `StoreContent/persistentStore`): never entered.
        case package(FilePath, relativePath: String)
        /// Anything else that is not a folder (a file, a symbolic link, a device), with its `lstat(2)`.
        case file(FilePath, relativePath: String, status: Stat)
        /// A folder that could not be listed.
        case unreadable(FilePath, relativePath: String, error: DocumentError)
    }

    /// The folder walked.
    var root: FilePath
    /// A backup folder of the tool's, never entered.
    var backupDirectory: FilePath?
    /// The bundles' extension (their locks are `.NAME.EXTENSION.lock`).
    var bundleExtension = BundleLayout.defaultExtension
    /// More names of the caller's own hidden files (suffixes), never reported.
    var ownSuffixes: [String] = []
    /// Whether temporaries left by crashed conversions (unlocked `.NAME.*.partial`, `.NAME.*.partial.d`) are removed
    /// as the walk meets them.
    var removesStaleTemporaries = false

    /// Whether `folder` is a UIManagedDocument package.
    static func isPackage(_ folder: FilePath) -> Bool {
        FileSystem.isRegularFile(folder.appending("StoreContent/persistentStore"))
    }

    /// Calls `visit` for every entry under ``root`` (a folder), in directory order, until it returns `false`.
    func walk(_ visit: (Entry) -> Bool) {
        var stack: [(stream: OpaquePointer, path: FilePath, relative: String)] = []
        defer { for level in stack { closedir(level.stream) } }
        func push(_ folder: FilePath, _ relative: String) -> Bool {
            guard let stream = folder.withPlatformString({ opendir($0) }) else {
                let error = DocumentError.io("cannot list the folder", path: folder, errno: Errno(rawValue: errno))
                return visit(.unreadable(folder, relativePath: relative, error: error))
            }
            stack.append((stream, folder, relative))
            return true
        }
        guard push(root, "") else { return }
        while let level = stack.last {
            errno = 0
            guard let entry = readdir(level.stream) else {
                if errno != 0 {
                    let error = DocumentError.io("cannot list the folder", path: level.path, errno: Errno(rawValue: errno))
                    if !visit(.unreadable(level.path, relativePath: level.relative, error: error)) { return }
                }
                closedir(level.stream)
                stack.removeLast()
                continue
            }
            // The component is taken as bytes, so a name that is not valid UTF-8 still names its file; only the
            // report's relative path shows it repaired.
            guard let component = FilePath.Component(platformString: FileSystem.entryName(entry)) else { continue }
            let name = component.string
            if name == "." || name == ".." { continue }
            let path = level.path.appending(component)
            if isOwnFile(name) {
                // > A crashed conversion's leftover is removed here, once, rather than by every conversion into this
                // > folder listing it again; one in use keeps its lock and stays.
                if removesStaleTemporaries { try? AtomicFile.removeIfStale(path) }
                continue
            }
            let relative = level.relative.isEmpty ? name : level.relative + "/" + name
            guard let status = try? FileSystem.status(path) else { continue }  // vanished since readdir
            guard status.kind == .directory else {
                if !visit(.file(path, relativePath: relative, status: status)) { return }
                continue
            }
            if name == "docconvert-backup" || path == backupDirectory || isSupportFolder(name) { continue }
            if Self.isPackage(path) {
                if !visit(.package(path, relativePath: relative)) { return }
                continue
            }
            if !push(path, relative) { return }
        }
    }

    /// Names the converter and the document lock create beside a target, and the caller's own.
    private func isOwnFile(_ name: String) -> Bool {
        guard name.hasPrefix(".") else { return false }
        return name.hasSuffix(AtomicFile.temporarySuffix) || name.hasSuffix(ScratchDirectory.suffix)
            || name.hasSuffix(".\(bundleExtension).lock") || ownSuffixes.contains { name.hasSuffix($0) }
    }

    private func isSupportFolder(_ name: String) -> Bool {
        name.hasPrefix(".") && name.hasSuffix("_SUPPORT") && name.count > "._SUPPORT".count
    }
}
