import CArchive

/// A libarchive call that did not return `ARCHIVE_OK`.
///
/// Internal: it travels as the ``DocumentError/underlyingError`` of the public error.
@_spi(Core) public struct ArchiveFailure: Error, Sendable, CustomStringConvertible {
    @_spi(Core) public var status: Int32
    @_spi(Core) public var operation: String
    @_spi(Core) public var errno: Int32
    @_spi(Core) public var message: String?

    @_spi(Core)
    public static let outOfMemory = ArchiveFailure(status: ARCHIVE_FATAL, operation: "allocate a libarchive handle",
                                            errno: 12, message: "out of memory")

    /// Reads the handle's error state; call it before the next call on the handle.
    @_spi(Core) public init(status: Int32, operation: String, handle: OpaquePointer) {
        self.status = status
        self.operation = operation
        self.errno = archive_errno(handle)
        self.message = archive_error_string(handle).map { String(cString: $0) }  // may be NULL
    }

    @_spi(Core) public init(status: Int32, operation: String, errno: Int32, message: String?) {
        self.status = status
        self.operation = operation
        self.errno = errno
        self.message = message
    }

    @_spi(Core) public var description: String {
        "libarchive could not \(operation): \(message ?? "status \(status)")"
    }
}
