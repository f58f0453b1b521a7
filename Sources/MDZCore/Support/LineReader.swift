import SystemPackage

/// Reads a file of lines (JSON lines: a plan, a report, a spool) from an offset on, in bounded memory: one chunk and
/// at most one line of ``maxLineLength`` bytes are held at a time.
@_spi(Core) public struct LineReader: Sendable {
    /// One line, without its newline.
    @_spi(Core) public struct Line: Sendable {
        @_spi(Core) public var bytes: ArraySlice<UInt8>
        /// The line's first byte's offset in the file.
        @_spi(Core) public var offset: Int64
        /// Whether a newline ended it (the last line of a file cut short has none).
        @_spi(Core) public var isTerminated: Bool
    }

    @_spi(Core) public static let chunkSize = 1 << 20

    @_spi(Core) public let descriptor: FileDescriptor
    @_spi(Core) public let path: FilePath
    @_spi(Core) public let maxLineLength: Int
    private var buffer: [UInt8] = []
    private var start = 0
    /// The file offset of `buffer[0]`.
    private var bufferOffset: Int64
    private var atEnd = false

    /// A reader of `descriptor` (not closed by the reader) from `offset` on.
    @_spi(Core)
    public init(_ descriptor: FileDescriptor, path: FilePath, from offset: Int64 = 0, maxLineLength: Int = 1 << 20) {
        self.descriptor = descriptor
        self.path = path
        self.maxLineLength = maxLineLength
        bufferOffset = offset
    }

    /// The next line; `nil` at the end of the file.
    ///
    /// - Throws: ``DocumentError/Code/limitExceeded`` for a line longer than ``maxLineLength``;
    ///   ``DocumentError/Code/ioFailure`` when the file cannot be read.
    @_spi(Core) public mutating func next() throws -> Line? {
        var searched = start
        while true {
            if let newline = buffer[searched...].firstIndex(of: UInt8(ascii: "\n")) {
                defer { start = newline + 1 }
                return Line(bytes: buffer[start..<newline], offset: bufferOffset + Int64(start), isTerminated: true)
            }
            if atEnd {
                guard start < buffer.count else { return nil }
                defer { start = buffer.count }
                return Line(bytes: buffer[start...], offset: bufferOffset + Int64(start), isTerminated: false)
            }
            guard buffer.count - start <= maxLineLength else {
                throw DocumentError(.limitExceeded, path: path,
                                    reason: "has a line longer than \(maxLineLength) bytes at offset \(bufferOffset + Int64(start))")
            }
            if start > 0 {
                buffer.removeFirst(start)
                bufferOffset += Int64(start)
                start = 0
            }
            searched = buffer.count
            let chunk = try FileSystem.read(descriptor, at: bufferOffset + Int64(buffer.count), count: Self.chunkSize,
                                            path: path)
            if chunk.count < Self.chunkSize { atEnd = true }
            buffer += chunk
        }
    }
}
