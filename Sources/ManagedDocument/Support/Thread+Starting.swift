import Foundation
@_spi(Core) import MDZCore

extension Thread {
    /// Starts `body` on a new thread of its own, named `name` (as debuggers and `top -H` show it).
    ///
    /// ```swift
    /// Thread.detach(named: "docconvert-survey", stackSize: nil) { walk() }
    /// ```
    ///
    /// - Parameters:
    ///   - name: the thread's name.
    ///   - stackSize: the thread's stack in bytes; `nil` keeps Foundation's default. Default: 1 MiB, enough for the
    ///     library's work, which never recurses deeply.
    ///   - body: the work; the thread ends when it returns.
    static func detach(named name: String, stackSize: Int? = 1 << 20, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = name
        if let stackSize { thread.stackSize = stackSize }
        thread.start()
    }

    /// Runs blocking work on a thread of its own and awaits it without holding a thread of the concurrency pool.
    ///
    /// ```swift
    /// await Thread.run(named: "docconvert-batch") { convertAll() }  // fsyncs and file locks, off the pool
    /// ```
    ///
    /// - Parameters:
    ///   - name: the thread's name.
    ///   - body: the work, which may block (the disk, file locks, SQLite).
    static func run(named name: String, _ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            detach(named: name) {
                body()
                continuation.resume()
            }
        }
    }
}
