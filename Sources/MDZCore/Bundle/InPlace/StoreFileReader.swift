#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// A store file read with `pread` through one descriptor, closed when the last user lets go: an extracted store
/// SQLite is served (a bundle that cannot be served in place), a working copy's store read for its change counter,
/// or a file a save packs.
@_spi(Core) public final class StoreFileReader: ServedStore {
    @_spi(Core) public let origin: FilePath
    @_spi(Core) public let size: Int64
    private let descriptor: FileDescriptor
    private let firstFailure = FirstFailure()

    @_spi(Core) public init(_ path: FilePath) throws {
        let descriptor = try FileSystem.openForReading(path)
        do {
            size = try FileSystem.status(of: descriptor, path: path, reason: "cannot read the store's status").size
        } catch {
            try? descriptor.close()  // Squash close error of a read-only descriptor.
            throw error
        }
        self.descriptor = descriptor
        origin = path
    }

    /// The store in `descriptor` (an unnamed extracted file, owned from now on), `size` bytes; `origin` names it in
    /// errors.
    @_spi(Core) public init(descriptor: FileDescriptor, size: Int64, origin: FilePath) {
        self.descriptor = descriptor
        self.size = size
        self.origin = origin
    }

    deinit { try? descriptor.close() }  // Squash close error of a read-only descriptor.

    @_spi(Core) public func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        try FileSystem.read(descriptor, at: offset, into: UnsafeMutableRawBufferPointer(start: buffer, count: count),
                            path: origin)
    }

    @_spi(Core) public func adviseSequential() {
        _ = posix_fadvise(descriptor.rawValue, 0, 0, POSIX_FADV_SEQUENTIAL)
        _ = posix_fadvise(descriptor.rawValue, 0, 0, POSIX_FADV_WILLNEED)
    }

    @_spi(Core) public func fail(_ error: DocumentError) { firstFailure.record(error) }

    @_spi(Core) public var failure: DocumentError? { firstFailure.error }
}
