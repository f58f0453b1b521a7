#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

/// What a thread does around each of its flushes: a hook, scoped to one thread and one piece of work, run around
/// every `fsync(2)` and `fdatasync(2)` the thread makes (of a file or of a folder).
///
/// ``FileIO``'s flush family consults it in one place, around the system call alone (its `errno` read inside the
/// call, before the hook does anything more); ``FileSystem``'s flush wrappers only flush. A thread with no pacing
/// installed, which is every thread outside a batch, just flushes.
///
/// A batch installs one for each item a worker converts (``CPUTurns/withTurn(_:)``): a flush is a wait for the disk,
/// and the worker gives its CPU turn back while it lasts, so that another conversion computes meanwhile (a batch of
/// small stores spends a fifth of its time in `fsync`). The hook belongs to a thread for the reason the turn does:
/// flushes sit at the bottom of code that ``Document`` and every `docconvert` command run too, where a parameter
/// would be `nil` everywhere but on a batch worker.
///
/// ```swift
/// FlushPacing.withPacing(turns) { try convert(item) }   // each fsync in it gives the turn back while it lasts
/// ```
@_spi(Core) public enum FlushPacing: Sendable {
    /// Runs each flush of a thread that installed it (``FlushPacing/withPacing(_:_:)``).
    @_spi(Core) public protocol Pacer: AnyObject, Sendable {
        /// Runs `flush` (one `fsync` or `fdatasync`, which returns its `Errno` when it fails) once, and returns what
        /// it returns, doing what the pacing asks around it.
        func pace(_ flush: () -> Errno?) -> Errno?
    }

    /// Runs `body` with `pacer` around every flush the calling thread makes in it; the thread's previous pacing
    /// (usually none) is back when it returns.
    @_spi(Core) public static func withPacing<T>(_ pacer: any Pacer, _ body: () throws -> T) rethrows -> T {
        let previous = pthread_getspecific(key)
        let installed = Unmanaged.passRetained(Installed(pacer))
        pthread_setspecific(key, installed.toOpaque())
        defer {
            pthread_setspecific(key, previous)
            installed.release()
        }
        return try body()
    }

    /// Runs `flush` as the calling thread's pacing asks, or just runs it when the thread has none.
    @_spi(Core) public static func pacing(_ flush: () -> Errno?) -> Errno? {
        guard let raw = pthread_getspecific(key) else { return flush() }
        return Unmanaged<Installed>.fromOpaque(raw).takeUnretainedValue().pacer.pace(flush)
    }

    /// The pacer a thread installed, held for as long as it is installed.
    private final class Installed {
        @_spi(Core) public let pacer: any Pacer
        @_spi(Core) public init(_ pacer: any Pacer) { self.pacer = pacer }
    }

    /// The thread-specific slot of the installed pacer.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left")
        return key
    }()
}
