#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CArchive  // statfs(2)
import Crypto
import Foundation
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// Where an open document's store lives while it is edited: a private folder that is never the bundle.
///
/// Working copies live under ``Document/OpenOptions/workingDirectory`` (default: ``defaultRoot(_:)``, a per-user
/// state folder that a reboot does not empty), a folder that must be a real folder (not a symbolic link) owned by
/// the user; the default one is made, or made again, with mode 0700. Inside it, one folder
/// per bundle path (`<first 16 hex digits of SHA-256 of the bundle's absolute path>`, mode 0700), holding:
/// - `.lock`: held with `flock(2)` while a process uses the copy; its inode is the open's ownership token;
/// - `base.json`: the bundle's store SHA-256 the copy was made from;
/// - `content/`: the bundle's content, laid out as in the bundle, files at mode 0600.
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
        /// The base bundle's store digest (``DocumentMetadata/Store/contentDigest``).
        var storeDigest: String

        // > The key working copies have always used: one kept from before format version 2 names a version 1
        // > bundle's `store.sha256`, which is still that bundle's content digest.
        enum CodingKeys: String, CodingKey {
            case bundle
            case storeDigest = "storeSHA256"
        }
    }

    /// The root folder of working copies, made or checked (``prepareRoot(_:isDefault:)``): the option; for a
    /// read-only open, whose snapshot holds nothing to recover, the per-user temporary folder (``temporaryRoot(_:)``);
    /// for a writable one the per-user default (``defaultRoot(_:)``), or, when that folder cannot be made because its
    /// file system is read-only or this user may not write there (a container's read-only home), the temporary
    /// folder, said in the log: its unsaved commits may then not survive a reboot.
    ///
    /// - Throws: ``DocumentError/Code/cannotCreate`` naming what is wrong with the folder.
    static func prepareRoot(_ option: FilePath?, forWriting: Bool, logger: Logger) throws -> FilePath {
        let environment = ProcessInfo.processInfo.environment
        if let option {
            try prepareRoot(option, isDefault: false)
            return option
        }
        guard forWriting else {
            let root = temporaryRoot(environment)
            try prepareRoot(root, isDefault: true)
            return root
        }
        let state = defaultRoot(environment)
        do {
            try prepareRoot(state, isDefault: true)
            return state
        } catch let error as DocumentError where error.code == .cannotCreate
                    && [Errno.readOnlyFileSystem, .permissionDenied, .notPermitted].contains(error.underlyingError as? Errno) {
            let root = temporaryRoot(environment)
            try prepareRoot(root, isDefault: true)
            logger.warning("cannot make the working copies' folder \(state) (\(error.underlyingError.map { "\($0)" } ?? "")); using \(root) instead, where commits not yet saved may not survive a reboot; set OpenOptions.workingDirectory or XDG_STATE_HOME to a folder you may write")
            return root
        }
    }

    /// The per-user temporary root: `$TMPDIR/ManagedDocument-<uid>` (`/tmp/…` without `TMPDIR`).
    static func temporaryRoot(_ environment: [String: String]) -> FilePath {
        let temporary = environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        return FilePath(temporary).appending("ManagedDocument-\(geteuid())")
    }

    /// The per-user default root, where a power cut or a reboot does not erase what is in it, as editors keep their
    /// swap and recovery files (the XDG Base Directory Specification's state folder): `$XDG_STATE_HOME/ManagedDocument`,
    /// or `<home>/.local/state/ManagedDocument` when `XDG_STATE_HOME` is unset, empty or relative (the specification
    /// ignores a relative one), where the home is `$HOME` when this user owns it, else the user's home in the
    /// password database when it exists and is the user's (a process that changed user but kept another's `HOME`);
    /// `$TMPDIR/ManagedDocument-<uid>` (`/tmp/…`) only when there is no such folder (a user without a home).
    static func defaultRoot(_ environment: [String: String]) -> FilePath {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return FilePath(state).appending("ManagedDocument")
        }
        func isOwnHome(_ path: String?) -> Bool {
            var info = stat()
            guard let path, path.hasPrefix("/"), path != "/", stat(path, &info) == 0 else { return false }
            return info.st_mode & S_IFMT == S_IFDIR && info.st_uid == geteuid()
        }
        let home = [environment["HOME"], getpwuid(geteuid()).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } }]
            .first { isOwnHome($0) }
        if let home = home.flatMap({ $0 }) { return FilePath(home).appending(".local/state/ManagedDocument") }
        return temporaryRoot(environment)
    }

    /// Whether `folder` is on a file system held in memory (tmpfs, ramfs), which a reboot or a power cut empties
    /// (`statfs(2)`); `false` when it cannot be told.
    static func isVolatile(_ folder: FilePath) -> Bool {
        var info = statfs()
        guard folder.withPlatformString({ statfs($0, &info) }) == 0 else { return false }
        let type = UInt(truncatingIfNeeded: info.f_type)
        return type == 0x0102_1994 /* TMPFS_MAGIC */ || type == 0x8584_58F6 /* RAMFS_MAGIC */
    }

    /// The roots said to be volatile so far: each is said once a process.
    private static let toldVolatile = Protected<Set<FilePath>>([])

    /// Logs, once a process for each root, that working copies under `root` do not survive a reboot or a power cut.
    static func warnIfVolatile(_ root: FilePath, logger: Logger) {
        guard isVolatile(root), toldVolatile.withLock({ $0.insert(root).inserted }) else { return }
        logger.warning("working copies are in \(root), on a file system held in memory (tmpfs): commits not yet saved are lost at a reboot or a power cut whatever the recovery policy; set OpenOptions.workingDirectory (or XDG_STATE_HOME) to a folder on disk to keep them")
    }

    /// Creates the root folder (mode 0700) or checks the one there: a real folder, not a symbolic link, owned by
    /// this user. The default root is also made private again (0700) when its mode lets others in; a root the app
    /// chose keeps its mode, and the copies inside it are private folders of their own.
    ///
    /// - Throws: ``DocumentError/Code/cannotCreate`` naming what is wrong with the folder.
    static func prepareRoot(_ root: FilePath, isDefault: Bool) throws {
        let parent = root.removingLastComponent()
        if !parent.isEmpty { try createDurably(parent, mode: isDefault ? 0o700 : 0o755) }
        do {
            try FileIO.makeDirectory(root, mode: 0o700)
            // > Made now: its entry made durable, so that a power cut cannot take the working copies made in it.
            try FileSystem.syncDirectory(parent.isEmpty ? "." : parent)
        } catch where FileIO.errno(of: error) == .fileExists {
            // there already: checked below
        } catch let error as DocumentError {
            throw error
        } catch {
            throw DocumentError(.cannotCreate, path: root, reason: "cannot create the working copies' folder",
                                underlyingError: FileIO.errno(of: error))
        }
        let info: Stat
        do { info = try Stat(root, followTargetSymlink: false) } catch {
            throw DocumentError(.cannotCreate, path: root, reason: "cannot read the working copies' folder",
                                underlyingError: error)
        }
        let advice = "working copies go only into a private folder of your own; set OpenOptions.workingDirectory (or XDG_STATE_HOME) to another one"
        switch info.kind {
        case .directory: break
        case .symlink: throw DocumentError(.cannotCreate, path: root, reason: "is a symbolic link; \(advice)")
        case .regular, .other: throw DocumentError(.cannotCreate, path: root, reason: "is not a folder; \(advice)")
        }
        guard info.userID.rawValue == geteuid() else {
            throw DocumentError(.cannotCreate, path: root,
                                reason: "belongs to another user (uid \(info.userID.rawValue)); \(advice)")
        }
        if isDefault, info.permissions.rawValue & 0o077 != 0, root.withPlatformString({ chmod($0, 0o700) }) != 0 {
            throw DocumentError(.cannotCreate, path: root, reason: "cannot make the working copies' folder private",
                                underlyingError: Errno(rawValue: errno))
        }
    }

    /// Makes `folder` and the folders above it that are missing (at `mode`, as the XDG specification asks of its
    /// base folders), each one's entry flushed into its parent: a power cut must not take the folder that holds
    /// the working copies.
    private static func createDurably(_ folder: FilePath, mode: mode_t) throws {
        guard !FileSystem.isDirectory(folder) else { return }
        let parent = folder.removingLastComponent()
        if !parent.isEmpty && parent != folder { try createDurably(parent, mode: mode) }
        do { try FileIO.makeDirectory(folder, mode: mode) } catch {
            let error = FileIO.errno(of: error)
            guard error == .fileExists else {
                throw DocumentError(.cannotCreate, path: folder, reason: "cannot create the folder", underlyingError: error)
            }
            return
        }
        try FileSystem.syncDirectory(parent.isEmpty ? "." : parent)
    }

    /// The working copy folder of a bundle (not created), keyed by the bundle's folder as the file system resolves
    /// it (`realpath(3)`: symbolic links, `.` and `..` followed) and its name, so that every spelling of one path
    /// (through a symbolically linked parent, relative or absolute) finds the same working copy. A folder that
    /// cannot be resolved (it does not exist yet) keys by the path as it is spelled, made absolute.
    static func location(for bundle: FilePath, root: FilePath) -> WorkingCopy {
        let absolute = bundle.isAbsolute ? bundle
            : FilePath(FileManager.default.currentDirectoryPath).pushing(bundle).lexicallyNormalized()
        var resolved = absolute
        if let name = absolute.lastComponent,
           let folder = absolute.removingLastComponent().withPlatformString({ realpath($0, nil) }) {
            resolved = FilePath(platformString: folder).appending(name)
            free(folder)
        }
        let key = SHA256.hash(data: Array(resolved.string.utf8)).hexString.prefix(16)
        return WorkingCopy(directory: root.appending(String(key)))
    }

    /// A fresh, unique folder for a read-only snapshot.
    static func snapshot(root: FilePath) throws -> WorkingCopy {
        return WorkingCopy(directory: try FileSystem.makeTemporaryDirectory(in: root, prefix: "read-"))
    }

    func readBase() -> Base? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: baseFile.string)) else { return nil }  // none
        return try? JSONDecoder().decode(Base.self, from: data)  // unreadable: treated as no base at all
    }

    /// Whether `name` is a super-journal SQLite made beside the working copy's store for a transaction that also
    /// wrote an `ATTACH`ed database (`overlay-mjXXXXXXXX`, `persistentStore-mjXXXXXXXX`).
    static func isSuperJournal(_ name: String) -> Bool {
        guard let range = name.range(of: "-mj", options: .backwards) else { return false }
        let tail = name[range.upperBound...]
        return tail.count == 8 && tail.allSatisfy(\.isHexDigit)
    }

    /// Removes the working copy, its `.lock` last, but for SQLite's super-journals: an attached database whose
    /// transaction was cut short by a crash names one of them in its own hot journal, and SQLite rolls that
    /// journal back (and removes the super-journal) only while the super-journal is there; without it, SQLite takes
    /// the attached database's half of the transaction as committed while the store's half was rolled back. The
    /// folder stays while such a file is in it (the next open of the document, or
    /// ``Document/removeStaleWorkingCopies(in:olderThan:)``, finds it).
    static func remove(_ directory: FilePath) throws {
        guard FileSystem.isDirectory(directory) else { return }
        let names = try FileSystem.contentsOfDirectory(directory)
        guard names.contains(where: isSuperJournal) else {
            try ScratchDirectory.remove(directory)
            return
        }
        for name in names where !isSuperJournal(name) && name != ScratchDirectory.lockName {
            try FileSystem.removeTree(directory.appending(name))
        }
        try FileSystem.removeFile(directory.appending(ScratchDirectory.lockName))
    }

    /// Records the base (written aside at mode 0600, flushed, renamed into place, the folder flushed).
    func writeBase(_ base: Base) throws {
        do {
            let bytes = Array(try JSONEncoder().encode(base))
            let file = try AtomicFile(target: baseFile, replacing: true, removingStale: false)
            _ = fchmod(file.descriptor.rawValue, 0o600)  // the folder is private already; the file too
            try bytes.withUnsafeBytes { try FileSystem.writeAll(file.descriptor, $0, path: file.temporaryPath) }
            try file.commit()
        } catch {
            throw DocumentError(.ioFailure, path: baseFile, reason: "cannot record the working copy's base",
                                underlyingError: error)
        }
    }
}

