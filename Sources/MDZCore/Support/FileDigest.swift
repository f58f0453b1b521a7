import Crypto
import SystemPackage

/// The SHA-256 and size of a file's bytes, as the metadata records a file it lists.
@_spi(Core) public struct FileDigest: Equatable, Sendable {
    /// The SHA-256 of the bytes, in lowercase hexadecimal.
    @_spi(Core) public var sha256: String
    /// How many bytes were read.
    @_spi(Core) public var size: Int64

    /// The digest of the file at `path`, read in 1 MiB chunks; a symbolic link is not followed.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when nothing is there; ``DocumentError/Code/ioFailure`` when it
    ///   cannot be opened or read.
    @_spi(Core) public init(of path: FilePath) throws {
        let descriptor = try FileSystem.openForReading(path)
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
        self.sha256 = hasher.finalize().hexString
        self.size = size
    }
}
