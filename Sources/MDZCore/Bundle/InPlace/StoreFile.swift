import SystemPackage

/// An extracted store file, read with `pread` (a bundle that cannot be served in place, reloaded into an open
/// read-only document).
@_spi(Core) public final class StoreFile: StoreSource {
    @_spi(Core) public let origin: FilePath
    @_spi(Core) public let size: Int64
    private let descriptor: FileDescriptor
    private let firstFailure = FirstFailure()

    @_spi(Core) public init(_ path: FilePath) throws {
        descriptor = try FileSystem.openForReading(path)
        origin = path
        guard let status = try FileSystem.status(path) else {
            throw DocumentError(.notFound, path: path, reason: "no such file")
        }
        size = status.size
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

    @_spi(Core) public func fail(_ error: DocumentError) { firstFailure.record(error) }

    @_spi(Core) public var failure: DocumentError? { firstFailure.error }
}
