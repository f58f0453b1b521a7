#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// A file written aside and renamed into place: the write-aside-then-rename protocol.
///
/// The temporary file lives in the target's own folder (so the rename is atomic), is named
/// `.<target name>.<random>.partial`, and is held under an exclusive `flock(2)` for as long as it is being written.
/// A temporary whose lock can be taken belongs to a writer that died: ``removeStaleTemporaries(for:)`` deletes it.
/// A reader never sees a half-written file under the target's name.
///
/// A new file gets mode 0666 less the umask, as any file the user makes; a file that replaces another takes the
/// replaced file's permission bits (and its owner and group where the process may set them), so a private document
/// stays private after a save. The temporary has its final bits before it has a name and before its first byte:
/// no other user can open it at any moment, even while a large document is being written.
@_spi(Core) public final class AtomicFile {
    @_spi(Core) public static let temporarySuffix = ".partial"

    @_spi(Core) public let target: FilePath
    @_spi(Core) public let temporaryPath: FilePath
    @_spi(Core) public let descriptor: FileDescriptor
    private let replacing: Bool
    private var isFinished = false

    /// Creates the temporary file beside `target`. With `replacing: false`, an existing target is an error.
    /// With `removingStale: false` the caller has removed stale temporaries itself (the folder is not listed again).
    /// With `restrictingTo`, the new file gets none of the permission bits that file lacks (a converted store's
    /// privacy carries over to its bundle).
    @_spi(Core)
    public init(target: FilePath, replacing: Bool, removingStale: Bool = true, restrictingTo source: FilePath? = nil) throws {
        self.target = target
        self.replacing = replacing
        let directory = target.removingLastComponent()
        guard let name = target.lastComponent?.string else {
            throw DocumentError(.cannotCreate, path: target, reason: "the destination has no file name")
        }
        if !replacing, try FileSystem.exists(target) {
            throw DocumentError(.alreadyExists, path: target,
                                reason: "already exists; choose another name or remove it first")
        }
        try AtomicFile.checkFolder(of: target)
        if removingStale { try AtomicFile.removeStaleTemporaries(for: target) }
        let random = FileSystem.randomSuffix()
        let temporaryPath = directory.appending(".\(name).\(random)\(AtomicFile.temporarySuffix)")
        let ownership = FinalOwnership(target: replacing ? target : nil, restrictingTo: source)
        do {
            descriptor = try AtomicFile.createLocked(temporaryPath, ownership: ownership)
        } catch let error as Errno {
            throw DocumentError(.cannotCreate, path: target,
                                reason: "cannot create a temporary file in its folder", underlyingError: error)
        }
        self.temporaryPath = temporaryPath
    }

    /// The permission bits, owner and group the new file is to have, decided before it is created.
    @_spi(Core) public struct FinalOwnership: Sendable {
        @_spi(Core) public var mode: mode_t
        /// The owner and group of the file it replaces, when they are not this process's.
        @_spi(Core) public var owner: (uid: uid_t, gid: gid_t)?

        /// A new file's (0666 less the umask) or, when `target` is a regular file it replaces, that file's; less
        /// the bits `source` lacks.
        @_spi(Core) public init(target: FilePath?, restrictingTo source: FilePath?) {
            mode = 0o666 & ~Self.umask()
            // > A status that cannot be read is as no file: a new file's bits, not restricted.
            if let target, let replaced = try? Stat(target, followTargetSymlink: false), replaced.kind == .regular {
                mode = replaced.permissions.rawValue & 0o777
                if replaced.userID.rawValue != geteuid() || replaced.groupID.rawValue != getegid() {
                    owner = (replaced.userID.rawValue, replaced.groupID.rawValue)
                }
            }
            if let source, let original = try? Stat(source) {
                mode &= original.permissions.rawValue & 0o777
            }
        }

        /// Applies the bits (and, as far as this process may, the owner and group) to a file that has no name yet,
        /// or only one that no other user can open.
        @_spi(Core) public func apply(to descriptor: FileDescriptor) throws {
            if let owner, fchown(descriptor.rawValue, owner.uid, owner.gid) != 0 {
                _ = fchown(descriptor.rawValue, uid_t.max, owner.gid)  // not allowed: the group alone, if it may
            }
            if let failure = Errno.failure(of: fchmod(descriptor.rawValue, mode)) { throw failure }
        }

        /// The process's umask, read once from `/proc/self/status` (setting it to read it would race with other
        /// threads creating files); 022 when it cannot be read. A process sets its umask when it starts, before it
        /// writes documents: a batch of thousands of small stores does not read the file once per bundle.
        @_spi(Core) public static func umask() -> mode_t { processUmask }

        private static let processUmask: mode_t = readUmask()

        private static func readUmask() -> mode_t {
            guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
                  let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
                  let value = mode_t(line.dropFirst("Umask:".count).filter { $0 != " " && $0 != "\t" }, radix: 8)
            else { return 0o022 }
            return value & 0o777
        }
    }

    /// Refuses a destination whose folder is missing, is a file, or is a symbolic link (which is not followed),
    /// saying which.
    @_spi(Core) public static func checkFolder(of target: FilePath) throws {
        let directory = target.removingLastComponent()
        let folder: FilePath = directory.isEmpty ? "." : directory
        guard !FileSystem.isDirectory(folder) else { return }
        let what = (try? FileSystem.status(folder)).flatMap { $0 }.map { status in
            status.kind == .symlink ? "is a symbolic link, which is not followed; give the real folder's path"
                : "is a file, not a folder"
        }
        throw DocumentError(.cannotCreate, path: target,
                            reason: what.map { "its folder \(folder) \($0)" } ?? "its folder does not exist")
    }

    /// Creates a new file at `path` (never an existing one) that is already under this descriptor's exclusive
    /// `flock(2)` when its name appears, so that no cleaner ever sees it unlocked while it is alive.
    ///
    /// On Linux the file is made without a name (`O_TMPFILE`), locked, given `ownership`, then linked under `path`;
    /// on a file system that cannot do that, it is created (no wider than 0600) and locked at once, then given
    /// `ownership` (a cleaner could take it for a dead one's in between, and the write would fail: never lose data).
    @_spi(Core)
    public static func createLocked(_ path: FilePath, ownership: FinalOwnership? = nil) throws -> FileDescriptor {
        let folder = path.removingLastComponent()
        let mode: mode_t = ownership == nil ? 0o666 : 0o600  // less the umask; `ownership` sets the final bits
        #if os(Linux)
        let temporaryFile: Int32 = 0o20_000_000 | O_DIRECTORY  // O_TMPFILE: __O_TMPFILE | O_DIRECTORY (per architecture)
        let unnamed = (folder.isEmpty ? "." : folder).withPlatformString {
            open($0, temporaryFile | O_RDWR | O_CLOEXEC, mode)
        }
        if unnamed >= 0 {
            let descriptor = FileDescriptor(rawValue: unnamed)
            _ = FileSystem.lockExclusively(descriptor, wait: false)  // a new file: nobody else can hold it
            do { try ownership?.apply(to: descriptor) } catch {
                try? descriptor.close()  // Squash close error of a file that has no name.
                throw error
            }
            do {
                try FileIO.link(descriptor, to: path)
                return descriptor
            } catch {
                try? descriptor.close()  // Squash close error of a file that has no name.
                if FileIO.errno(of: error) == .fileExists { throw FileIO.errno(of: error) }
            }
            // > No /proc, or links refused: made by name below.
        }
        #endif
        let descriptor = try FileIO.create(path, .readWrite, options: [.exclusiveCreate, .noFollow, .closeOnExec],
                                           permissions: FilePermissions(rawValue: mode))
        _ = FileSystem.lockExclusively(descriptor, wait: false)
        do { try ownership?.apply(to: descriptor) } catch {
            try? FileSystem.removeFile(path)  // Cleanup after a first error: nothing was written.
            try? descriptor.close()  // Squash close error of an empty file.
            throw error
        }
        return descriptor
    }

    /// Flushes the temporary file, renames it over the target, and flushes the folder.
    ///
    /// - Returns: the identity of the file now under the target's name, taken after the rename (which changes its
    ///   status change time): a later writer may trust the bytes it wrote while that identity holds.
    @discardableResult
    @_spi(Core) public func commit() throws -> FileIdentity? {
        precondition(!isFinished, "AtomicFile committed or discarded twice")
        if replacing { try adoptPermissionsOfTarget() }
        try FileSystem.sync(descriptor, path: temporaryPath)
        if replacing {
            try FileSystem.rename(temporaryPath, to: target)
        } else {
            // > link(2) never replaces: a file that appeared under the target's name since init wins, and is kept.
            let linked: Errno?
            do { try FileIO.link(temporaryPath, to: target); linked = nil } catch { linked = FileIO.errno(of: error) }
            if linked == nil {
                try? FileSystem.removeFile(temporaryPath)  // the data is under the target's name; a leftover is removed next time
            } else if linked == .fileExists {
                throw DocumentError(.alreadyExists, path: target,
                                    reason: "appeared while it was being written; it was left as it is, choose another name")
            } else if try FileSystem.exists(target) {
                throw DocumentError(.alreadyExists, path: target, reason: "already exists; choose another name or remove it first")
            } else {
                try FileSystem.rename(temporaryPath, to: target)  // a file system without hard links
            }
        }
        isFinished = true
        let identity = FileIdentity(descriptor)
        try? descriptor.close()  // Squash close error: the data is already flushed and renamed.
        let directory = target.removingLastComponent()
        try FileSystem.syncDirectory(directory.isEmpty ? "." : directory)
        return identity
    }

    /// Gives the temporary file the permission bits, owner and group of the file it is about to replace (owner and
    /// group only as far as this process may set them; the bits always).
    private func adoptPermissionsOfTarget() throws {
        // > A status that cannot be read is as no file: nothing to adopt.
        guard let replaced = try? Stat(target, followTargetSymlink: false), replaced.kind == .regular else {
            return  // nothing to replace (or not a regular file, which the rename refuses or replaces as it is)
        }
        let (owner, group) = (replaced.userID.rawValue, replaced.groupID.rawValue)
        if let current = try? Stat(descriptor), current.userID.rawValue != owner || current.groupID.rawValue != group {
            if fchown(descriptor.rawValue, owner, group) != 0 {
                _ = fchown(descriptor.rawValue, uid_t.max, group)  // not allowed: the group alone, if it may
            }
        }
        if let failure = Errno.failure(of: fchmod(descriptor.rawValue, replaced.permissions.rawValue & 0o777)) {
            throw DocumentError(.ioFailure, path: temporaryPath,
                                reason: "cannot give the new file the permissions of the one it replaces",
                                underlyingError: failure)
        }
    }

    /// Deletes the temporary file. The target is left as it was.
    @_spi(Core) public func discard() {
        guard !isFinished else { return }
        isFinished = true
        try? descriptor.close()  // Squash close error: the file is being thrown away.
        try? FileSystem.removeFile(temporaryPath)  // Cleanup after a first error; a leftover is removed next time.
    }

    deinit { discard() }

    /// Deletes temporaries that writers of `target` left behind when they died.
    ///
    /// A temporary still locked by a live writer is left alone.
    @_spi(Core) public static func removeStaleTemporaries(for target: FilePath) throws {
        let directory = target.removingLastComponent()
        guard let name = target.lastComponent?.string else { return }
        let folder: FilePath = directory.isEmpty ? "." : directory
        let prefix = ".\(name)."
        let names: [String]
        do { names = try FileSystem.contentsOfDirectory(folder) } catch { return }  // unlistable: nothing to clean
        for candidate in names where candidate.hasPrefix(prefix) {
            try removeIfStale(folder.appending(candidate))
        }
    }

    /// Deletes one temporary file (`….partial`) or scratch folder (`….partial.d`) when no live writer holds its
    /// lock; anything else, or a temporary in use, is left alone.
    ///
    /// A scratch folder's lock is the temporary file of the same name without `.d`, created (locked) before the
    /// folder and removed after it: a folder without that file is dead.
    @_spi(Core) public static func removeIfStale(_ path: FilePath) throws {
        guard let candidate = path.lastComponent?.string else { return }
        if candidate.hasSuffix(temporarySuffix), FileSystem.isRegularFile(path) {
            if let descriptor = try? FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec]) {
                defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
                if FileSystem.lockExclusively(descriptor, wait: false) {
                    let folder = FilePath(path.string + ".d")
                    if FileSystem.isDirectory(folder) { try FileSystem.removeTree(folder) }
                    try FileSystem.removeFile(path)
                }
            }
        } else if candidate.hasSuffix(ScratchDirectory.suffix), FileSystem.isDirectory(path) {
            let lockFile = FilePath(String(path.string.dropLast(2)))
            if FileSystem.isRegularFile(lockFile) {
                try removeIfStale(lockFile)  // the folder goes with its lock file, when that is stale
                return
            }
            // > A folder whose lock lives inside it (made by an earlier version), or none at all.
            let lock = path.appending(ScratchDirectory.lockName)
            guard let descriptor = try? FileDescriptor.open(lock, .readOnly, options: [.noFollow, .closeOnExec]) else {
                if (try? FileSystem.contentsOfDirectory(path))?.isEmpty == true { try FileSystem.removeTree(path) }
                return
            }
            defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
            if FileSystem.lockExclusively(descriptor, wait: false) { try ScratchDirectory.remove(path) }
        }
    }
}

/// A private working folder beside a target, `.<target name>.<random>.partial.d`, alive while the temporary file
/// `.<target name>.<random>.partial` beside it is held under a `flock(2)`: that file is created, already locked,
/// before the folder, and removed after it. One left by a process that died is removed by the next
/// ``AtomicFile`` or ``ScratchDirectory`` for the same target, or by `batch`'s walk.
@_spi(Core) public final class ScratchDirectory {
    @_spi(Core) public static let suffix = ".partial.d"
    /// The lock file inside working copies (``WorkingCopy``), and inside scratch folders of earlier versions.
    @_spi(Core) public static let lockName = ".lock"

    @_spi(Core) public let path: FilePath
    private let lockPath: FilePath
    private let lock: FileDescriptor

    /// With `removingStale: false` the caller has removed stale temporaries itself (the folder is not listed again).
    @_spi(Core) public init(besides target: FilePath, removingStale: Bool = true) throws {
        let directory = target.removingLastComponent()
        let folder: FilePath = directory.isEmpty ? "." : directory
        guard let name = target.lastComponent?.string else {
            throw DocumentError(.cannotCreate, path: target, reason: "the destination has no file name")
        }
        try AtomicFile.checkFolder(of: target)
        if removingStale { try AtomicFile.removeStaleTemporaries(for: target) }
        let random = FileSystem.randomSuffix()
        let lockPath = folder.appending(".\(name).\(random)\(AtomicFile.temporarySuffix)")
        let path = FilePath(lockPath.string + ".d")
        do {
            lock = try AtomicFile.createLocked(lockPath)
        } catch let error as Errno {
            throw DocumentError(.cannotCreate, path: target, reason: "cannot create a working folder beside it",
                                underlyingError: error)
        }
        do { try FileIO.makeDirectory(path, mode: 0o700) } catch {
            let failure = FileIO.errno(of: error)
            try? FileSystem.removeFile(lockPath)  // Cleanup after a first error.
            try? lock.close()  // Squash close error of an empty lock file.
            throw DocumentError(.cannotCreate, path: target, reason: "cannot create a working folder beside it",
                                underlyingError: failure)
        }
        self.path = path
        self.lockPath = lockPath
    }

    deinit {
        // > The folder first, its lock file last: a removal cut short leaves a lock file nobody holds (removed next
        // > time, with what is left of the folder).
        // > The lock file goes only with the folder: a folder left without its lock file would never be removed.
        if (try? FileSystem.removeTree(path)) != nil {  // Cleanup; a leftover is removed by the next writer
            try? FileSystem.removeFile(lockPath)  // Cleanup; as above.
        }
        try? lock.close()  // Squash close error: the files are gone, or removed next time.
    }

    /// Removes a folder whose lock file is inside it (a working copy), the `.lock` last, so that a removal cut short
    /// by a crash leaves either a folder whose lock file can be taken (removed next time) or an empty folder, never
    /// content without a lock file.
    @_spi(Core) public static func remove(_ path: FilePath) throws {
        for name in try FileSystem.contentsOfDirectory(path) where name != lockName {
            try FileSystem.removeTree(path.appending(name))
        }
        try FileSystem.removeTree(path)
    }
}
