#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CArchive
import Foundation
import SystemPackage

/// Walks a zip archive's entries through libarchive's seekable zip reader (entries from the central directory, each
/// local header read as libarchive reads it). ``BundleReader`` walks every bundle it streams this way, so that a
/// bundle libarchive reads differently from its own parse is refused; the entries' data is read by ``EntryReader``
/// and ``ParallelInflater`` at the offsets ``BundleReader`` validated.
///
/// Names and sizes it reports are untrusted; ``BundleReader`` checks them against the directory it validated.
/// Not `Sendable`: a libarchive handle belongs to one task.
final class ArchiveReader {
    struct Header {
        var rawName: [UInt8]
        var isRegularFile: Bool
        var isDirectory: Bool
        var isEncrypted: Bool
    }

    private let handle: OpaquePointer  // struct archive *
    private let path: FilePath
    private(set) var currentName: String?

    init(path: FilePath) throws {
        guard let handle = archive_read_new() else { throw ArchiveFailure.outOfMemory }
        self.handle = handle  // from here on deinit frees it, even if init throws
        self.path = path
        // > The seekable reader takes entries from the central directory; the streaming one guesses from local headers.
        try check(archive_read_support_format_zip_seekable(handle), "enable the zip reader")
        try check(path.withPlatformString { archive_read_open_filename(handle, $0, 1 << 16) }, "open the archive")
    }

    deinit { archive_read_free(handle) }

    /// The next entry's header, or `nil` at the end of the archive (`ARCHIVE_EOF`).
    func nextEntry() throws -> Header? {
        var entry: OpaquePointer?
        currentName = nil  // an error reading this header must not name the previous entry
        let status = archive_read_next_header(handle, &entry)
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
        let message = underlying.message ?? ""
        var code: DocumentError.Code = .corruptArchive
        var reason = "the archive is damaged; restore it from a backup"
        if message.localizedCaseInsensitiveContains("crc") {
            code = .checksumMismatch
            reason = "the entry's CRC-32 does not match its data; the bundle is damaged, restore it from a backup"
        } else if message.localizedCaseInsensitiveContains("truncated") {
            code = .truncatedArchive
            reason = "the archive ends before the entry's data does; the bundle is truncated"
        } else if underlying.errno != 0 && status == ARCHIVE_FATAL && message.isEmpty {
            code = .ioFailure
            reason = "cannot read the archive"
        }
        return DocumentError(code, path: path, entry: currentName, reason: reason, underlyingError: underlying)
    }
}
