#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SystemPackage

/// A file written aside and renamed into place: the write-aside-then-rename protocol.
///
/// The temporary file lives in the target's own folder (so the rename is atomic), is named
/// `.<target name>.<random>.partial`, and is held under an exclusive `flock(2)` for as long as it is being written.
/// A temporary whose lock can be taken belongs to a writer that died: ``removeStaleTemporaries(for:)`` deletes it.
/// A reader never sees a half-written file under the target's name.
final class AtomicFile {
    static let temporarySuffix = ".partial"

    let target: FilePath
    let temporaryPath: FilePath
    let descriptor: FileDescriptor
    private let replacing: Bool
    private var isFinished = false

    /// Creates the temporary file beside `target`. With `replacing: false`, an existing target is an error.
    /// With `removingStale: false` the caller has removed stale temporaries itself (the folder is not listed again).
    init(target: FilePath, replacing: Bool, removingStale: Bool = true) throws {
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
        guard FileSystem.isDirectory(directory.isEmpty ? "." : directory) else {
            throw DocumentError(.cannotCreate, path: target, reason: "its folder does not exist")
        }
        if removingStale { try AtomicFile.removeStaleTemporaries(for: target) }
        let random = UUID().uuidString.prefix(8).lowercased()
        let temporaryPath = directory.appending(".\(name).\(random)\(AtomicFile.temporarySuffix)")
        do {
            descriptor = try FileDescriptor.open(
                temporaryPath, .readWrite, options: [.create, .exclusiveCreate, .noFollow, .closeOnExec],
                permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch let error as Errno {
            throw DocumentError(.cannotCreate, path: target,
                                reason: "cannot create a temporary file in its folder", underlyingError: error)
        }
        self.temporaryPath = temporaryPath
        // > The name is new and random, so nobody else can hold its lock; the lock only tells cleaners it is alive.
        _ = FileSystem.lockExclusively(descriptor, wait: false)
    }

    /// Flushes the temporary file, renames it over the target, and flushes the folder.
    func commit() throws {
        precondition(!isFinished, "AtomicFile committed or discarded twice")
        try FileSystem.sync(descriptor, path: temporaryPath)
        if replacing {
            try FileSystem.rename(temporaryPath, to: target)
        } else {
            // > link(2) never replaces: a file that appeared under the target's name since init wins, and is kept.
            if link(temporaryPath.string, target.string) == 0 {
                try? FileSystem.removeFile(temporaryPath)  // the data is under the target's name; a leftover is removed next time
            } else if errno == EEXIST {
                throw DocumentError(.alreadyExists, path: target,
                                    reason: "appeared while it was being written; it was left as it is, choose another name")
            } else if try FileSystem.exists(target) {
                throw DocumentError(.alreadyExists, path: target, reason: "already exists; choose another name or remove it first")
            } else {
                try FileSystem.rename(temporaryPath, to: target)  // a file system without hard links
            }
        }
        isFinished = true
        try? descriptor.close()  // Squash close error: the data is already flushed and renamed.
        let directory = target.removingLastComponent()
        try FileSystem.syncDirectory(directory.isEmpty ? "." : directory)
    }

    /// Deletes the temporary file. The target is left as it was.
    func discard() {
        guard !isFinished else { return }
        isFinished = true
        try? descriptor.close()  // Squash close error: the file is being thrown away.
        try? FileSystem.removeFile(temporaryPath)  // Cleanup after a first error; a leftover is removed next time.
    }

    deinit { discard() }

    /// Deletes temporaries that writers of `target` left behind when they died.
    ///
    /// A temporary still locked by a live writer is left alone.
    static func removeStaleTemporaries(for target: FilePath) throws {
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
    static func removeIfStale(_ path: FilePath) throws {
        guard let candidate = path.lastComponent?.string else { return }
        if candidate.hasSuffix(temporarySuffix), FileSystem.isRegularFile(path) {
            if let descriptor = try? FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec]) {
                defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
                if FileSystem.lockExclusively(descriptor, wait: false) { try FileSystem.removeFile(path) }
            }
        } else if candidate.hasSuffix(ScratchDirectory.suffix), FileSystem.isDirectory(path) {
            let lock = path.appending(ScratchDirectory.lockName)
            guard let descriptor = try? FileDescriptor.open(lock, .readOnly, options: [.noFollow, .closeOnExec]) else {
                // No lock file: its writer died between mkdir and creating the lock.
                if (try? FileSystem.contentsOfDirectory(path))?.isEmpty == true { try FileSystem.removeTree(path) }
                return
            }
            defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
            if FileSystem.lockExclusively(descriptor, wait: false) { try ScratchDirectory.remove(path) }
        }
    }
}

/// A private working folder beside a target, `.<target name>.<random>.partial.d`, held under a `flock(2)` on its
/// `.lock` file while in use, and removed when done. One left by a process that died is removed by the next
/// ``AtomicFile`` or ``ScratchDirectory`` for the same target.
final class ScratchDirectory {
    static let suffix = ".partial.d"
    static let lockName = ".lock"

    let path: FilePath
    private let lock: FileDescriptor

    /// With `removingStale: false` the caller has removed stale temporaries itself (the folder is not listed again).
    init(besides target: FilePath, removingStale: Bool = true) throws {
        let directory = target.removingLastComponent()
        let folder: FilePath = directory.isEmpty ? "." : directory
        guard let name = target.lastComponent?.string else {
            throw DocumentError(.cannotCreate, path: target, reason: "the destination has no file name")
        }
        if removingStale { try AtomicFile.removeStaleTemporaries(for: target) }
        let random = UUID().uuidString.prefix(8).lowercased()
        let path = folder.appending(".\(name).\(random)\(ScratchDirectory.suffix)")
        if path.withPlatformString({ mkdir($0, 0o700) }) != 0 {
            throw DocumentError(.cannotCreate, path: target, reason: "cannot create a working folder beside it",
                                underlyingError: Errno(rawValue: errno))
        }
        do {
            lock = try FileDescriptor.open(path.appending(ScratchDirectory.lockName), .readWrite,
                                           options: [.create, .exclusiveCreate, .closeOnExec], permissions: [.ownerReadWrite])
        } catch let error as Errno {
            try? FileSystem.removeTree(path)  // Cleanup after a first error.
            throw DocumentError(.cannotCreate, path: target, reason: "cannot create a working folder beside it",
                                underlyingError: error)
        }
        _ = FileSystem.lockExclusively(lock, wait: false)
        self.path = path
    }

    deinit {
        try? Self.remove(path)  // Cleanup; a leftover is removed by the next writer of the target.
        try? lock.close()  // Squash close error: the folder is gone.
    }

    /// Removes a scratch folder with its `.lock` last, so that a removal cut short by a crash leaves either a folder
    /// whose lock file can be taken (removed next time) or an empty folder, never content without a lock file.
    static func remove(_ path: FilePath) throws {
        for name in try FileSystem.contentsOfDirectory(path) where name != lockName {
            try FileSystem.removeTree(path.appending(name))
        }
        try FileSystem.removeTree(path)
    }
}
