import Foundation
import TestSupport
import Testing
@_spi(Core) @testable import MDZCore
@testable import ManagedDocument

/// The codecs on their own: slices deflated apart make one stream, segments inflate alone and say exactly why they
/// are not segments, a stream's end is found to the byte.
@Suite("The deflate codecs: slices join into one stream, segments and streams end where they must")
struct CodecTests {
    static let sliceSize = 64 << 10

    /// `bytes` deflated slice by slice at `level`, each primed with the 32 KiB before it except every
    /// `restartEvery`th; the joined stream, and where each restart segment (each slice, without restarts) starts in
    /// it (compressed offset, uncompressed offset).
    static func deflateInSlices(_ bytes: [UInt8], level: Int,
                                restartEvery: Int = .max) throws -> (stream: [UInt8], segments: [(Int, Int)]) {
        let deflater = try #require(SliceDeflater(level: level))
        var stream: [UInt8] = []
        var segments: [(Int, Int)] = []
        var start = 0
        var index = 0
        repeat {
            let end = min(bytes.count, start + sliceSize)
            let isRestart = index % restartEvery == 0
            if isRestart || restartEvery == .max { segments.append((stream.count, start)) }
            let dictionaryStart = isRestart ? start : max(0, start - 32 << 10)
            var output = [UInt8](repeating: 0, count: SliceDeflater.capacity(forSlice: end - start))
            let result = bytes.withUnsafeBytes { all in
                output.withUnsafeMutableBytes { out in
                    deflater.deflate(dictionary: UnsafeRawBufferPointer(rebasing: all[dictionaryStart..<start]),
                                     input: UnsafeRawBufferPointer(rebasing: all[start..<end]), into: out,
                                     isLast: end == bytes.count)
                }
            }
            let length = try result.get()
            stream += output[..<length]
            start = end
            index += 1
        } while start < bytes.count
        return (stream, segments)
    }

    static func inflate(_ compressed: some Collection<UInt8>, expecting count: Int,
                        isLast: Bool = true) -> Result<[UInt8], SegmentInflater.Failure> {
        guard let inflater = SegmentInflater() else { return .failure(.invalid) }
        let input = Array(compressed)
        var output = [UInt8](repeating: 0, count: count)
        let result = input.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { output in inflater.inflate(input, into: output, isLast: isLast) }
        }
        return result.map { Array(output[..<$0]) }
    }

    @Test("slices deflated apart at every level join into one stream that inflates to the input", arguments: 1...9)
    func slicesJoin(level: Int) throws {
        let bytes = ParallelDeflateTests.compressibleBytes(count: 5 * Self.sliceSize + 1234, seed: UInt64(level))
        let (stream, _) = try Self.deflateInSlices(bytes, level: level)
        #expect(stream.count < bytes.count / 2, "level \(level) compresses: \(stream.count) of \(bytes.count)")
        #expect(try Self.inflate(stream, expecting: bytes.count).get() == bytes)
    }

    @Test("restart segments inflate alone to their part of the input; the wrong cut is named", arguments: [1, 6])
    func segments(level: Int) throws {
        let bytes = ParallelDeflateTests.compressibleBytes(count: 7 * Self.sliceSize + 99, seed: 7)
        let (stream, segments) = try Self.deflateInSlices(bytes, level: level, restartEvery: 2)
        #expect(segments.count == 4)
        for (index, (offset, start)) in segments.enumerated() {
            let isLast = index == segments.count - 1
            let end = isLast ? stream.count : segments[index + 1].0
            let expected = Array(bytes[start..<(isLast ? bytes.count : segments[index + 1].1)])
            #expect(try Self.inflate(stream[offset..<end], expecting: expected.count, isLast: isLast).get() == expected)
            // > One byte too few for the output: an overflow, never a silent cut.
            #expect(Self.inflate(stream[offset..<end], expecting: expected.count - 1, isLast: isLast) == .failure(.overflow))
            if !isLast {
                // > Called last while it is not: it does not end the stream.
                #expect(Self.inflate(stream[offset..<end], expecting: expected.count, isLast: true) == .failure(.misplacedEnd))
                // > Cut inside a block: not at a boundary.
                #expect(Self.inflate(stream[offset..<(end - 7)], expecting: expected.count, isLast: false) == .failure(.misplacedEnd))
            } else {
                // > A byte after the stream's end.
                #expect(Self.inflate(Array(stream[offset..<end]) + [0], expecting: expected.count) == .failure(.misplacedEnd))
            }
        }
        // > A slice that is not a restart reaches back into the slice before it: alone, it is not valid.
        let (primed, slices) = try Self.deflateInSlices(bytes, level: level)
        let second = primed[slices[1].0..<slices[2].0]
        #expect(Self.inflate(second, expecting: Self.sliceSize, isLast: false) == .failure(.invalid))
        #expect(Self.inflate([0xFF, 0xFF, 0xFF, 0xFF], expecting: 100) == .failure(.invalid))
    }

    @Test("an output smaller than the bound is an overflow, at ISA-L's and zlib's levels", arguments: [1, 6])
    func overflow(level: Int) throws {
        let deflater = try #require(SliceDeflater(level: level))
        let input = (0..<4096).map { _ in UInt8.random(in: 0...255) }
        var output = [UInt8](repeating: 0, count: 100)
        let result = input.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { output in
                deflater.deflate(dictionary: UnsafeRawBufferPointer(start: nil, count: 0), input: input, into: output,
                                 isLast: true)
            }
        }
        #expect(result == .failure(.overflow))
    }

    @Test("a stream's end is found to the byte: trailing bytes are seen, invalid data is refused")
    func streamEnd() throws {
        let bytes = ParallelDeflateTests.compressibleBytes(count: 300_000, seed: 3)
        let (stream, _) = try Self.deflateInSlices(bytes, level: 1)
        func run(_ input: [UInt8]) -> (output: [UInt8], trailing: Bool)? {
            guard let inflater = StreamInflater() else { return nil }
            return input.withUnsafeBytes { all -> (output: [UInt8], trailing: Bool)? in
                var output: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 70_000)
                var offset = 0
                while true {
                    if inflater.pending == 0 {
                        guard offset < all.count else { return nil }
                        let end = min(all.count, offset + 65_536)
                        inflater.feed(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                        offset = end
                    }
                    guard let (produced, finished) = buffer.withUnsafeMutableBytes({ inflater.inflate(into: $0) })
                    else { return nil }
                    output += buffer[..<produced]
                    if finished { return (output, inflater.hasTrailingBytes || offset < all.count) }
                }
            }
        }
        let exact = try #require(run(stream))
        #expect(exact.output == bytes)
        #expect(!exact.trailing)
        let padded = try #require(run(stream + [0, 0, 0]))
        #expect(padded.output == bytes)
        #expect(padded.trailing, "bytes after the stream's end are seen")
        #expect(run([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) == nil, "invalid deflate is refused")
    }

    @Test("the sample test stores what would not shrink")
    func worthDeflating() {
        let random = (0..<65_536).map { _ in UInt8.random(in: 0...255) }
        let text = ParallelDeflateTests.compressibleBytes(count: 65_536, seed: 1)
        random.withUnsafeBytes { #expect(!isWorthDeflating($0)) }
        text.withUnsafeBytes { #expect(isWorthDeflating($0)) }
        text.withUnsafeBytes { #expect((DeflateEngine.deflatedSize(of: $0) ?? .max) < 40_000) }
    }
}
