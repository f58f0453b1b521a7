#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

extension FileSystem {
    /// `pwrite(2)` of all of `bytes` at `offset`.
    static func write(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64,
                      path: FilePath) throws {
        do { try FileIO.write(descriptor, bytes, at: offset, path: path) } catch {
            throw DocumentError.io("cannot write the file", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// Writes all of `bytes` at the file's position, retrying short writes.
    static func writeAll(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, path: FilePath) throws {
        do { try FileIO.write(descriptor, bytes, at: nil, path: path) } catch {
            throw DocumentError.io("cannot write the file", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// `ftruncate(2)`.
    static func resize(_ descriptor: FileDescriptor, to size: Int64, path: FilePath) throws {
        do { try FileIO.resize(descriptor, to: size, path: path) } catch {
            throw DocumentError.io("cannot change the file's size", path: path, errno: FileIO.errno(of: error))
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
        let made = template.withUnsafeMutableBufferPointer { buffer -> Result<CInt, Errno> in
            guard let name = buffer.baseAddress else { return .failure(.invalidArgument) }  // never: it holds a NUL
            let named = mkstemp(name)
            return named >= 0 ? .success(named) : .failure(.current)
        }
        let named: CInt
        do { named = try made.get() } catch {
            throw DocumentError.io("cannot create a temporary file", path: FilePath(folder), errno: error)
        }
        _ = unlink(template)
        return FileDescriptor(rawValue: named)
    }
}
