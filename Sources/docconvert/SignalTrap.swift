#if canImport(Glibc)
import Glibc
#endif
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Core) import MDZCore
import ManagedDocument

/// SIGINT and SIGTERM as events: the first asks for a clean stop, the second for an immediate one.
final class SignalTrap: Sendable {
    /// The signal sources (kept alive with the trap), the signals seen and the first one.
    private let state = Protected<(sources: [any DispatchSourceSignal], count: Int, received: Int32?)>(([], 0, nil))

    /// The first signal received, if any.
    var received: Int32? { state.withLock { $0.received } }

    init(_ handler: @escaping @Sendable (Int32, Bool) -> Void) {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                guard let self else { return }
                let isSecond = self.state.withLock { state -> Bool in
                    state.count += 1
                    if state.received == nil { state.received = number }
                    return state.count > 1
                }
                handler(number, isSecond)
            }
            source.resume()
            state.withLock { $0.sources.append(source) }
        }
    }
}
