#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import Foundation
import SystemPackage

/// Small, checked wrappers over the POSIX calls the safety protocols need. Every change to a file goes through
/// ``FileIO``, the one door tests observe.
enum FileSystem {
    enum Kind: Equatable { case regular, directory, symlink, other }

    /// What `lstat(2)`, `stat(2)` or `fstat(2)` says of a file: the one place the library calls them.
    struct Status {
        var kind: Kind
        var size: Int64
        var modificationTime: Double
        /// The permission bits (`st_mode & 0o7777`).
        var permissions: mode_t
        var owner: uid_t
        var group: gid_t
        /// Which file it is, and whether it has changed (``FileIdentity``).
        var identity: FileIdentity

        /// `lstat(2)`: the status of the file itself, not of what a link points to (`stat(2)` with
        /// `followingLinks`); `nil`, with `errno` saying why, when it fails.
        init?(_ path: FilePath, followingLinks: Bool = false) {
            var info = stat()
            let result = path.withPlatformString { followingLinks ? stat($0, &info) : lstat($0, &info) }
            guard result == 0 else { return nil }
            self.init(info)
        }

        /// `fstat(2)`: the status of the file `descriptor` reads; `nil`, with `errno` saying why, when it fails.
        init?(_ descriptor: FileDescriptor) {
            var info = stat()
            guard fstat(descriptor.rawValue, &info) == 0 else { return nil }
            self.init(info)
        }

        private init(_ info: stat) {
            switch info.st_mode & S_IFMT {
            case S_IFREG: kind = .regular
            case S_IFDIR: kind = .directory
            case S_IFLNK: kind = .symlink
            default: kind = .other
            }
            size = Int64(info.st_size)
            modificationTime = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
            permissions = info.st_mode & 0o7777
            owner = info.st_uid
            group = info.st_gid
            identity = FileIdentity(info)
        }
    }

    /// `lstat(2)`: the status of the file itself, not of what a link points to. `nil` when nothing is there.
    static func status(_ path: FilePath) throws -> Status? {
        if let status = Status(path) { return status }
        if errno == ENOENT || errno == ENOTDIR { return nil }
        throw DocumentError.io("cannot read the file's status", path: path, errno: Errno(rawValue: errno))
    }

    /// Whether `descriptor` is still the file named `path` (the name itself, a link not followed): the same device
    /// and inode. A lock file's holder asks it after taking the lock: the file may have been removed, or replaced
    /// under its name, since it was opened.
    static func isFile(_ descriptor: FileDescriptor, stillNamed path: FilePath) -> Bool {
        guard let opened = Status(descriptor), let named = Status(path) else { return false }
        return opened.identity.isSameFile(as: named.identity)
    }

    static func exists(_ path: FilePath) throws -> Bool {
        try status(path) != nil
    }

    static func isRegularFile(_ path: FilePath) -> Bool {
        guard let status = try? status(path) else { return false }  // an unreadable status counts as "not a file"
        return status.kind == .regular
    }

    static func isDirectory(_ path: FilePath) -> Bool {
        guard let status = try? status(path) else { return false }  // an unreadable status counts as "not a folder"
        return status.kind == .directory
    }

    /// `fsync(2)` on an open descriptor: the file's bytes and metadata made durable.
    static func sync(_ descriptor: FileDescriptor, path: FilePath) throws {
        do { try FileIO.sync(descriptor, path: path) } catch {
            throw DocumentError.io("cannot flush the file to disk", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// `fdatasync(2)` on an open descriptor: the file's bytes and size made durable.
    static func dataSync(_ descriptor: FileDescriptor, path: FilePath) throws {
        do { try FileIO.dataSync(descriptor, path: path) } catch {
            throw DocumentError.io("cannot flush the file to disk", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// `ftruncate(2)`.
    static func resize(_ descriptor: FileDescriptor, to size: Int64, path: FilePath) throws {
        do { try FileIO.resize(descriptor, to: size, path: path) } catch {
            throw DocumentError.io("cannot change the file's size", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// `pwrite(2)` of all of `bytes` at `offset`.
    static func write(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64,
                      path: FilePath) throws {
        do { try FileIO.write(descriptor, bytes, at: offset, path: path) } catch {
            throw DocumentError.io("cannot write the file", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// Makes every change made to a folder so far durable (a rename, a new or a removed name): returns once a flush of
    /// the folder that started after the call has ended, this call's own or one it shares with other threads that
    /// changed the same folder at about the same time (``FolderFlushes``).
    static func syncDirectory(_ directory: FilePath) throws {
        try FolderFlushes.sync(directory) { try flushDirectory(directory) }
    }

    /// Opens a folder and `fsync(2)`s it. `EINVAL` (a file system that cannot flush a folder) is not an error.
    private static func flushDirectory(_ directory: FilePath) throws {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.open(directory, .readOnly, options: [.directory, .closeOnExec])
        } catch let error as Errno {
            throw DocumentError.io("cannot open the folder to flush it", path: directory, errno: error)
        }
        defer { try? descriptor.close() }  // Squash close error: the fsync result is what counts.
        do { try FileIO.sync(descriptor, path: directory, isFolder: true) } catch {
            let failure = FileIO.errno(of: error)
            guard failure == .invalidArgument else {
                throw DocumentError.io("cannot flush the folder to disk", path: directory, errno: failure)
            }
        }
    }

    /// `rename(2)`: atomically replaces `destination` with `source` (same file system).
    static func rename(_ source: FilePath, to destination: FilePath) throws {
        do { try FileIO.rename(source, to: destination) } catch {
            throw DocumentError.io("cannot move \(source) into place", path: destination, errno: FileIO.errno(of: error))
        }
    }

    /// `link(2)`: gives `source` a second name, failing when `destination` exists (a rename that never replaces).
    static func link(_ source: FilePath, to destination: FilePath) throws {
        do { try FileIO.link(source, to: destination) } catch {
            let error = FileIO.errno(of: error)
            if error == .fileExists {
                throw DocumentError(.alreadyExists, path: destination, reason: "already exists; choose another name")
            }
            throw DocumentError(.cannotCreate, path: destination, reason: "cannot create the file", underlyingError: error)
        }
    }

    /// Closes `descriptors` and drops `values` (readers of files) on a background queue. The last descriptor of a
    /// file replaced or removed since it was opened frees the file's blocks as it closes, which takes tens of
    /// milliseconds for a large one (ext4: 33-39 ms for a bundle of 181 MB): housekeeping a save need not wait for.
    static func retire(_ descriptors: [FileDescriptor], _ values: [any Sendable] = []) {
        retiring.async {
            for descriptor in descriptors { try? descriptor.close() }  // Squash: every write to them was flushed.
            withExtendedLifetime(values) {}
        }
    }

    private static let retiring = DispatchQueue(label: "ManagedDocument.retire", qos: .utility)

    /// Removes a file; a file that is already gone is not an error.
    static func removeFile(_ path: FilePath) throws {
        do { try FileIO.unlink(path) } catch {
            let error = FileIO.errno(of: error)
            guard error == .noSuchFileOrDirectory else {
                throw DocumentError.io("cannot remove the file", path: path, errno: error)
            }
        }
    }

    /// Removes a file tree without following symbolic links.
    static func removeTree(_ path: FilePath) throws {
        guard let status = try status(path) else { return }
        if status.kind == .directory {
            for name in try contentsOfDirectory(path) {
                try removeTree(path.appending(name))
            }
            do { try FileIO.removeDirectory(path) } catch {
                let error = FileIO.errno(of: error)
                guard error == .noSuchFileOrDirectory else {
                    throw DocumentError.io("cannot remove the folder", path: path, errno: error)
                }
            }
        } else {
            try removeFile(path)
        }
    }

    /// The name in a `readdir(3)` record, read in place. (`entry.pointee.d_name` copies the whole 256-byte array, and
    /// a record is only as long as its name: AddressSanitizer reports the read past its end.)
    static func entryName(_ entry: UnsafeMutablePointer<dirent>) -> UnsafePointer<CChar> {
        (UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \dirent.d_name)!).assumingMemoryBound(to: CChar.self)
    }

    /// The names in a folder, sorted, without `.` and `..`.
    static func contentsOfDirectory(_ path: FilePath) throws -> [String] {
        guard let directory = path.withPlatformString({ opendir($0) }) else {
            throw DocumentError.io("cannot list the folder", path: path, errno: Errno(rawValue: errno))
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = String(cString: entryName(entry))
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Creates a folder and any missing parents (mode 0755).
    static func createDirectory(_ path: FilePath, mode: mode_t = 0o755) throws {
        if isDirectory(path) { return }
        if let parent = path.removingLastComponent() as FilePath?, !parent.isEmpty, parent != path,
           !isDirectory(parent) {
            try createDirectory(parent)
        }
        do { try FileIO.makeDirectory(path, mode: mode) } catch {
            let error = FileIO.errno(of: error)
            guard error == .fileExists else {
                throw DocumentError(.cannotCreate, path: path, reason: "cannot create the folder", underlyingError: error)
            }
        }
    }

    /// Creates a fresh, private folder inside `parent` whose name starts with `prefix`.
    static func makeTemporaryDirectory(in parent: FilePath, prefix: String) throws -> FilePath {
        // > mkdtemp(3)'s way: a random name, made with mode 0700, tried again when it exists.
        for _ in 0..<100 {
            let path = parent.appending("\(prefix)\(randomSuffix())")
            do {
                try FileIO.makeDirectory(path, mode: 0o700)
                return path
            } catch where FileIO.errno(of: error) == .fileExists {
                continue
            } catch {
                throw DocumentError(.cannotCreate, path: parent, reason: "cannot create a working folder",
                                    underlyingError: FileIO.errno(of: error))
            }
        }
        throw DocumentError(.cannotCreate, path: parent, reason: "cannot create a working folder (every name tried exists)")
    }

    /// The SHA-256 and size of a file, read in 1 MiB chunks.
    static func digest(of path: FilePath) throws -> (sha256: String, size: Int64) {
        let descriptor = try openForReading(path)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        var hasher = SHA256()
        var size: Int64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count: Int
            do { count = try descriptor.read(into: buffer) } catch let error as Errno {
                throw DocumentError.io("cannot read the file", path: path, errno: error)
            }
            if count == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            size += Int64(count)
        }
        return (hasher.finalize().hexString, size)
    }

    /// Copies a file's bytes to a new file, returning their SHA-256 and size. The hash runs on a second thread
    /// (``ChunkPipeline``) while the next chunk is read and written.
    static func copyFile(_ source: FilePath, to destination: FilePath) throws -> (sha256: String, size: Int64) {
        let input = try openForReading(source)
        defer { try? input.close() }  // Squash close error of a read-only descriptor.
        let output: FileDescriptor
        do {
            output = try FileIO.create(destination, .writeOnly, options: [.exclusiveCreate, .noFollow, .closeOnExec],
                                       permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch {
            throw DocumentError(.cannotCreate, path: destination, reason: "cannot create the file",
                                underlyingError: FileIO.errno(of: error))
        }
        defer { try? output.close() }  // Squash close error: callers check what they copied.
        let expected = Status(input)?.size ?? Int64(ChunkPipeline.chunkSize)
        let pipeline = ChunkPipeline.forStream(ofSize: expected)
        var size: Int64 = 0
        while true {
            let buffer = pipeline.acquire()
            let count: Int
            do { count = try input.read(into: buffer) } catch let error as Errno {
                throw DocumentError.io("cannot read the file", path: source, errno: error)
            }
            if count == 0 { break }
            try writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<count]), path: destination)
            pipeline.submit(count)
            size += Int64(count)
        }
        return (pipeline.finalize(), size)
    }

    static func openForReading(_ path: FilePath) throws -> FileDescriptor {
        do {
            return try FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec])
        } catch let error as Errno {
            if error == .noSuchFileOrDirectory {
                throw DocumentError(.notFound, path: path, reason: "no such file", underlyingError: error)
            }
            throw DocumentError.io("cannot open the file", path: path, errno: error)
        }
    }

    /// A new file without a name in `TMPDIR` (else `/tmp`), for scratch data that must vanish with the process.
    static func unnamedTemporaryFile() throws -> FileDescriptor {
        let folder = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        #if os(Linux)
        let temporaryFile: Int32 = 0o20_000_000 | O_DIRECTORY  // O_TMPFILE
        let unnamed = open(folder, temporaryFile | O_RDWR | O_CLOEXEC, 0o600)
        if unnamed >= 0 { return FileDescriptor(rawValue: unnamed) }
        #endif
        var template = Array("\(folder)/docconvert.XXXXXX".utf8CString)
        let named = mkstemp(&template)
        guard named >= 0 else {
            throw DocumentError.io("cannot create a temporary file", path: FilePath(folder), errno: Errno(rawValue: errno))
        }
        _ = unlink(template)
        return FileDescriptor(rawValue: named)
    }

    /// The first `count` bytes of a regular file (fewer when it is shorter), without following a symbolic link;
    /// `nil` when it cannot be opened or read.
    static func prefix(of path: FilePath, count: Int) -> [UInt8]? {
        guard let descriptor = try? FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec]) else {
            return nil
        }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        return try? read(descriptor, at: 0, count: count, path: path)
    }

    /// Reads exactly `count` bytes at `offset`, or fewer at the end of the file.
    static func read(_ descriptor: FileDescriptor, at offset: Int64, count: Int, path: FilePath) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let filled = try bytes.withUnsafeMutableBytes { try read(descriptor, at: offset, into: $0, path: path) }
        return filled == count ? bytes : Array(bytes[0..<filled])
    }

    /// Fills `buffer` from `offset` on, or reads up to the end of the file; returns the bytes read.
    static func read(_ descriptor: FileDescriptor, at offset: Int64, into buffer: UnsafeMutableRawBufferPointer,
                     path: FilePath) throws -> Int {
        var filled = 0
        do {
            while filled < buffer.count {
                let got = try descriptor.read(fromAbsoluteOffset: offset + Int64(filled),
                                              into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
                if got == 0 { break }
                filled += got
            }
        } catch let error as Errno {
            throw DocumentError.io("cannot read the file", path: path, errno: error)
        }
        return filled
    }

    /// Writes all of `bytes`, retrying short writes.
    static func writeAll(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, path: FilePath) throws {
        do { try FileIO.write(descriptor, bytes, at: nil, path: path) } catch {
            throw DocumentError.io("cannot write the file", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// Takes an exclusive `flock(2)` on an open file. Returns `false` when another open file description holds it
    /// and `wait` is false. The lock dies with the descriptor and with the process.
    static func lockExclusively(_ descriptor: FileDescriptor, wait: Bool) -> Bool {
        while true {
            if flock(descriptor.rawValue, LOCK_EX | (wait ? 0 : LOCK_NB)) == 0 { return true }
            if errno == EINTR { continue }
            return false
        }
    }

    /// 8 lowercase hexadecimal characters for a temporary's name (`.<NAME>.<RANDOM>.partial`), from the system's
    /// random source in one `getrandom(2)` call (Foundation's `UUID()` opens, reads and closes `/dev/urandom`).
    static func randomSuffix() -> String {
        var generator = SystemRandomNumberGenerator()
        let text = String(generator.next() as UInt32, radix: 16)
        return String(repeating: "0", count: 8 - text.count) + text
    }

    /// A new random (version 4) UUID from the system's random source (`getrandom(2)`, no file opened).
    static func randomUUID() -> UUID {
        var generator = SystemRandomNumberGenerator()
        let high: UInt64 = generator.next(), low: UInt64 = generator.next()
        var bytes = withUnsafeBytes(of: (high, low)) { Array($0) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 4122 variant
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }
}

extension Sequence where Element == UInt8 {
    var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension SHA256.Digest {
    var hexString: String { Array(self).hexString }
}

/// Lowercase hexadecimal, as the metadata spells digests and CRC-32s.
enum Hex {
    /// The value of one lowercase hexadecimal digit; `nil` for any other character.
    static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case 0x30...0x39: return character - 0x30
        case 0x61...0x66: return character - 0x61 + 10
        default: return nil
        }
    }
}

/// Which file a descriptor reads and whether it has changed: device, inode, size, and the modification and status
/// change times to the nanosecond. Every write to the file changes its modification time, and every write, rename,
/// link or permission change its status change time, which no user tool can set back: while the identity is
/// the same, the file holds the bytes it held when the identity was taken.
struct FileIdentity: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modified: timespec
    var changed: timespec

    /// The identity of the file `descriptor` reads, now; `nil` when `fstat(2)` fails.
    init?(_ descriptor: FileDescriptor) {
        guard let status = FileSystem.Status(descriptor) else { return nil }
        self = status.identity
    }

    /// The identity of the file at `path` now (a symbolic link followed); `nil` when it cannot be opened.
    init?(at path: FilePath) {
        guard let descriptor = try? FileSystem.openForReading(path) else { return nil }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        self.init(descriptor)
    }

    /// The identity a file status describes.
    fileprivate init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modified = info.st_mtim
        changed = info.st_ctim
    }

    /// Whether the times are fine enough to tell two writes apart: a file system that keeps whole seconds (FAT,
    /// some network file systems) shows both times with no nanoseconds, and a rewrite within the same second
    /// would keep the identity. Such an identity proves nothing (one chance in 10^18 of being wrong the safe way).
    var hasFineTimes: Bool { modified.tv_nsec != 0 || changed.tv_nsec != 0 }

    /// Whether both name the same file (device and inode), whatever its content and times.
    func isSameFile(as other: FileIdentity) -> Bool { device == other.device && inode == other.inode }

    static func == (a: FileIdentity, b: FileIdentity) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }
}
