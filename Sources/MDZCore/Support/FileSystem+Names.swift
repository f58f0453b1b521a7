#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

extension FileSystem {
    /// `rename(2)`: atomically replaces `destination` with `source` (same file system).
    @_spi(Core) public static func rename(_ source: FilePath, to destination: FilePath) throws {
        do { try FileIO.rename(source, to: destination) } catch {
            throw DocumentError.io("cannot move \(source) into place", path: destination, errno: FileIO.errno(of: error))
        }
    }

    /// `link(2)`: gives `source` a second name, failing when `destination` exists (a rename that never replaces).
    @_spi(Core) public static func link(_ source: FilePath, to destination: FilePath) throws {
        do { try FileIO.link(source, to: destination) } catch {
            let error = FileIO.errno(of: error)
            if error == .fileExists {
                throw DocumentError(.alreadyExists, path: destination, reason: "already exists; choose another name")
            }
            throw DocumentError(.cannotCreate, path: destination, reason: "cannot create the file", underlyingError: error)
        }
    }

    /// Removes a file; a file that is already gone is not an error.
    @_spi(Core) public static func removeFile(_ path: FilePath) throws {
        do { try FileIO.unlink(path) } catch {
            let error = FileIO.errno(of: error)
            guard error == .noSuchFileOrDirectory else {
                throw DocumentError.io("cannot remove the file", path: path, errno: error)
            }
        }
    }

    /// Removes a file tree without following symbolic links.
    @_spi(Core) public static func removeTree(_ path: FilePath) throws {
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
    @_spi(Core) public static func entryName(_ entry: UnsafeMutablePointer<dirent>) -> UnsafePointer<CChar> {
        (UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \dirent.d_name)!).assumingMemoryBound(to: CChar.self)
    }

    /// The names in a folder, sorted, without `.` and `..`.
    @_spi(Core) public static func contentsOfDirectory(_ path: FilePath) throws -> [String] {
        let opened = path.withPlatformString { name -> Result<OpaquePointer, Errno> in
            guard let directory = opendir(name) else { return .failure(.current) }
            return .success(directory)
        }
        let directory: OpaquePointer
        do { directory = try opened.get() } catch {
            throw DocumentError.io("cannot list the folder", path: path, errno: error)
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
    @_spi(Core) public static func createDirectory(_ path: FilePath, mode: mode_t = 0o755) throws {
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
    @_spi(Core) public static func makeTemporaryDirectory(in parent: FilePath, prefix: String) throws -> FilePath {
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

    /// 8 lowercase hexadecimal characters for a temporary's name (`.<NAME>.<RANDOM>.partial`), from the system's
    /// random source in one `getrandom(2)` call (Foundation's `UUID()` opens, reads and closes `/dev/urandom`).
    @_spi(Core) public static func randomSuffix() -> String {
        var generator = SystemRandomNumberGenerator()
        let text = String(generator.next() as UInt32, radix: 16)
        return String(repeating: "0", count: 8 - text.count) + text
    }
}
