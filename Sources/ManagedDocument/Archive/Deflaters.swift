#if canImport(Glibc)
import Glibc
#endif
import CArchive
@_spi(Core) import MDZCore

// The deflate engines' writing side, driven through their public APIs (ISA-L's `isal_zstream`, zlib's `z_stream`);
// the inflaters, which readers need, are the core's (MDZCore's `Codecs.swift`).

/// A zero-filled C state (these are tens of KiB: never built on the stack), freed with `free`.
private func zeroed<T>(_ type: T.Type) -> UnsafeMutablePointer<T>? {
    calloc(1, MemoryLayout<T>.size)?.bindMemory(to: T.self, capacity: 1)
}

/// Which engine deflates at a level: ISA-L (igzip) for 1-3, several times as fast as zlib, output a few percent
/// larger than zlib's level 6; zlib for 4-9. Both make ordinary deflate streams that every inflater reads.
enum DeflateEngine: Sendable {
    /// Whether `level` is ISA-L's.
    static func isFast(_ level: Int) -> Bool { level >= 1 && level <= Int(ISAL_DEF_MAX_LEVEL) }

    /// The engine's name at `level`, for messages.
    static func name(forLevel level: Int) -> String { isFast(level) ? "ISA-L" : "zlib" }

    /// How many bytes `sample` deflates to at ISA-L's level 1, in one shot; `nil` when it cannot tell.
    static func deflatedSize(of sample: UnsafeRawBufferPointer) -> Int? {
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
final class SliceDeflater {
    /// Why a slice could not be compressed.
    enum Failure: Error, Equatable, Sendable {
        /// The engine refused (an invalid level, a dictionary it would not take).
        case refused
        /// The output did not fit ``capacity(forSlice:)`` (never expected: the bound holds for any input).
        case overflow
    }

    let level: Int
    private let isal: UnsafeMutablePointer<isal_zstream>?
    private let levelBuffer: UnsafeMutableRawBufferPointer?
    /// zlib's stream: for levels 4-9, and made on first need for ISA-L's slices that did not fit.
    private var zlib: UnsafeMutablePointer<z_stream>?
    private var zlibLevel: Int32 = 0

    /// A deflater for `level` (1-9); `nil` when its state cannot be allocated.
    init?(level: Int) {
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
    static func capacity(forSlice length: Int) -> Int { DeflateBounds.outputCapacity(forSlice: length) }

    /// Compresses `input` (primed with `dictionary`, empty where the stream restarts) into `output`, which must
    /// hold ``capacity(forSlice:)`` bytes; returns the compressed length. `isLast` ends the stream.
    func deflate(dictionary: UnsafeRawBufferPointer, input: UnsafeRawBufferPointer,
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

/// Whether deflating is worth it: a sample of the data (its first 64 KiB) shrinks by at least 5 % at ISA-L's level 1.
/// Already-compressed content (photos, archives) is stored instead, which is faster to write and to read.
func isWorthDeflating(_ sample: UnsafeRawBufferPointer) -> Bool {
    guard sample.count >= 512, let deflated = DeflateEngine.deflatedSize(of: sample) else { return true }
    return Double(deflated) < Double(sample.count) * 0.95
}
