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
    @_spi(Core)
    public static func write(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64,
                      path: FilePath) throws {
        do { try FileIO.write(descriptor, bytes, at: offset, path: path) } catch {
            throw DocumentError.io("cannot write the file", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// Writes all of `bytes` at the file's position, retrying short writes.
    @_spi(Core)
    public static func writeAll(_ descriptor: FileDescriptor, _ bytes: UnsafeRawBufferPointer, path: FilePath) throws {
        do { try FileIO.write(descriptor, bytes, at: nil, path: path) } catch {
            throw DocumentError.io("cannot write the file", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// `ftruncate(2)`.
    @_spi(Core) public static func resize(_ descriptor: FileDescriptor, to size: Int64, path: FilePath) throws {
        do { try FileIO.resize(descriptor, to: size, path: path) } catch {
            throw DocumentError.io("cannot change the file's size", path: path, errno: FileIO.errno(of: error))
        }
    }

    /// The temporary folder: `TMPDIR`, else `/tmp`.
    @_spi(Core) public static var temporaryFolder: FilePath {
        FilePath(ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp")
    }

    /// Bytes an unprivileged writer may still add to the file system holding `descriptor` (`fstatvfs(2)`); `nil` when
    /// it cannot tell.
    @_spi(Core) public static func freeBytes(_ descriptor: FileDescriptor) -> UInt64? {
        var status = statvfs()
        guard fstatvfs(descriptor.rawValue, &status) == 0 else { return nil }
        let (bytes, overflow) = UInt64(status.f_bavail).multipliedReportingOverflow(by: UInt64(status.f_frsize))
        return overflow ? .max : bytes
    }

    /// A new file without a name in `folder` (`TMPDIR`, else `/tmp`, by default), for scratch data that must vanish
    /// with the process: `O_TMPFILE`, or where the file system has none a file unlinked before its first byte.
    @_spi(Core)
    public static func unnamedTemporaryFile(in folderPath: FilePath = temporaryFolder) throws -> FileDescriptor {
        let folder = folderPath.string
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
