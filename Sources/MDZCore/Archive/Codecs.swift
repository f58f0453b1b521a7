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
