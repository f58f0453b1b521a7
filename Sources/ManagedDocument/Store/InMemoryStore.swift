#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// A small store's bytes, read whole into memory of their own: SQLite checks them there (``StoreInspector/openInMemory(_:)``)
/// and the bundle packs them, so the store is read once and what is packed is exactly what was checked.
///
/// The memory is mapped for the image alone and unmapped when it goes: a batch reads one such image per store, and
/// heap blocks of a few hundred KiB freed by several threads would stay with the allocator's arenas.
final class InMemoryStore: StoreReader, @unchecked Sendable {  // its bytes never change once read
    /// The bytes (`count` of them), valid while the store lives.
    let bytes: UnsafeRawBufferPointer
    /// The file they were read from.
    let origin: FilePath
    private let mapping: UnsafeMutableRawPointer

    /// Reads `count` bytes from `descriptor` (from offset 0); `nil` when the file does not hold exactly that many.
    ///
    /// - Throws: ``DocumentError/Code/ioFailure`` when the memory cannot be had or the file cannot be read.
    init?(reading count: Int, from descriptor: FileDescriptor, path: FilePath) throws {
        // > One byte more than expected is asked for: a file that grew is told apart from one that did not.
        let length = count + 1
        guard let mapping = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              mapping != MAP_FAILED else {
            throw DocumentError.io("cannot get memory to read the store", path: path, errno: Errno(rawValue: errno))
        }
        let buffer = UnsafeMutableRawBufferPointer(start: mapping, count: length)
        let filled: Int
        do {
            filled = try FileSystem.read(descriptor, at: 0, into: buffer, path: path)
        } catch {
            munmap(mapping, length)
            throw error
        }
        guard filled == count else {
            munmap(mapping, length)
            return nil
        }
        self.mapping = mapping
        bytes = UnsafeRawBufferPointer(start: mapping, count: count)
        origin = path
    }

    var size: Int64 { Int64(bytes.count) }

    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        guard offset >= 0, offset < size, count > 0 else { return 0 }
        let take = min(count, bytes.count - Int(offset))
        buffer.copyMemory(from: bytes.baseAddress! + Int(offset), byteCount: take)
        return take
    }

    /// The whole file at `path` when it holds at most `limit` bytes; `nil` when it holds more.
    ///
    /// - Throws: ``DocumentError/Code/ioFailure`` when the file cannot be read, or changed size while it was read.
    static func whole(_ path: FilePath, atMost limit: Int64) throws -> InMemoryStore? {
        let descriptor = try FileSystem.openForReading(path)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        let status = try FileSystem.status(of: descriptor, path: path, reason: "cannot read the store's status")
        guard status.size > 0, status.size <= limit else { return nil }
        guard let image = try InMemoryStore(reading: Int(status.size), from: descriptor, path: path) else {
            throw DocumentError.io("the store changed size while it was read", path: path, errno: nil)
        }
        return image
    }

    deinit { munmap(mapping, bytes.count + 1) }
}
