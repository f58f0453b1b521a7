import SystemPackage

/// An extracted store file, read with `pread` (a bundle that cannot be served in place, reloaded into an open
/// read-only document).
final class StoreFile: StoreSource {
    let origin: FilePath
    let size: Int64
    private let descriptor: FileDescriptor
    private let firstFailure = FirstFailure()

    init(_ path: FilePath) throws {
        descriptor = try FileSystem.openForReading(path)
        origin = path
        guard let status = try FileSystem.status(path) else {
            throw DocumentError(.notFound, path: path, reason: "no such file")
        }
        size = status.size
    }

    /// The store in `descriptor` (an unnamed extracted file, owned from now on), `size` bytes; `origin` names it in
    /// errors.
    init(descriptor: FileDescriptor, size: Int64, origin: FilePath) {
        self.descriptor = descriptor
        self.size = size
        self.origin = origin
    }

    deinit { try? descriptor.close() }  // Squash close error of a read-only descriptor.

    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        try FileSystem.read(descriptor, at: offset, into: UnsafeMutableRawBufferPointer(start: buffer, count: count),
                            path: origin)
    }

    func fail(_ error: DocumentError) { firstFailure.record(error) }

    var failure: DocumentError? { firstFailure.error }
}
