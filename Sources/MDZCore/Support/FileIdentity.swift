#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

/// Which file a descriptor reads and whether it has changed: device, inode, size, and the modification and status
/// change times to the nanosecond. Every write to the file changes its modification time, and every write, rename,
/// link or permission change its status change time, which no user tool can set back: while the identity is
/// the same, the file holds the bytes it held when the identity was taken.
@_spi(Core) public struct FileIdentity: Equatable, Sendable {
    /// The device the file is on (`st_dev`).
    @_spi(Core) public var device: UInt64
    /// The file's inode on that device (`st_ino`).
    @_spi(Core) public var inode: UInt64
    /// The file's size in bytes (`st_size`).
    @_spi(Core) public var size: Int64
    /// When its bytes last changed (`st_mtim`).
    @_spi(Core) public var modified: timespec
    /// When its bytes, names or permissions last changed (`st_ctim`).
    @_spi(Core) public var changed: timespec

    /// The identity of the file `descriptor` reads, now; `nil` when `fstat(2)` fails.
    @_spi(Core) public init?(_ descriptor: FileDescriptor) {
        guard let status = try? Stat(descriptor) else { return nil }  // no status, no identity: said above
        self.init(status)
    }

    /// The identity of the file at `path` now (a symbolic link followed); `nil` when it cannot be opened.
    @_spi(Core) public init?(at path: FilePath) {
        guard let descriptor = try? FileSystem.openForReading(path) else { return nil }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        self.init(descriptor)
    }

    /// The identity a file status describes.
    @_spi(Core) public init(_ status: Stat) {
        device = UInt64(status.deviceID.rawValue)
        inode = UInt64(status.inode.rawValue)
        size = status.size
        modified = status.st_mtim
        changed = status.st_ctim
    }

    /// Whether the times are fine enough to tell two writes apart: a file system that keeps whole seconds (FAT,
    /// some network file systems) shows both times with no nanoseconds, and a rewrite within the same second
    /// would keep the identity. Such an identity proves nothing (one chance in 10^18 of being wrong the safe way).
    @_spi(Core) public var hasFineTimes: Bool { modified.tv_nsec != 0 || changed.tv_nsec != 0 }

    /// The modification time, seconds and nanoseconds since 1970: for callers outside this module, which then need
    /// not see the C `timespec` (whose module a client would have to import to read its fields).
    @_spi(Core) public var modifiedTime: (seconds: Int, nanoseconds: Int) {
        (Int(modified.tv_sec), Int(modified.tv_nsec))
    }

    /// Whether both name the same file (device and inode), whatever its content and times.
    @_spi(Core)
    public func isSameFile(as other: FileIdentity) -> Bool { device == other.device && inode == other.inode }

    /// Whether both are the same file with the same size and times, to the nanosecond.
    @_spi(Core) public static func == (a: FileIdentity, b: FileIdentity) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }
}
