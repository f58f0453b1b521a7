#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CArchive
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage

/// Walks a zip archive's entries through libarchive's seekable zip reader (entries from the central directory, each
/// local header read as libarchive reads it). ``BundleReader`` walks every bundle it streams this way, so that a
/// bundle libarchive reads differently from its own parse is refused; the entries' data is read by ``EntryReader``
/// and ``ParallelInflater`` at the offsets ``BundleReader`` validated.
///
/// libarchive reads the descriptor it is given with positional reads (`pread(2)`) at a position of its own, never
/// the path: a bundle replaced under its name while it is read (a save beside a reader) cannot hand it another
/// file's bytes, and other readers of the same descriptor are not disturbed.
///
/// Names and sizes it reports are untrusted; ``BundleReader`` checks them against the directory it validated.
/// Not `Sendable`: a libarchive handle belongs to one task.
@_spi(Core) public final class ArchiveReader {
    @_spi(Core) public struct Header: Sendable {
        @_spi(Core) public var rawName: [UInt8]
        @_spi(Core) public var isRegularFile: Bool
        @_spi(Core) public var isDirectory: Bool
        @_spi(Core) public var isEncrypted: Bool
    }

    /// What libarchive's callbacks read through: the descriptor, libarchive's position in it, and one buffer.
    private final class Source {
        @_spi(Core) public static let bufferSize = 1 << 16
        @_spi(Core) public let descriptor: Int32
        @_spi(Core) public let size: Int64
        @_spi(Core) public var position: Int64 = 0
        @_spi(Core) public let buffer = UnsafeMutableRawPointer.allocate(byteCount: Source.bufferSize, alignment: 16)

        @_spi(Core) public init(descriptor: Int32, size: Int64) {
            self.descriptor = descriptor
            self.size = size
        }

        deinit { buffer.deallocate() }
    }

    private let handle: OpaquePointer  // struct archive *
    private let path: FilePath
    private let source: Source
    @_spi(Core) public private(set) var currentName: String?

    /// Opens the archive in `descriptor` (which stays the caller's: it is never closed here).
    @_spi(Core) public init(descriptor: FileDescriptor, size: UInt64, path: FilePath) throws {
        guard let handle = archive_read_new() else { throw ArchiveFailure.outOfMemory }
        self.handle = handle  // from here on deinit frees it, even if init throws
        self.path = path
        self.source = Source(descriptor: descriptor.rawValue, size: Int64(clamping: size))
        try Self.inUTF8Locale { try open(handle) }
    }

    private func open(_ handle: OpaquePointer) throws {
        // > The seekable reader takes entries from the central directory; the streaming one guesses from local headers.
        try check(archive_read_support_format_zip_seekable(handle), "enable the zip reader")
        try check(archive_read_set_read_callback(handle, { _, context, buffer in
            let source = Unmanaged<Source>.fromOpaque(context!).takeUnretainedValue()
            while true {
                let count = pread(source.descriptor, source.buffer, Source.bufferSize, off_t(source.position))
                if count < 0 && errno == EINTR { continue }
                if count < 0 { return -1 }  // libarchive reports a fatal read error; errno says why
                source.position += Int64(count)
                buffer?.pointee = UnsafeRawPointer(source.buffer)
                return count
            }
        }), "set the read callback")
        try check(archive_read_set_seek_callback(handle, { _, context, offset, whence in
            let source = Unmanaged<Source>.fromOpaque(context!).takeUnretainedValue()
            let base: Int64
            switch whence {
            case SEEK_SET: base = 0
            case SEEK_CUR: base = source.position
            case SEEK_END: base = source.size
            default: return Int64(ARCHIVE_FATAL)
            }
            let (target, overflow) = base.addingReportingOverflow(offset)
            guard !overflow, target >= 0 else { return Int64(ARCHIVE_FATAL) }
            source.position = target
            return target
        }), "set the seek callback")
        try check(archive_read_set_skip_callback(handle, { _, context, request in
            let source = Unmanaged<Source>.fromOpaque(context!).takeUnretainedValue()
            let skipped = max(0, min(request, source.size - source.position))
            source.position += skipped
            return skipped
        }), "set the skip callback")
        try check(archive_read_set_callback_data(handle, Unmanaged.passUnretained(source).toOpaque()),
                  "set the callback data")
        try check(archive_read_open1(handle), "open the archive")
    }

    deinit { archive_read_free(handle) }

    /// The C.UTF-8 locale for this thread (`uselocale`), made once; `nil` where the C library has none.
    // A locale object is never changed after newlocale(3); threads only install it with uselocale(3).
    nonisolated(unsafe) private static let utf8Locale: locale_t? = newlocale(LC_CTYPE_MASK, "C.UTF-8", nil)

    /// Runs `body` with this thread's character type in UTF-8, so that libarchive reads a UTF-8 entry name (flag
    /// bit 11, as python's zipfile writes non-ASCII names) as the UTF-8 it is, whatever the process's locale (a
    /// program that never called `setlocale` runs in "C", where libarchive cannot convert it and fails the header).
    /// Only this thread's locale changes, and only for the call.
    private static func inUTF8Locale<T>(_ body: () throws -> T) rethrows -> T {
        guard let utf8Locale else { return try body() }
        let previous = uselocale(utf8Locale)
        defer { uselocale(previous) }
        return try body()
    }

    /// The next entry's header, or `nil` at the end of the archive (`ARCHIVE_EOF`).
    @_spi(Core) public func nextEntry() throws -> Header? {
        var entry: OpaquePointer?
        currentName = nil  // an error reading this header must not name the previous entry
        let status = Self.inUTF8Locale { archive_read_next_header(handle, &entry) }
        if status == ARCHIVE_EOF { return nil }
        guard status == ARCHIVE_OK, let entry else {
            throw failure(status, "read the next entry header")
        }
        var rawName: [UInt8] = []
        if let name = archive_entry_pathname(entry) {
            rawName = Array(UnsafeBufferPointer(start: UnsafeRawPointer(name).assumingMemoryBound(to: UInt8.self),
                                                count: strlen(name)))
        }
        currentName = String(decoding: rawName, as: UTF8.self)
        let type = UInt32(archive_entry_filetype(entry))
        return Header(rawName: rawName, isRegularFile: type == carchive_ae_ifreg(),
                      isDirectory: type == carchive_ae_ifdir(), isEncrypted: archive_entry_is_encrypted(entry) != 0)
    }

    private func check(_ status: Int32, _ operation: String) throws {
        guard status != ARCHIVE_OK else { return }
        throw failure(status, operation)
    }

    private func failure(_ status: Int32, _ operation: String) -> DocumentError {
        let underlying = ArchiveFailure(status: status, operation: operation, handle: handle)
        let message = (underlying.message ?? "").lowercased()
        var code: DocumentError.Code = .corruptArchive
        var reason = "the archive is damaged; restore it from a backup"
        if message.contains("crc") {
            code = .checksumMismatch
            reason = "the entry's CRC-32 does not match its data; the bundle is damaged, restore it from a backup"
        } else if message.contains("truncated") {
            code = .truncatedArchive
            reason = "the archive ends before the entry's data does; the bundle is truncated"
        } else if underlying.errno != 0 && status == ARCHIVE_FATAL && message.isEmpty {
            code = .ioFailure
            reason = "cannot read the archive"
        }
        return DocumentError(code, path: path, entry: currentName, reason: reason, underlyingError: underlying)
    }
}
