#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value that one thread at a time reads or changes, inside ``withLock(_:)``: the library's one lock for state
/// shared between threads (``WaitableState`` is the one to block on).
///
/// ```swift
/// let progress = Protected((done: 0, cancelled: false))
/// progress.withLock { $0.done += 1 }                    // from any thread
/// let cancelled = progress.withLock { $0.cancelled }
/// ```
///
/// The Synchronization module's `Mutex` would do the same, but on Linux it waits on a futex inside the standard
/// library, which ThreadSanitizer does not see: every value it guards was reported as a race (docs/RELIABILITY.md),
/// so a real race could not be told from them. The lock here is pthread's, which ThreadSanitizer intercepts. It costs
/// more: about 20 ns a `withLock` uncontended against the futex's 5 on this project's machine, a call into libc where
/// `Mutex` inlines an atomic; the library locks once or twice per page read, item or chunk, where that is noise. Not
/// recursive: `body` must not call `withLock` on the same value.
@_spi(Core)
public final class Protected<Value>: @unchecked Sendable {  // `value` is touched only while `mutex` is locked
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    @_spi(Core) public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        // > Default attributes cannot fail to initialise on Linux or Darwin (no memory is allocated).
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` on the value, holding the lock, and returns what it returns.
    @_spi(Core) public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
