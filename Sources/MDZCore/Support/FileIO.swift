#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// The one door through which the library changes files: every write, truncation, flush (`fsync`, `fdatasync`, a
/// folder's `fsync`), new name (a file made with a name, `link`, `linkat` of an unnamed file), `rename`, removal and
/// folder made or removed, in the zip writer, ``AtomicFile``, the overlay and its map, the converter's moves, the
/// batch's reports and the working copies. Each call is the system call and nothing more (a flush paced as its
/// thread asks), failing with its `Errno`.
///
/// An ``Observer`` (tests only, installed with ``observe(_:_:)``) sees each call before and after it runs: a
/// recorder builds the states a power cut can leave from them (CrashMonkey's and ALICE's approach), and an injector
/// fails a chosen call with the error it throws from ``Observer/willPerform(_:)`` (`ENOSPC`, `EIO`, `EMFILE`), as
/// the system would. With no observer installed, a call costs one uncontended lock more than the system call.
///
/// Each call reads `errno` inside the system call's closure (``Errno/failure(of:)``), before anything else runs. A
/// flush (`fsync`, `fdatasync`) runs as the calling thread's ``FlushPacing`` asks, in one place (`flush(_:)`).
@_spi(Core) public enum FileIO: Sendable {
    /// A change about to be made, or just made, as an observer sees it.
    @_spi(Core) public struct Event {
        /// Memberwise.
        @_spi(Core)
        public init(kind: Kind, path: FilePath, destination: FilePath? = nil, descriptor: FileDescriptor? = nil, offset: Int64 = 0, bytes: UnsafeRawBufferPointer? = nil, size: Int64 = 0) {
            self.kind = kind
            self.path = path
            self.destination = destination
            self.descriptor = descriptor
            self.offset = offset
            self.bytes = bytes
            self.size = size
        }

        @_spi(Core) public enum Kind: String, Sendable {
            /// `pwrite`/`write` of ``bytes`` at ``offset``.
            case write
            /// `ftruncate` to ``size``.
            case truncate
            /// `fsync` of a file: its data and metadata durable.
            case sync
            /// `fdatasync` of a file: its data and size durable.
            case dataSync
            /// A file opened with `O_CREAT` under ``path`` (new, or there already).
            case create
            /// A second name ``destination`` for ``path`` (`link`), or for an unnamed file (`linkat`, ``path`` empty).
            case link
            /// `rename` of ``path`` to ``destination``, replacing what is there.
            case rename
            /// `unlink` of ``path``.
            case unlink
            /// `mkdir` of ``path``.
            case makeDirectory
            /// `rmdir` of ``path``.
            case removeDirectory
            /// `fsync` of the folder ``path``: the names made, moved and removed in it durable.
            case syncDirectory
        }

        @_spi(Core) public let kind: Kind
        @_spi(Core) public let path: FilePath
        @_spi(Core) public var destination: FilePath? = nil
        /// The open file a write, truncation, flush or link acts on.
        @_spi(Core) public var descriptor: FileDescriptor? = nil
        /// Where a write starts in the file.
        @_spi(Core) public var offset: Int64 = 0
        /// What a write writes: valid during the observer's call only.
        @_spi(Core) public var bytes: UnsafeRawBufferPointer? = nil
        /// The size a truncation gives the file.
        @_spi(Core) public var size: Int64 = 0
    }

    /// Sees every change the library makes to files. Tests only.
    @_spi(Core) public protocol Observer: AnyObject, Sendable {
        /// Called before the change; an `Errno` thrown here fails it as the system would (nothing is changed).
        func willPerform(_ event: Event) throws
        /// Called once the change was made.
        func didPerform(_ event: Event)
    }

    private static let observer = Protected<(any Observer)?>(nil)

    /// Runs `body` with `observer` seeing every change the library makes to files, in every thread, then removes
    /// it. One observer at a time: a test that installs one runs alone (`.serialized`, its own process).
    @_spi(Core)
    public static func observe<T>(_ observer: any Observer, _ body: () async throws -> T) async rethrows -> T {
        self.observer.withLock { $0 = observer }
        defer { self.observer.withLock { $0 = nil } }
        return try await body()
    }

    /// The `Errno` an error of these calls is (they throw nothing else; `EIO` otherwise).
    @_spi(Core) public static func errno(of error: any Error) -> Errno { error as? Errno ?? .ioError }

    /// Calls the observer around `change`, which makes the system call and returns its `Errno` when it fails, read
    /// inside the call (``Errno/failure(of:)``). Throws `Errno` only.
    private static func perform(_ event: @autoclosure () -> Event, _ change: () -> Errno?) throws {
        guard let observer = observer.withLock({ $0 }) else {
            if let failure = change() { throw failure }
            return
        }
        let event = event()
        do { try observer.willPerform(event) } catch { throw errno(of: error) }
        if let failure = change() { throw failure }
        observer.didPerform(event)
    }

    /// Calls the observer around `call`, a change SQLite's default VFS makes to a file of a working copy's
    /// (``WorkingFilesVFS``: the journal, the WAL, an extracted store), which returns SQLite's result code (0: done).
    /// An `Errno` the observer throws is rethrown before `call` runs, for the caller to fail SQLite's call with; the
    /// observer sees the change made only when `call` returned 0.
    @_spi(Core) public static func observing(_ event: @autoclosure () -> Event, _ call: () -> Int32) throws -> Int32 {
        guard let observer = observer.withLock({ $0 }) else { return call() }
        let event = event()
        do { try observer.willPerform(event) } catch { throw errno(of: error) }
        let result = call()
        if result == 0 { observer.didPerform(event) }
        return result
    }

    /// Tells the observer of a change SQLite's default VFS made inside a call of its own that ``observing(_:_:)``
    /// reported already (the flush of a new journal's folder at the journal's first sync).
    @_spi(Core) public static func didPerform(_ event: @autoclosure () -> Event) {
        observer.withLock { $0 }?.didPerform(event())
    }

    // MARK: Files

    /// Writes all of `bytes` at `offset` (`pwrite(2)`, short writes retried), or at the file's position when
    /// `offset` is `nil` (`write(2)`).
    @_spi(Core)
    public static func write(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64?,
                              path: FilePath) throws {
        let start = offset ?? (observer.withLock({ $0 }) == nil ? 0 : Int64(lseek(descriptor.rawValue, 0, SEEK_CUR)))
        try perform(Event(kind: .write, path: path, descriptor: descriptor, offset: start, bytes: bytes)) {
            do {
                if let offset {
                    _ = try descriptor.writeAll(toAbsoluteOffset: offset, bytes)
                } else {
                    _ = try descriptor.writeAll(bytes)
                }
                return nil
            } catch {
                return errno(of: error)
            }
        }
    }

    /// `ftruncate(2)`.
    @_spi(Core) public static func resize(_ descriptor: FileDescriptor, to size: Int64, path: FilePath) throws {
        try perform(Event(kind: .truncate, path: path, descriptor: descriptor, size: size)) {
            Errno.failure(of: ftruncate(descriptor.rawValue, off_t(size)))
        }
    }

    /// `open(2)` with `O_CREAT` (and `options`): a file under `path`, made when missing.
    @_spi(Core) public static func create(_ path: FilePath, _ mode: FileDescriptor.AccessMode,
                               options: FileDescriptor.OpenOptions, permissions: FilePermissions) throws
        -> FileDescriptor {
        var opened: FileDescriptor?
        try perform(Event(kind: .create, path: path)) {
            do {
                opened = try FileDescriptor.open(path, mode, options: options.union(.create), permissions: permissions)
                return nil
            } catch {
                return errno(of: error)
            }
        }
        return opened!
    }

    // MARK: Flushes

    /// `fsync(2)` of a file (`isFolder`: of a folder, whose names it makes durable).
    @_spi(Core) public static func sync(_ descriptor: FileDescriptor, path: FilePath, isFolder: Bool = false) throws {
        try perform(Event(kind: isFolder ? .syncDirectory : .sync, path: path, descriptor: descriptor)) {
            flush { Errno.failure(of: fsync(descriptor.rawValue)) }
        }
    }

    /// `fdatasync(2)`: the file's bytes and size durable.
    @_spi(Core) public static func dataSync(_ descriptor: FileDescriptor, path: FilePath) throws {
        try perform(Event(kind: .dataSync, path: path, descriptor: descriptor)) {
            flush { Errno.failure(of: fdatasync(descriptor.rawValue)) }
        }
    }

    /// Runs `call`, one flush, as the calling thread's ``FlushPacing`` asks: the one place a flush consults it (a batch
    /// worker gives its CPU turn back while the disk works). The flush's `errno` is read inside `call`, before it.
    private static func flush(_ call: () -> Errno?) -> Errno? {
        FlushPacing.pacing(call)
    }

    // MARK: Names

    /// `link(2)`: a second name for `source`, failing with `EEXIST` when `destination` exists.
    @_spi(Core) public static func link(_ source: FilePath, to destination: FilePath) throws {
        try perform(Event(kind: .link, path: source, destination: destination)) {
            source.withPlatformString { from in
                destination.withPlatformString { to in Errno.failure(of: Glibc.link(from, to)) }
            }
        }
    }

    /// `linkat(2)` of the unnamed (`O_TMPFILE`) file `descriptor` under `destination`.
    @_spi(Core) public static func link(_ descriptor: FileDescriptor, to destination: FilePath) throws {
        try perform(Event(kind: .link, path: FilePath(), destination: destination, descriptor: descriptor)) {
            "/proc/self/fd/\(descriptor.rawValue)".withCString { unnamed in
                destination.withPlatformString {
                    Errno.failure(of: linkat(AT_FDCWD, unnamed, AT_FDCWD, $0, AT_SYMLINK_FOLLOW))
                }
            }
        }
    }

    /// `rename(2)`: `source` under the name `destination`, atomically replacing what is there.
    @_spi(Core) public static func rename(_ source: FilePath, to destination: FilePath) throws {
        try perform(Event(kind: .rename, path: source, destination: destination)) {
            source.withPlatformString { from in
                destination.withPlatformString { to in Errno.failure(of: Glibc.rename(from, to)) }
            }
        }
    }

    /// `renameat2(2)` with `RENAME_NOREPLACE`: `source` under the name `destination`, failing with `EEXIST` when
    /// something is there, and with `ENOSYS`, `EINVAL` or `ENOTSUP` where the C library, the kernel or the file
    /// system lacks it.
    @_spi(Core) public static func renameWithoutReplacing(_ source: FilePath, to destination: FilePath) throws {
        guard let renameat2 else { throw Errno.noFunction }
        try perform(Event(kind: .rename, path: source, destination: destination)) {
            source.withPlatformString { from in
                destination.withPlatformString { to in
                    Errno.failure(of: renameat2(AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */))
                }
            }
        }
    }

    private typealias RenameAt2 = @convention(c) (CInt, UnsafePointer<CChar>, CInt, UnsafePointer<CChar>, CUnsignedInt)
        -> CInt

    /// glibc's `renameat2` (2.28 and later), looked up once: the module Swift imports does not declare it (it is
    /// behind `_GNU_SOURCE`). `nil` where the C library has none.
    private static let renameat2: RenameAt2? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: RenameAt2.self)
    }()

    /// `unlink(2)`.
    @_spi(Core) public static func unlink(_ path: FilePath) throws {
        try perform(Event(kind: .unlink, path: path)) {
            path.withPlatformString { Errno.failure(of: Glibc.unlink($0)) }
        }
    }

    /// `mkdir(2)`.
    @_spi(Core) public static func makeDirectory(_ path: FilePath, mode: mode_t) throws {
        try perform(Event(kind: .makeDirectory, path: path)) {
            path.withPlatformString { Errno.failure(of: mkdir($0, mode)) }
        }
    }

    /// `rmdir(2)`.
    @_spi(Core) public static func removeDirectory(_ path: FilePath) throws {
        try perform(Event(kind: .removeDirectory, path: path)) {
            path.withPlatformString { Errno.failure(of: rmdir($0)) }
        }
    }
}
