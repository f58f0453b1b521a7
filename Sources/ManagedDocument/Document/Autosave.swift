import Logging
@_spi(Core) import MDZCore

/// The loop behind ``Document/OpenOptions/autosaveInterval``: it looks at the document every interval (a 4-byte
/// read of the working copy's change counter, never SQLite) and saves once the changes have settled.
///
/// - A change is settled when the counter has not moved for one whole interval, so a save comes between one and two
///   intervals after the last change; under changes that never stop, it comes four intervals after the first.
/// - A save already running (an explicit ``Document/save()``) is never joined: the loop looks again next time.
/// - After a failure (the document is then ``Document/State/savingFailed``) the wait doubles, up to five minutes,
///   and the next try does not wait for the changes to settle; a success brings the wait back to the interval.
/// - The loop holds the document weakly, and ends when it is cancelled (``Document/close(savingChanges:)`` cancels
///   it before its final save) or the document is gone.
struct Autosave {
    let interval: Double
    let logger: Logger?

    /// The longest wait between two tries after failures.
    static let maximumBackoff = 300.0

    func run(_ document: @Sendable () -> Document?) async {
        var wait = interval
        var lastCounter: UInt32?
        var pendingTicks = 0
        while !Task.isCancelled {
            // > `wait` is at most a week (OpenOptions.validate): its nanoseconds fit.
            do { try await Task.sleep(nanoseconds: UInt64(wait * 1e9)) } catch { return }  // cancelled
            guard let document = document() else { return }
            let state = document.state
            guard state == .hasUnsavedChanges || state == .savingFailed else {
                (lastCounter, pendingTicks) = (nil, 0)
                continue
            }
            let counter = document.changeCounterNow
            pendingTicks += 1
            let settled = counter != nil && counter == lastCounter
            lastCounter = counter
            guard settled || state == .savingFailed || pendingTicks >= 4 else { continue }
            guard !document.isSaving, !Task.isCancelled else { continue }
            do {
                try await document.save()
                logger?.debug("autosaved \(document.path): \(document.lastSave.map { "\($0)" } ?? "")")
                (wait, lastCounter, pendingTicks) = (interval, nil, 0)
            } catch {
                wait = min(wait * 2, max(interval, Self.maximumBackoff))
                logger?.warning("autosave of \(document.path) failed; trying again in \(wait) s: \(error)")
            }
        }
    }
}

/// A document held weakly, so that an autosave loop never keeps an abandoned document alive.
final class WeakDocument: Sendable {
    private let reference: Protected<Reference>
    private struct Reference { weak var document: Document? }

    init(_ document: Document?) { reference = Protected(Reference(document: document)) }

    var document: Document? { reference.withLock { $0.document } }
}
