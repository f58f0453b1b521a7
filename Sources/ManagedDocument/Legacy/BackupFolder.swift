#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import SystemPackage
@_spi(Core) import MDZCore

/// Where a converted store's legacy files go under ``LegacyPolicy/backup``, and the move that never replaces.
///
/// The folder is `<root>/<NAME>.<KEY>`: `KEY` is 8 hex digits of a SHA-256 over the name and SHA-256 of every file
/// the conversion read (the provenance's list: the main file, its `-wal` or `-journal`, Core Data's external data, a
/// package's files), so two stores with one name and one main file but different `-wal` files get two folders. A
/// folder is never shared by two stores' files of one name: when `<NAME>.<KEY>` already holds a file of that name
/// (the same store converted twice from two places, or a key that collides), `<NAME>.<KEY>.2`, `.3`, … is used.
/// A folder holding none of them is taken as it is: that is how a disposal cut short by a crash is completed into
/// the folder it started.
///
/// Every move is a `rename(2)` that never replaces (``moveWithoutReplacing(_:to:)``), so even two processes choosing
/// the same folder at once cannot overwrite one another's files: the second is refused, naming the file.
struct BackupFolder {
    /// The folder the files go into (made).
    let path: FilePath

    /// The most folders tried for one key before giving up (each already holds a file of the same name).
    static let maximumAttempts = 1000

    /// Chooses and makes the folder for `items` (the paths about to be moved, by their last component) under `root`.
    ///
    /// - Throws: ``DocumentError/Code/cannotCreate`` when a folder cannot be made; ``DocumentError/Code/alreadyExists``
    ///   when every candidate holds a file of the same name.
    init(under root: FilePath, name: String, provenance: DocumentMetadata.Provenance, moving items: [FilePath]) throws {
        let key = Self.key(of: provenance)
        let names = items.compactMap(\.lastComponent)
        for attempt in 1...Self.maximumAttempts {
            let candidate = root.appending(attempt == 1 ? "\(name).\(key)" : "\(name).\(key).\(attempt)")
            try FileSystem.createDirectory(candidate)
            var isTaken = false
            for item in names where try FileSystem.status(candidate.appending(item)) != nil {
                isTaken = true
                break
            }
            if !isTaken {
                path = candidate
                return
            }
        }
        throw DocumentError(.alreadyExists, path: root.appending("\(name).\(key)"),
                            reason: "and \(Self.maximumAttempts - 1) numbered folders beside it already hold files named as these; nothing was moved")
    }

    /// 8 hex digits of a SHA-256 over the name and SHA-256 of every file in `provenance`, in name order.
    static func key(of provenance: DocumentMetadata.Provenance) -> String {
        var hasher = SHA256()
        for file in provenance.files.sorted(by: { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }) {
            hasher.update(data: Array("\(file.name)\u{0}\(file.sha256)\n".utf8))
        }
        return String(Array(hasher.finalize()).hexString.prefix(8))
    }

    /// Moves `source` to `destination` unless something is there: `renameat2(2)` with `RENAME_NOREPLACE`, or, where
    /// the kernel or file system lacks it, `link(2)` then `unlink(2)` for a file (a crash between the two leaves both
    /// names, the source unchanged) and a check then `rename(2)` for a folder (a folder renamed over can only be an
    /// empty one).
    ///
    /// - Throws: ``DocumentError/Code/alreadyExists`` naming `destination` when something is there;
    ///   ``DocumentError/Code/ioFailure`` with the `errno` otherwise (`EXDEV` for another volume).
    static func moveWithoutReplacing(_ source: FilePath, to destination: FilePath) throws {
        let refused = DocumentError(.alreadyExists, path: destination,
                                    reason: "is already there; it was not replaced and \(source) was not moved")
        do {
            try FileIO.renameWithoutReplacing(source, to: destination)
            return
        } catch {
            let error = FileIO.errno(of: error)
            if error == .fileExists { throw refused }
            guard error == .invalidArgument || error == .noFunction || error == .notSupported else {
                throw DocumentError.io("cannot move \(source) into the backup folder", path: destination, errno: error)
            }
        }
        if FileSystem.isDirectory(source) {
            guard try FileSystem.status(destination) == nil else { throw refused }
            try FileSystem.rename(source, to: destination)
            return
        }
        do { try FileIO.link(source, to: destination) } catch {
            let error = FileIO.errno(of: error)
            if error == .fileExists { throw refused }
            throw DocumentError.io("cannot move \(source) into the backup folder", path: destination, errno: error)
        }
        try FileSystem.removeFile(source)
    }

}
