import Dispatch
import Foundation
@_spi(Core) import MDZCore

/// Threads of their own that take elements from a bounded queue and run the pool's work on each, one element per
/// thread at a time, taken in the order they were submitted.
///
/// A producer hands elements over with ``submit(_:)``, which waits while the queue is full: memory does not grow with
/// a producer faster than the workers. ``perform(_:)`` also waits until a worker has run the work on its element: with
/// one thread, a pool runs the work one element at a time, in order, under no lock, while each caller waits its turn
/// as it would for a lock. ``close()`` says no more will come (the workers finish what is queued, then end);
/// ``cancel()`` drops what is queued too, and wakes a producer waiting for room at once. ``wait()`` (from a thread)
/// and ``finished()`` (from a task) return once every worker has ended.
///
/// ```swift
/// let pool = WorkerPool<FilePath>(name: "checker", threads: 4, capacity: 16) { path in check(path) }
/// for path in paths where !pool.submit(path) { break }  // false once cancelled
/// pool.close()
/// pool.wait()
/// ```
///
/// The threads are not the concurrency pool's: the work blocks (on the disk, on file locks, on SQLite), which would
/// hold the cooperative pool's few threads. No lock of the pool's is held while the work runs, nor while a caller
/// waits for room or for its element to be done. The batch runs its conversions, a plan's classifiers and the calls
/// of its report callback on pools.
final class WorkerPool<Element: Sendable>: Sendable {
    /// An element, and for ``perform(_:)`` the result its caller waits for: `true` once the work ran on it, `false`
    /// when ``cancel()`` dropped it.
    private struct Job: Sendable {
        let element: Element
        let done: WaitableState<Bool?>?
    }

    private let queue: BoundedQueue<Job>
    private let running = DispatchGroup()

    /// Starts `threads` threads (at least one), named `name-0`, `name-1`…, that run `work` on each element submitted.
    ///
    /// - Parameters:
    ///   - name: the threads' name, followed by their number.
    ///   - threads: how many elements are worked on at once.
    ///   - capacity: elements waiting for a thread, at most (at least one); a submit past it waits.
    ///   - work: what is done with an element, on a thread of the pool's.
    init(name: String, threads: Int, capacity: Int, work: @escaping @Sendable (Element) -> Void) {
        let queue = BoundedQueue<Job>(capacity: max(1, capacity))
        self.queue = queue
        for number in 0..<max(1, threads) {
            running.enter()
            Thread.detach(named: "\(name)-\(number)") { [running] in
                while let job = queue.pop() {
                    work(job.element)
                    job.done?.set(true)
                }
                running.leave()
            }
        }
    }

    /// Queues an element for a worker, waiting for room.
    ///
    /// - Returns: `false` (the element dropped) when the pool is closed or cancelled, before or while waiting.
    func submit(_ element: Element) -> Bool {
        queue.push(Job(element: element, done: nil))
    }

    /// Queues an element and waits until a worker has run the work on it.
    ///
    /// - Returns: `false` when the pool was closed or cancelled before a worker took the element (it was dropped).
    func perform(_ element: Element) -> Bool {
        let done = WaitableState<Bool?>(nil)
        guard queue.push(Job(element: element, done: done)) else { return false }
        return done.wait()
    }

    /// No more elements: the workers work through those queued, then end.
    func close() {
        queue.close(discardingPending: false)
    }

    /// No more elements, and those queued are dropped (their ``perform(_:)`` returns `false`); a producer waiting for
    /// room is woken at once. Elements the workers have taken are finished. Safe from any thread, at any time.
    func cancel() {
        for job in queue.close(discardingPending: true) { job.done?.set(false) }
    }

    /// Waits until every worker has ended (after ``close()`` or ``cancel()``). Blocks: for a thread, not a task.
    func wait() {
        running.wait()
    }

    /// Awaits the end of every worker (after ``close()`` or ``cancel()``) without blocking a thread.
    func finished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            running.notify(queue: .global()) { continuation.resume() }
        }
    }
}
