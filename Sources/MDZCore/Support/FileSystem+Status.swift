#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

extension FileSystem {
    /// What a file is, as the library tells files apart: swift-system's `FileType` folded into the kinds a walk and
    /// the safety checks distinguish (``Stat/kind``).
    @_spi(Core) public enum Kind: Equatable, Sendable {
        /// A regular file.
        case regular
        /// A folder.
        case directory
        /// A symbolic link (never followed where a kind is asked).
        case symlink
        /// Anything else: a device, a FIFO, a socket.
        case other
    }

    /// `lstat(2)`: the status of the file itself, not of what a link points to. `nil` when nothing is there.
    @_spi(Core) public static func status(_ path: FilePath) throws -> Stat? {
        do throws(Errno) {
            return try Stat(path, followTargetSymlink: false)
        } catch {
            if error == .noSuchFileOrDirectory || error == .notDirectory { return nil }
            throw DocumentError.io("cannot read the file's status", path: path, errno: error)
        }
    }

    /// `fstat(2)`: the status of the file `descriptor` reads.
    ///
    /// - Throws: ``DocumentError/Code/ioFailure`` naming `path`, with `reason` and the call's `Errno`.
    @_spi(Core) public static func status(of descriptor: FileDescriptor, path: FilePath,
                       reason: String = "cannot read the file's status") throws -> Stat {
        do { return try Stat(descriptor) } catch {
            throw DocumentError.io(reason, path: path, errno: error)
        }
    }

    /// Whether `descriptor` is still the file named `path` (the name itself, a link not followed): the same device
    /// and inode. A lock file's holder asks it after taking the lock: the file may have been removed, or replaced
    /// under its name, since it was opened.
    @_spi(Core) public static func isFile(_ descriptor: FileDescriptor, stillNamed path: FilePath) -> Bool {
        // > A status that cannot be read (the name gone) is not the same file.
        guard let opened = try? Stat(descriptor), let named = try? Stat(path, followTargetSymlink: false) else {
            return false
        }
        return opened.identity.isSameFile(as: named.identity)
    }

    /// Whether anything is at `path` (a symbolic link counts, whatever it points to).
    @_spi(Core) public static func exists(_ path: FilePath) throws -> Bool {
        try status(path) != nil
    }

    /// Whether `path` is a regular file (a symbolic link is not followed).
    @_spi(Core) public static func isRegularFile(_ path: FilePath) -> Bool {
        guard let status = try? status(path) else { return false }  // an unreadable status counts as "not a file"
        return status.kind == .regular
    }

    /// Whether `path` is a folder (a symbolic link is not followed).
    @_spi(Core) public static func isDirectory(_ path: FilePath) -> Bool {
        guard let status = try? status(path) else { return false }  // an unreadable status counts as "not a folder"
        return status.kind == .directory
    }
}

extension Stat {
    /// The file's kind: a regular file, a folder, a symbolic link, or anything else (a device, a FIFO, a socket).
    @_spi(Core) public var kind: FileSystem.Kind {
        switch type {
        case .regular: .regular
        case .directory: .directory
        case .symbolicLink: .symlink
        default: .other
        }
    }

    /// When the file's bytes last changed, in seconds since 1970 (`st_mtim`, its nanoseconds as a `Double` holds them).
    @_spi(Core) public var modificationTime: Double { Double(st_mtim.tv_sec) + Double(st_mtim.tv_nsec) / 1e9 }

    /// Which file it is, and whether it has changed (``FileIdentity``).
    @_spi(Core) public var identity: FileIdentity { FileIdentity(self) }
}
