import Dispatch
import Foundation

/// SIGINT and SIGTERM as events: the first asks for a clean stop, the second for an immediate one.
final class SignalTrap: @unchecked Sendable {  // guarded by `lock`
    private let lock = NSLock()
    private var sources: [any DispatchSourceSignal] = []
    private var count = 0
    private(set) var received: Int32?

    init(_ handler: @escaping @Sendable (Int32, Bool) -> Void) {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                guard let self else { return }
                self.lock.lock()
                self.count += 1
                let isSecond = self.count > 1
                if self.received == nil { self.received = number }
                self.lock.unlock()
                handler(number, isSecond)
            }
            source.resume()
            sources.append(source)
        }
    }
}
