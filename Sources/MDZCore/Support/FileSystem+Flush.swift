import SystemPackage

extension FileSystem {
    /// `fsync(2)` on an open descriptor: the file's bytes and metadata made durable.
    @_spi(Core) public static func sync(_ descriptor: FileDescriptor, path: FilePath) throws {
        do { try FileIO.sync(descriptor, path: path) } catch {
            throw DocumentError.io("cannot flush the file to disk", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// `fdatasync(2)` on an open descriptor: the file's bytes and size made durable.
    @_spi(Core) public static func dataSync(_ descriptor: FileDescriptor, path: FilePath) throws {
        do { try FileIO.dataSync(descriptor, path: path) } catch {
            throw DocumentError.io("cannot flush the file to disk", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// Makes every change made to a folder so far durable (a rename, a new or a removed name): returns once a flush of
    /// the folder that started after the call has ended, this call's own or one it shares with other threads that
    /// changed the same folder at about the same time (``FolderFlushes``).
    @_spi(Core) public static func syncDirectory(_ directory: FilePath) throws {
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
}
