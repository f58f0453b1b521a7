import SystemPackage

extension FileSystem {
    /// Opens a file for reading, without following a symbolic link.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when nothing is there; ``DocumentError/Code/ioFailure`` otherwise.
    @_spi(Core) public static func openForReading(_ path: FilePath) throws -> FileDescriptor {
        do {
            return try FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec])
        } catch let error as Errno {
            if error == .noSuchFileOrDirectory {
                throw DocumentError(.notFound, path: path, reason: "no such file", underlyingError: error)
            }
            throw DocumentError.io("cannot open the file", path: path, errno: error)
        }
    }

    /// The first `count` bytes of a regular file (fewer when it is shorter), without following a symbolic link;
    /// `nil` when it cannot be opened or read. Opened without blocking: a FIFO with no writer (a name anyone may
    /// create) gives no bytes at once instead of waiting forever.
    @_spi(Core) public static func prefix(of path: FilePath, count: Int) -> [UInt8]? {
        guard let descriptor = try? FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec, .nonBlocking])
        else {
            return nil
        }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        return try? read(descriptor, at: 0, count: count, path: path)
    }

    /// Reads exactly `count` bytes at `offset`, or fewer at the end of the file.
    @_spi(Core)
    public static func read(_ descriptor: FileDescriptor, at offset: Int64, count: Int, path: FilePath) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let filled = try bytes.withUnsafeMutableBytes { try read(descriptor, at: offset, into: $0, path: path) }
        return filled == count ? bytes : Array(bytes[0..<filled])
    }

    /// Fills `buffer` from `offset` on, or reads up to the end of the file; returns the bytes read.
    @_spi(Core)
    public static func read(_ descriptor: FileDescriptor, at offset: Int64, into buffer: UnsafeMutableRawBufferPointer,
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
}

/// An open file's descriptor, closed when its last holder lets it go: a bundle's reader and the connections serving
/// its store share one, and a connection keeps the file open without keeping the reader.
@_spi(Core) public final class OpenFile: Sendable {
    @_spi(Core) public let descriptor: FileDescriptor

    @_spi(Core) public init(_ descriptor: FileDescriptor) { self.descriptor = descriptor }

    deinit { try? descriptor.close() }  // Squash close error of a read-only descriptor.
}
