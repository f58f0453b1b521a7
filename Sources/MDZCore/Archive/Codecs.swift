#if canImport(Glibc)
import Glibc
#endif
import CArchive

// The deflate engines, driven through their public APIs: ISA-L's `isal_zstream`/`inflate_state` and zlib's
// `z_stream`, with the fields and calls their headers document (`igzip_lib.h`, `zlib.h`). Each type owns one C
// state, allocated in `init` and freed in `deinit`, and is used from one thread at a time.

/// A zero-filled C state (these are tens of KiB: never built on the stack), freed with `free`.
private func zeroed<T>(_ type: T.Type) -> UnsafeMutablePointer<T>? {
    calloc(1, MemoryLayout<T>.size)?.bindMemory(to: T.self, capacity: 1)
}

/// Which engine deflates at a level: ISA-L (igzip) for 1-3, several times as fast as zlib, output a few percent
/// larger than zlib's level 6; zlib for 4-9. Both make ordinary deflate streams that every inflater reads.
@_spi(Core) public enum DeflateEngine: Sendable {
    /// Whether `level` is ISA-L's.
    @_spi(Core) public static func isFast(_ level: Int) -> Bool { level >= 1 && level <= Int(ISAL_DEF_MAX_LEVEL) }

    /// The engine's name at `level`, for messages.
    @_spi(Core) public static func name(forLevel level: Int) -> String { isFast(level) ? "ISA-L" : "zlib" }

    /// How many bytes `sample` deflates to at ISA-L's level 1, in one shot; `nil` when it cannot tell.
    @_spi(Core) public static func deflatedSize(of sample: UnsafeRawBufferPointer) -> Int? {
        guard let base = sample.baseAddress, sample.count <= 0x0FFF_FFFF else { return nil }  // a sample, never large
        let capacity = sample.count + sample.count >> 4 + 1024
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { output.deallocate() }
        var stream = isal_zstream()
        isal_deflate_stateless_init(&stream)
        stream.level = 1
        stream.end_of_stream = 1
        stream.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
        stream.avail_in = UInt32(sample.count)
        stream.next_out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
        stream.avail_out = UInt32(capacity)
        guard isal_deflate_stateless(&stream) == COMP_OK else { return nil }
        return Int(stream.total_out)
    }
}

/// Deflates one slice of a raw deflate stream made on several threads (the scheme of pigz).
///
/// Each slice is compressed by a stream of its own, primed with the 32 KiB of input before it (or not, where the
/// stream restarts), and ends with a sync flush (byte-aligned, not final) except the last, which ends the stream.
/// The slices laid end to end are one valid deflate stream. The engine follows the level (``DeflateEngine``); where
/// ISA-L's output does not fit the capacity zlib's always fits, that slice goes through zlib's level 1.
@_spi(Core) public final class SliceDeflater {
    /// Why a slice could not be compressed.
    @_spi(Core) public enum Failure: Error, Equatable, Sendable {
        /// The engine refused (an invalid level, a dictionary it would not take).
        case refused
        /// The output did not fit ``capacity(forSlice:)`` (never expected: the bound holds for any input).
        case overflow
    }

    @_spi(Core) public let level: Int
    private let isal: UnsafeMutablePointer<isal_zstream>?
    private let levelBuffer: UnsafeMutableRawBufferPointer?
    /// zlib's stream: for levels 4-9, and made on first need for ISA-L's slices that did not fit.
    private var zlib: UnsafeMutablePointer<z_stream>?
    private var zlibLevel: Int32 = 0

    /// A deflater for `level` (1-9); `nil` when its state cannot be allocated.
    @_spi(Core) public init?(level: Int) {
        self.level = level
        if DeflateEngine.isFast(level) {
            isal = zeroed(isal_zstream.self)
            levelBuffer = .allocate(byteCount: Int(carchive_isal_level_buffer_size(Int32(level))), alignment: 16)
        } else {
            isal = nil
            levelBuffer = nil
            guard makeZlib(level: Int32(level)) else { return nil }
        }
    }

    deinit {
        free(isal)
        levelBuffer?.deallocate()
        if let zlib {
            deflateEnd(zlib)
            free(zlib)
        }
    }

    /// The output capacity that always holds one compressed slice of `length` bytes, its flush marker included.
    @_spi(Core) public static func capacity(forSlice length: Int) -> Int { length + length >> 8 + 1024 }

    /// Compresses `input` (primed with `dictionary`, empty where the stream restarts) into `output`, which must
    /// hold ``capacity(forSlice:)`` bytes; returns the compressed length. `isLast` ends the stream.
    @_spi(Core) public func deflate(dictionary: UnsafeRawBufferPointer, input: UnsafeRawBufferPointer,
                 into output: UnsafeMutableRawBufferPointer, isLast: Bool) -> Result<Int, Failure> {
        if let isal, let levelBuffer {
            let result = deflateWithISAL(isal, levelBuffer, dictionary: dictionary, input: input, into: output,
                                         isLast: isLast)
            guard result == .failure(.overflow) else { return result }
            if zlib == nil, !makeZlib(level: 1) { return .failure(.refused) }
        }
        return deflateWithZlib(dictionary: dictionary, input: input, into: output, isLast: isLast)
    }

    private func makeZlib(level: Int32) -> Bool {
        guard let stream = zeroed(z_stream.self) else { return false }
        guard deflateInit2_(stream, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
                            Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            free(stream)
            return false
        }
        zlib = stream
        zlibLevel = level
        return true
    }

    private func deflateWithISAL(_ stream: UnsafeMutablePointer<isal_zstream>,
                                 _ levelBuffer: UnsafeMutableRawBufferPointer, dictionary: UnsafeRawBufferPointer,
                                 input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
                                 isLast: Bool) -> Result<Int, Failure> {
        isal_deflate_init(stream)
        stream.pointee.level = UInt32(level)
        stream.pointee.level_buf = levelBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
        stream.pointee.level_buf_size = UInt32(levelBuffer.count)
        if dictionary.count > 0 {
            let bytes = UnsafeMutablePointer(mutating: dictionary.baseAddress!.assumingMemoryBound(to: UInt8.self))
            guard isal_deflate_set_dict(stream, bytes, UInt32(dictionary.count)) == COMP_OK else {
                return .failure(.refused)
            }
        }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
        stream.pointee.avail_in = UInt32(input.count)
        stream.pointee.next_out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
        stream.pointee.avail_out = UInt32(output.count)
        stream.pointee.end_of_stream = isLast ? 1 : 0
        stream.pointee.flush = UInt16(isLast ? NO_FLUSH : SYNC_FLUSH)
        guard isal_deflate(stream) == COMP_OK else { return .failure(.refused) }
        // > isal_deflate returns when the input is used up or the output is full; igzip_lib.h: output space left
        // > over means every byte was taken and flushed (or, with end_of_stream, the stream was ended).
        guard stream.pointee.avail_in == 0, stream.pointee.avail_out > 0 else { return .failure(.overflow) }
        return .success(output.count - Int(stream.pointee.avail_out))
    }

    private func deflateWithZlib(dictionary: UnsafeRawBufferPointer, input: UnsafeRawBufferPointer,
                                 into output: UnsafeMutableRawBufferPointer, isLast: Bool) -> Result<Int, Failure> {
        guard let stream = zlib, deflateReset(stream) == Z_OK else { return .failure(.refused) }
        if dictionary.count > 0 {
            guard deflateSetDictionary(stream, dictionary.baseAddress!.assumingMemoryBound(to: Bytef.self),
                                       UInt32(dictionary.count)) == Z_OK else { return .failure(.refused) }
        }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = UInt32(input.count)
        stream.pointee.next_out = output.baseAddress!.assumingMemoryBound(to: Bytef.self)
        stream.pointee.avail_out = UInt32(output.count)
        let status = zlib_deflate(stream, isLast ? Z_FINISH : Z_SYNC_FLUSH)
        if isLast {
            guard status == Z_STREAM_END else {
                return .failure(status == Z_OK || status == Z_BUF_ERROR ? .overflow : .refused)
            }
        } else {
            guard status == Z_OK || status == Z_BUF_ERROR else { return .failure(.refused) }
            // > A full buffer may hide an unfinished flush.
            guard stream.pointee.avail_in == 0, stream.pointee.avail_out > 0 else { return .failure(.overflow) }
        }
        return .success(output.count - Int(stream.pointee.avail_out))
    }
}

/// zlib's `deflate`, by a name that does not clash with ``SliceDeflater/deflate(dictionary:input:into:isLast:)``.
private func zlib_deflate(_ stream: UnsafeMutablePointer<z_stream>, _ flush: Int32) -> Int32 { deflate(stream, flush) }

/// Inflates one segment of a raw deflate stream on its own (zlib).
///
/// A segment starts where the writer restarted deflate (no dictionary, a new block at a byte boundary) and, unless
/// it is the last, ends at a block boundary on a byte boundary outside the final block, so inflating it alone gives
/// exactly what inflating the whole stream gives there.
@_spi(Core) public final class SegmentInflater {
    /// Why a segment is not what a segment must be.
    @_spi(Core) public enum Failure: Error, Equatable, Sendable {
        /// Not valid deflate, or it reaches back before the segment's start (or the segment or its output is over
        /// 4 GiB, beyond zlib's 32-bit counts: never inflated).
        case invalid
        /// It inflates to more than the output holds.
        case overflow
        /// It does not end where a segment must: the last must end the stream with no byte after it; the others
        /// must stop at a block boundary on a byte boundary, outside the final block, with every input byte used.
        case misplacedEnd
    }

    private let stream: UnsafeMutablePointer<z_stream>

    /// An inflater; `nil` when zlib's state cannot be allocated.
    @_spi(Core) public init?() {
        guard let stream = zeroed(z_stream.self) else { return nil }
        guard inflateInit2_(stream, -15, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            free(stream)
            return nil
        }
        self.stream = stream
    }

    deinit {
        inflateEnd(stream)
        free(stream)
    }

    /// Inflates `input` into `output`; returns the bytes produced.
    @_spi(Core) public func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
                 isLast: Bool) -> Result<Int, Failure> {
        // > zlib counts in 32 bits; sizes come from a bundle's metadata: refused, never converted into a trap.
        guard let inputCount = UInt32(exactly: input.count), let outputCount = UInt32(exactly: output.count),
              inflateReset(stream) == Z_OK else { return .failure(.invalid) }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = inputCount
        stream.pointee.next_out = output.baseAddress?.assumingMemoryBound(to: Bytef.self)
        stream.pointee.avail_out = outputCount
        var status = Z_OK
        // > Z_BLOCK stops at every block boundary, so that data_type tells where the input ran out.
        while stream.pointee.avail_in > 0 {
            status = zlib_inflate(stream, Z_BLOCK)
            if status == Z_STREAM_END { break }
            if [Z_NEED_DICT, Z_DATA_ERROR, Z_MEM_ERROR, Z_STREAM_ERROR].contains(status) { return .failure(.invalid) }
            // > Headers and the end of a block need no output space, so a full buffer is an overflow only when
            // > zlib can make no progress at all (inflate at TYPE with Z_BLOCK moves on: it skips the check on entry).
            if status == Z_BUF_ERROR { return .failure(.overflow) }
        }
        let dataType = stream.pointee.data_type
        let isFinalBlock = dataType & 64 != 0
        let isAtBlockBoundary = dataType & 128 != 0
        // > Z_BLOCK stops at the end of the final block too; the next call (no input needed) reports the stream's end.
        if status != Z_STREAM_END && isFinalBlock && isAtBlockBoundary {
            status = zlib_inflate(stream, Z_BLOCK)
            guard status == Z_STREAM_END else { return .failure(.invalid) }
        }
        let produced = output.count - Int(stream.pointee.avail_out)
        if status == Z_STREAM_END {
            return isLast && stream.pointee.avail_in == 0 ? .success(produced) : .failure(.misplacedEnd)
        }
        guard !isLast, isAtBlockBoundary, !isFinalBlock, dataType & 7 == 0 else { return .failure(.misplacedEnd) }
        return .success(produced)
    }
}

/// zlib's `inflate`, by a name that does not clash with ``SegmentInflater/inflate(_:into:isLast:)``.
private func zlib_inflate(_ stream: UnsafeMutablePointer<z_stream>, _ flush: Int32) -> Int32 { inflate(stream, flush) }

/// One zip entry's raw deflate stream, inflated by ISA-L as it is read (entries without restart points).
///
/// The caller feeds the entry's compressed bytes in order (``feed(_:)``; they must stay in place until taken) and
/// takes the output; the stream must end exactly at the entry's end.
@_spi(Core) public final class StreamInflater {
    private let state: UnsafeMutablePointer<inflate_state>

    /// An inflater; `nil` when its state (about 70 KiB) cannot be allocated.
    @_spi(Core) public init?() {
        guard let state = zeroed(inflate_state.self) else { return nil }
        isal_inflate_init(state)
        self.state = state
    }

    deinit { free(state) }

    /// Starts a new stream.
    @_spi(Core) public func reset() { isal_inflate_reset(state) }

    /// Hands the next compressed bytes to the inflater: at most 4 GiB − 1 at a time (ISA-L counts in 32 bits; a
    /// caller that feeds more has a bug, and traps).
    @_spi(Core) public func feed(_ input: UnsafeRawBufferPointer) {
        precondition(input.count <= Int(UInt32.max), "ISA-L takes at most 4 GiB - 1 of input at a time")
        state.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
        state.pointee.avail_in = UInt32(input.count)
    }

    /// Compressed bytes fed and not yet taken.
    @_spi(Core) public var pending: Int { Int(state.pointee.avail_in) }

    /// Inflates into `output`: the bytes produced, and whether the stream has ended with all of its output produced;
    /// `nil` when the data is not valid deflate.
    @_spi(Core) public func inflate(into output: UnsafeMutableRawBufferPointer) -> (produced: Int, finished: Bool)? {
        // > ISA-L counts in 32 bits: a larger buffer is offered 4 GiB − 1 at a time (the callers loop).
        let offered = UInt32(clamping: output.count)
        state.pointee.next_out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
        state.pointee.avail_out = offered
        guard isal_inflate(state) >= 0 else { return nil }
        return (Int(offered - state.pointee.avail_out), state.pointee.block_state == ISAL_BLOCK_FINISH)
    }

    /// Whether the inflater stopped where a restart segment other than the last must end (FORMAT.md 11.4): at a
    /// block boundary on a byte boundary, outside the final block, every input byte taken and nothing held back
    /// (no bit read ahead, no header begun, no output buffered). Only then does the next segment, inflated on its
    /// own from the next byte, give what inflating the whole stream gives there: a stored block that runs on past
    /// the segment's end, a final block, or a header begun would make the two readings differ.
    @_spi(Core) public var isAtRestartBoundary: Bool {
        state.pointee.block_state == ISAL_BLOCK_NEW_HDR && state.pointee.bfinal == 0
            && state.pointee.avail_in == 0 && state.pointee.read_in_length == 0 && state.pointee.tmp_in_size == 0
            && state.pointee.tmp_out_valid == state.pointee.tmp_out_processed
    }

    /// Whether the stream has ended with all of its output produced and no whole byte after it (the last restart
    /// segment, or a whole entry).
    @_spi(Core) public var hasEndedExactly: Bool {
        state.pointee.block_state == ISAL_BLOCK_FINISH && !hasTrailingBytes
    }

    /// After the stream has ended: whether any whole byte of the fed input lies beyond it — not taken, read ahead
    /// into the bit buffer (`read_in_length` bits), or held back in ISA-L's input buffer (`tmp_in_size` bytes).
    @_spi(Core) public var hasTrailingBytes: Bool {
        state.pointee.avail_in > 0 || state.pointee.read_in_length >= 8 || state.pointee.tmp_in_size > 0
    }
}
