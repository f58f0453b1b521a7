#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

/// Folder flushes shared by the writers that changed the same folder at about the same time: a group commit.
///
/// A rename (or a new name, or a removed one) is durable once its folder has been `fsync`ed by a flush that started
/// after it. Each caller of ``sync(_:)`` takes a ticket once its change is made; a flush notes the last ticket taken
/// when it starts and covers every ticket up to it. A caller whose ticket a finished flush covers returns at once; one
/// whose ticket the flush under way does not cover waits for it to end, then starts the next one for every ticket
/// taken meanwhile (or finds that another waiter's covers it). A batch's workers converting the stores of one folder
/// share one flush instead of queueing one each behind the disk's cache flushes.
///
/// A flush that fails covers nobody: the caller that started it throws its error, and the callers that waited for it
/// start another. Folders are told apart by the path they are named with; a folder named two ways is flushed for each, which
/// costs a flush, never a lost rename.
@_spi(Core) public enum FolderFlushes: Sendable {
    private struct Folder {
        /// Tickets taken so far; the last one's number.
        @_spi(Core) public var taken: UInt64 = 0
        /// Every ticket up to this one is covered by a flush that ended.
        @_spi(Core) public var covered: UInt64 = 0
        /// A flush is under way (started by one of the callers).
        @_spi(Core) public var isFlushing = false
        /// Callers inside ``sync(_:)``: the folder is forgotten when the last one leaves.
        @_spi(Core) public var callers = 0
    }

    private enum Step {
        case covered
        case flush(upTo: UInt64)
    }

    private static let folders = WaitableState<[FilePath: Folder]>([:])

    /// Returns once a flush of `folder` that started after this call began has ended: every change made to the folder
    /// before the call is durable.
    ///
    /// - Parameter flush: the flush itself (`fsync(2)` of the folder); it throws what the caller throws.
    @_spi(Core) public static func sync(_ folder: FilePath, flush: () throws -> Void) throws {
        let ticket = folders.withLock { folders -> UInt64 in
            folders[folder, default: Folder()].taken += 1
            folders[folder, default: Folder()].callers += 1
            return folders[folder, default: Folder()].taken
        }
        defer {
            folders.withLock { folders in
                folders[folder, default: Folder()].callers -= 1
                if folders[folder, default: Folder()].callers == 0 { folders[folder] = nil }
            }
        }
        while true {
            // > A wait for another caller's flush is a wait for the disk: it holds no turn on the CPU (CPUTurns).
            let step = CPUTurns.whileWaiting {
                folders.wait { folders -> Step? in
                    guard let state = folders[folder] else { return .covered }  // unreachable: this caller is in it
                    if state.covered >= ticket { return .covered }
                    guard !state.isFlushing else { return nil }
                    folders[folder, default: Folder()].isFlushing = true
                    return .flush(upTo: state.taken)
                }
            }
            guard case .flush(let upTo) = step else { return }
            do {
                try flush()
            } catch {
                folders.withLock { $0[folder, default: Folder()].isFlushing = false }  // a waiter starts the next one
                throw error
            }
            folders.withLock { folders in
                folders[folder, default: Folder()].covered = max(folders[folder, default: Folder()].covered, upTo)
                folders[folder, default: Folder()].isFlushing = false
            }
        }
    }
}
