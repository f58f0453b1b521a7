import SystemPackage

extension FileSystem {
    /// Copies a file's bytes to a new file, returning their SHA-256 and size. The hash runs on a second thread
    /// (``ChunkPipeline``) while the next chunk is read and written.
    @_spi(Core)
    public static func copyFile(_ source: FilePath, to destination: FilePath) throws -> (sha256: String, size: Int64) {
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
        // > A size that cannot be read only sizes the pipeline: one chunk's worth.
        let expected = (try? Stat(input))?.size ?? Int64(ChunkPipeline.chunkSize)
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
}
