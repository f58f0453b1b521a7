/// A first-in first-out queue of at most `capacity` elements: `push` waits while it is full, `pop` while it is empty.
/// Closing it wakes both at once: a cancelled batch's walk, waiting for room, stops without delay.
///
/// ```swift
/// let queue = BoundedQueue<Int>(capacity: 2)
/// Thread.detachNewThread {
///     for number in 0..<10 { _ = queue.push(number) }  // waits while two are queued
///     queue.close(discardingPending: false)
/// }
/// while let number = queue.pop() { print(number) }  // 0 to 9, then nil once closed and empty
/// ```
///
/// The queue under a ``WorkerPool``; its lock and condition are a ``WaitableState``'s, released before `push` or
/// `pop` returns.
@_spi(Core) public final class BoundedQueue<Element: Sendable>: Sendable {
    private struct State {
        @_spi(Core) public var elements: [Element] = []
        @_spi(Core) public var head = 0
        @_spi(Core) public var isClosed = false
    }
    private let state = WaitableState(State())
    /// Elements held at most; a `push` past it waits.
    @_spi(Core) public let capacity: Int

    /// An empty, open queue of at most `capacity` elements.
    @_spi(Core) public init(capacity: Int) { self.capacity = capacity }

    /// Adds an element, waiting for room. Returns `false` (dropping it) when the queue is closed, before or while
    /// waiting.
    @_spi(Core) public func push(_ element: Element) -> Bool {
        state.wait { state -> Bool? in
            guard !state.isClosed else { return false }
            guard state.elements.count - state.head < capacity else { return nil }
            if state.head > 0 && state.head * 2 >= state.elements.count {
                state.elements.removeFirst(state.head)
                state.head = 0
            }
            state.elements.append(element)
            return true
        }
    }

    /// The next element, waiting for one; `nil` once the queue is closed and empty.
    @_spi(Core) public func pop() -> Element? {
        state.wait { state -> Element?? in
            guard state.head < state.elements.count else { return state.isClosed ? .some(nil) : nil }
            state.head += 1
            return state.elements[state.head - 1]
        }
    }

    /// No more pushes; pending elements are still popped unless `discardingPending`.
    ///
    /// - Returns: the elements discarded (none unless `discardingPending`), oldest first.
    @discardableResult
    @_spi(Core) public func close(discardingPending: Bool) -> [Element] {
        state.withLock { state in
            state.isClosed = true
            guard discardingPending else { return [] }
            defer {
                state.elements.removeAll()
                state.head = 0
            }
            return Array(state.elements[state.head...])
        }
    }
}
