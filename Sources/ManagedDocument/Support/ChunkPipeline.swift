import Crypto
import Dispatch
import Synchronization

/// Chunks of a stream, hashed with SHA-256 on a second thread while the caller fills the next one.
///
/// The caller takes a buffer with ``acquire()``, fills it (inflating, reading), uses it (writing it out), and hands
/// it over with ``submit(_:)``; the hash runs on a serial queue, in order, while the caller goes on. A small ring of
/// buffers bounds memory (`count × size`); ``acquire()`` waits when all of them are still being hashed. On a
/// machine where SHA-256 is slower than inflating or copying, this takes the hash off the critical path.
final class ChunkPipeline {
    static let chunkSize = 256 << 10  // four of them: 1 MiB in flight, enough to keep both threads busy

    /// What the hashing closures touch; they never hold the pipeline itself, so its deinit runs on the owner's thread.
    private final class Shared: Sendable {
        /// Touched on `queue` (or inline); the lock is uncontended, taken once per chunk.
        let hasher = Mutex(SHA256())
        let free: DispatchSemaphore
        init(count: Int) { free = DispatchSemaphore(value: count) }
    }

    /// A submitted buffer on its way to the hash: the pipeline's memory, which nothing reads or writes meanwhile
    /// (``acquire()`` hands it out again only after the hash has signalled `free`), so the hash is its one user.
    private struct Chunk: @unchecked Sendable {
        let bytes: UnsafeRawBufferPointer
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
    init(buffers count: Int = 4, size: Int = ChunkPipeline.chunkSize, hashesInline: Bool = false) {
        buffers = (0..<count).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 64) }
        shared = Shared(count: count)
        self.hashesInline = hashesInline
    }

    /// A pipeline for a stream of about `size` bytes: one buffer of that size, hashed inline, when it fits in one
    /// chunk (small files cost no large allocation and no second thread); the ring of four chunks otherwise.
    static func forStream(ofSize size: Int64) -> ChunkPipeline {
        guard size < Int64(chunkSize) else { return ChunkPipeline() }
        // > One byte more than the stream, so the read that finds its end needs no second buffer.
        return ChunkPipeline(buffers: 1, size: max(4096, Int(size) + 1), hashesInline: true)
    }

    deinit {
        giveBack()  // after an error mid-stream: libdispatch traps on a semaphore disposed below its initial value
        queue.sync {}  // every pending hash has used its buffer
        for buffer in buffers { buffer.deallocate() }
    }

    /// A buffer to fill; it stays the caller's until ``submit(_:)`` or ``giveBack()``.
    func acquire() -> UnsafeMutableRawBufferPointer {
        precondition(acquired == nil, "acquire() twice without submit()")
        free.wait()
        // > Hashes finish in submission order, so a free slot means the oldest buffer, the next in the ring, is free.
        let buffer = buffers[next]
        next = (next + 1) % buffers.count
        acquired = buffer
        return buffer
    }

    /// Hashes the first `count` bytes of the acquired buffer on the second thread.
    func submit(_ count: Int) {
        guard let buffer = acquired else { preconditionFailure("submit() without acquire()") }
        acquired = nil
        let chunk = Chunk(bytes: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        let hash: @Sendable () -> Void = { [shared] in
            shared.hasher.withLock { $0.update(bufferPointer: chunk.bytes) }
            shared.free.signal()
        }
        if hashesInline { hash() } else { queue.async(execute: hash) }
    }

    /// Returns the acquired buffer unused (at the end of the stream).
    func giveBack() {
        guard acquired != nil else { return }
        submit(0)
    }

    /// The SHA-256 of everything submitted, in lowercase hex; the pipeline starts over afterwards.
    func finalize() -> String {
        giveBack()
        return queue.sync {
            shared.hasher.withLock { hasher in
                defer { hasher = SHA256() }
                return hasher.finalize().hexString
            }
        }
    }
}
