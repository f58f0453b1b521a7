import Crypto
import Dispatch

/// Chunks of a stream, hashed with SHA-256 on a second thread while the caller fills the next one.
///
/// The caller takes a buffer with ``acquire()``, fills it (inflating, reading), uses it (writing it out), and hands
/// it over with ``submit(_:)``; the hash runs on a serial queue, in order, while the caller goes on. A small ring of
/// buffers bounds memory (`count × size`); ``acquire()`` waits when all of them are still being hashed. On a
/// machine where SHA-256 is slower than inflating or copying, this takes the hash off the critical path.
@_spi(Core) public final class ChunkPipeline {
    @_spi(Core)
    public static let chunkSize = 256 << 10  // four of them: 1 MiB in flight, enough to keep both threads busy

    /// What a stream's chunks are hashed into: the SHA-256 of the whole stream, the SHA-256 of each segment of an
    /// interval (a version 2 store, FORMAT.md 13.1), or both.
    @_spi(Core) public struct Hashing: Sendable {
        /// Memberwise.
        @_spi(Core) public init(whole: Bool = true, segmentInterval: Int64? = nil) {
            self.whole = whole
            self.segmentInterval = segmentInterval
        }

        @_spi(Core) public var whole = true
        @_spi(Core) public var segmentInterval: Int64? = nil
        @_spi(Core) public static let whole = Hashing()
    }

    /// The digests of a stream, as its ``Hashing`` asked.
    @_spi(Core) public struct Digests: Sendable {
        @_spi(Core) public var sha256: String?
        @_spi(Core) public var segments: [String]?
    }

    /// The hashers of the current stream.
    private struct Hashers {
        @_spi(Core) public var whole: SHA256?
        @_spi(Core) public var segments: SegmentHasher?
        @_spi(Core) public init(_ hashing: Hashing) {
            whole = hashing.whole ? SHA256() : nil
            segments = hashing.segmentInterval.map { SegmentHasher(interval: $0) }
        }
    }

    /// What the hashing closures touch; they never hold the pipeline itself, so its deinit runs on the owner's thread.
    private final class Shared: Sendable {
        /// Touched on `queue` (or inline); the lock is uncontended, taken once per chunk.
        @_spi(Core) public let hashers: Protected<Hashers>
        @_spi(Core) public let free: DispatchSemaphore
        @_spi(Core) public init(count: Int, hashing: Hashing) {
            free = DispatchSemaphore(value: count)
            hashers = Protected(Hashers(hashing))
        }
    }

    /// A submitted buffer on its way to the hash: the pipeline's memory, which nothing reads or writes meanwhile
    /// (``acquire()`` hands it out again only after the hash has signalled `free`), so the hash is its one user.
    private struct Chunk: @unchecked Sendable {
        @_spi(Core) public let bytes: UnsafeRawBufferPointer
    }

    private let buffers: [UnsafeMutableRawBufferPointer]
    private let shared: Shared
    private var free: DispatchSemaphore { shared.free }
    private let queue = DispatchQueue(label: "ManagedDocument.sha256")
    private let hashesInline: Bool
    private var next = 0
    private var acquired: UnsafeMutableRawBufferPointer?

    /// - Parameter hashesInline: hash on the caller's thread in ``submit(_:)`` (for streams of one chunk, where a
    ///   second thread would only add a hand-over).
    @_spi(Core) public init(buffers count: Int = 4, size: Int = ChunkPipeline.chunkSize, hashesInline: Bool = false,
         hashing: Hashing = .whole) {
        buffers = (0..<count).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 64) }
        shared = Shared(count: count, hashing: hashing)
        self.hashesInline = hashesInline
    }

    /// A pipeline for a stream of about `size` bytes: one buffer of that size, hashed inline, when it fits in one
    /// chunk (small files cost no large allocation and no second thread); the ring of four chunks otherwise.
    @_spi(Core) public static func forStream(ofSize size: Int64, hashing: Hashing = .whole) -> ChunkPipeline {
        guard size < Int64(chunkSize) else { return ChunkPipeline(hashing: hashing) }
        // > One byte more than the stream, so the read that finds its end needs no second buffer.
        return ChunkPipeline(buffers: 1, size: max(4096, Int(size) + 1), hashesInline: true, hashing: hashing)
    }

    deinit {
        giveBack()  // after an error mid-stream: libdispatch traps on a semaphore disposed below its initial value
        queue.sync {}  // every pending hash has used its buffer
        for buffer in buffers { buffer.deallocate() }
    }

    /// A buffer to fill; it stays the caller's until ``submit(_:)`` or ``giveBack()``.
    @_spi(Core) public func acquire() -> UnsafeMutableRawBufferPointer {
        precondition(acquired == nil, "acquire() twice without submit()")
        free.wait()
        // > Hashes finish in submission order, so a free slot means the oldest buffer, the next in the ring, is free.
        let buffer = buffers[next]
        next = (next + 1) % buffers.count
        acquired = buffer
        return buffer
    }

    /// Hashes the first `count` bytes of the acquired buffer on the second thread.
    @_spi(Core) public func submit(_ count: Int) {
        guard let buffer = acquired else { preconditionFailure("submit() without acquire()") }
        acquired = nil
        let chunk = Chunk(bytes: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        let hash: @Sendable () -> Void = { [shared] in
            shared.hashers.withLock { hashers in
                hashers.whole?.update(bufferPointer: chunk.bytes)
                hashers.segments?.update(chunk.bytes)
            }
            shared.free.signal()
        }
        if hashesInline { hash() } else { queue.async(execute: hash) }
    }

    /// Returns the acquired buffer unused (at the end of the stream).
    @_spi(Core) public func giveBack() {
        guard acquired != nil else { return }
        submit(0)
    }

    /// The SHA-256 of everything submitted, in lowercase hex ("" when the pipeline was asked not to compute it); the
    /// pipeline starts over afterwards, hashing the whole stream.
    @_spi(Core) public func finalize() -> String {
        finalizeDigests().sha256 ?? ""
    }

    /// The digests of everything submitted, as asked; the pipeline starts over afterwards, hashing the next
    /// stream as `next` asks.
    @_spi(Core) public func finalizeDigests(next: Hashing = .whole) -> Digests {
        giveBack()
        return queue.sync {
            shared.hashers.withLock { hashers in
                defer { hashers = Hashers(next) }
                return Digests(sha256: hashers.whole.map { $0.finalize().hexString },
                               segments: hashers.segments.map { var hasher = $0; return hasher.finalize() })
            }
        }
    }

    /// Hashes the stream that starts now as `hashing` asks (nothing was submitted since the last finalize).
    @_spi(Core) public func start(_ hashing: Hashing) {
        queue.sync { shared.hashers.withLock { $0 = Hashers(hashing) } }
    }
}
