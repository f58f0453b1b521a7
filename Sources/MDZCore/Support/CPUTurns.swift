#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import SystemPackage

/// Turns on the CPU for a batch's conversions: at most `count` of them compute at once, but one that is waiting (for
/// the disk to flush its bundle, for a lock another worker holds, for a busy store) hands its turn to another
/// conversion meanwhile.
///
/// A batch of small stores spends a fifth of its time in `fsync`; with one conversion per core, that time would
/// leave the cores idle. The batch runs ``threadsPerTurn`` worker threads per job; each takes a turn before it
/// starts an item and gives it back when the item is done, and ``whileWaiting(_:)`` gives it back around a wait. A
/// wait must never hold a turn: the conversion it waits for may need one to finish.
///
/// Which turn a thread holds is thread-local state, on purpose (with ``FlushPacing``, the hook it installs). The waits
/// that give the turn back are at the bottom of every layer: every flush (`fsync` and `fdatasync` of files and folders,
/// through ``FileIO``, called by `AtomicFile`, the bundle writer and extraction, the legacy converter and its
/// disposal), paced by ``withTurn(_:)`` for the item; a wait for another thread's folder flush (``FolderFlushes``);
/// the retries of `SourceSnapshot` and `DocumentLock`, which call ``whileWaiting(_:)`` themselves. That code is run
/// by `Document` and every `docconvert` command too, outside any batch. Passed explicitly, a turn would be a parameter
/// of each of those functions and of everything that calls them, `nil` everywhere but on a batch worker. And a turn
/// belongs to a thread by nature: it counts a thread on the CPU, so it is the thread that blocks that must give it
/// back. The state is scoped: ``withTurn(_:)`` sets it on the worker's own thread for one item and clears it before
/// giving the turn back; other threads (a parallel deflater's) never see it, which is right, as the batch does not
/// count them.
@_spi(Core) public final class CPUTurns: Sendable {
    /// Worker threads a batch runs per turn. Two leave a core idle while both of its conversions wait for a flush,
    /// which on a file system with a journal (a flush is a journal commit, longer than a small store's conversion)
    /// is often: three converted a tree of 1,000 small stores 8 % faster there than two (four: no faster again,
    /// and each thread's buffers in flight add to the peak memory; docs/BENCHMARKS.md).
    @_spi(Core) public static let threadsPerTurn = 3

    private let semaphore: DispatchSemaphore

    @_spi(Core) public init(count: Int) {
        semaphore = DispatchSemaphore(value: max(1, count))
    }

    /// Runs `body` (one item) holding a turn, with the turn known to ``whileWaiting(_:)`` on this thread, and the
    /// batch's pacing of flushes installed for the item: each flush it makes gives the turn back while the disk
    /// works (``FlushPacing``, with this object as the pacer).
    @_spi(Core) public func withTurn<T>(_ body: () throws -> T) rethrows -> T {
        semaphore.wait()
        pthread_setspecific(Self.key, Unmanaged.passUnretained(self).toOpaque())
        defer {
            pthread_setspecific(Self.key, nil)
            semaphore.signal()
        }
        return try FlushPacing.withPacing(self, body)
    }

    /// Runs `body`, a wait (a flush, a sleep before trying a lock again), without the calling thread's turn (when it
    /// holds one), and takes a turn again before returning.
    @_spi(Core) public static func whileWaiting<T>(_ body: () throws -> T) rethrows -> T {
        guard let raw = pthread_getspecific(key) else { return try body() }
        let turns = Unmanaged<CPUTurns>.fromOpaque(raw).takeUnretainedValue()
        turns.semaphore.signal()
        defer { turns.semaphore.wait() }
        return try body()
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left")
        return key
    }()
}

extension CPUTurns: FlushPacing.Pacer {
    /// Runs a flush without the calling thread's turn (``whileWaiting(_:)``): a batch worker's flush lets another
    /// conversion compute.
    @_spi(Core) public func pace(_ flush: () -> Errno?) -> Errno? {
        Self.whileWaiting(flush)
    }
}
