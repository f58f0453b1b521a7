#if canImport(Glibc)
import Glibc
#endif

/// State that threads block on until it says what they wait for: a lock and a condition variable together, each
/// change made under the lock waking every thread that waits.
///
/// It owns the library's one-shot results, set once by one thread and waited for by any number of others
/// (``set(_:)`` and ``wait()`` on an optional): a copy's check running beside the packing (``CopyCheck``), a segment
/// being loaded for a read in place (``SegmentCache``). It also serves the waits for state that grows: the segments a
/// save's hashing thread has decided so far (``SegmentReuse``), and the batch's bounded queue.
///
/// ```swift
/// let outcome = WaitableState<Result<Int, any Error>?>(nil)
/// Thread.detachNewThread { outcome.set(Result { try work() }) }
/// let value = try outcome.wait().get()  // blocks until set; every later wait returns at once
/// ```
///
/// ``Protected`` has no condition to wait on, and a semaphore signalled once per waiter is a count to keep right by
/// hand; this is the one type that blocks a thread until a value is there. The lock and the condition are pthread's
/// (as Foundation's `NSCondition` is, which only the full Foundation has), which ThreadSanitizer sees. Blocking work
/// only: an async task awaits instead.
@_spi(Core)
public final class WaitableState<State: Sendable>: @unchecked Sendable {  // `state` is touched only while `condition` is locked
    private let condition = Condition()
    private var state: State

    @_spi(Core) public init(_ initial: State) { state = initial }

    /// Runs `body` on the state under the lock, then wakes every waiting thread: what it changed may be what one
    /// waits for.
    @_spi(Core) public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        condition.lock()
        defer {
            condition.broadcast()
            condition.unlock()
        }
        return try body(&state)
    }

    /// Waits until `ready` returns a value, and returns it. `ready` runs under the lock: once at once, then after
    /// every change. It may change the state as it returns a value (taking what it waited for); the other waiting
    /// threads are woken then.
    @_spi(Core) public func wait<Result>(until ready: (inout State) throws -> Result?) rethrows -> Result {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let result = try ready(&state) {
                condition.broadcast()
                return result
            }
            condition.wait()
        }
    }
}

extension WaitableState {
    /// Sets a one-shot result: every thread waiting in ``wait()`` returns it, and so does every later call.
    ///
    /// Setting it twice is a mistake of the caller's, and traps.
    @_spi(Core) public func set<Value>(_ value: Value) where State == Value? {
        withLock { state in
            precondition(state == nil, "a one-shot result is set once")
            state = value
        }
    }

    /// The one-shot result, once ``set(_:)`` has set it: waits for it until then.
    @_spi(Core) public func wait<Value>() -> Value where State == Value? {
        wait { $0 }
    }
}

/// A pthread mutex and condition variable, in memory that never moves.
private final class Condition {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let variable = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    @_spi(Core) public init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(variable, nil)
    }

    deinit {
        pthread_cond_destroy(variable)
        pthread_mutex_destroy(mutex)
        variable.deallocate()
        mutex.deallocate()
    }

    @_spi(Core) public func lock() { pthread_mutex_lock(mutex) }
    @_spi(Core) public func unlock() { pthread_mutex_unlock(mutex) }
    @_spi(Core) public func broadcast() { pthread_cond_broadcast(variable) }
    @_spi(Core) public func wait() { pthread_cond_wait(variable, mutex) }
}
