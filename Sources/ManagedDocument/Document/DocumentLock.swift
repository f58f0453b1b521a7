#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// The one-writer lock of a document: an exclusive `flock(2)` on `.<bundle name>.lock` beside the bundle.
///
/// The lock file never moves (the bundle itself is replaced by every save, so it cannot carry the lock). The lock
/// belongs to the open file description: a second writer in the same process is refused like one in another
/// process, and the kernel releases it when the process dies, however it dies.
///
/// The holder removes the lock file when it releases the lock, so no empty files pile up beside documents. That is
/// safe because taking the lock checks, once `flock` succeeded, that the locked file is still the one under the
/// name: a waiter that locked a file its holder had just removed lets go and starts again with the new one. A lock
/// file left by a process that died is simply taken by the next writer.
final class DocumentLock: Sendable {
    let path: FilePath
    private let descriptor: FileDescriptor
    /// Set by the first ``release()``: the descriptor is closed once.
    private let isReleased = Protected(false)
    /// What ``release()`` does with the descriptor, when not closing it: hand it back to the parked file it holds
    /// (``ParkedLockFiles``).
    private let giveBack: (@Sendable () -> Void)?

    static func path(for bundle: FilePath) -> FilePath {
        let parent = bundle.removingLastComponent()
        let folder: FilePath = parent.isEmpty ? "." : parent
        return folder.appending(".\(bundle.lastComponent?.string ?? "document").lock")
    }

    /// Takes the lock, waiting up to `timeout` seconds (0: not at all).
    ///
    /// - Throws: ``DocumentError/Code/inUse`` when another writer holds it past the timeout;
    ///   ``DocumentError/Code/cannotCreate`` when the lock file cannot be created (a read-only folder).
    init(for bundle: FilePath, timeout: Double) async throws {
        path = Self.path(for: bundle)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let descriptor = try Self.attempt(path, bundle: bundle) {
                self.descriptor = descriptor
                giveBack = nil
                return
            }
            guard Date() < deadline else { throw Self.inUse(bundle) }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }

    /// Takes the lock from a thread that may block, waiting up to `timeout` seconds or until `shouldStop` says so.
    ///
    /// - Throws: ``DocumentError/Code/inUse`` past the timeout or when told to stop; the errors of the async form.
    init(for bundle: FilePath, timeout: Double, shouldStop: () -> Bool) throws {
        path = Self.path(for: bundle)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let descriptor = try Self.attempt(path, bundle: bundle) {
                self.descriptor = descriptor
                giveBack = nil
                return
            }
            guard Date() < deadline, !shouldStop() else { throw Self.inUse(bundle) }
            CPUTurns.whileWaiting { _ = usleep(20_000) }  // the holder may be a batch job that needs the turn
        }
    }

    /// The lock taken with a file this process holds under `flock(2)` already (a parked file, ``ParkedLockFiles``),
    /// by linking it under the lock's name: `link(2)` never replaces, so `nil` when a lock file is there (another
    /// writer's, or one left behind: the caller takes the lock the usual way) or the link fails. No stale-file check
    /// is needed: the name appears on a file already locked. ``release()`` removes the name and calls `giveBack`
    /// instead of closing the descriptor.
    init?(for bundle: FilePath, linking parked: FilePath, heldBy descriptor: FileDescriptor,
          giveBack: @escaping @Sendable () -> Void) {
        path = Self.path(for: bundle)
        guard link(parked.string, path.string) == 0 else { return nil }
        self.descriptor = descriptor
        self.giveBack = giveBack
    }

    /// One try: the descriptor holding the lock on the file that is under `path` now, or `nil` when it is held.
    private static func attempt(_ path: FilePath, bundle: FilePath) throws -> FileDescriptor? {
        while true {
            let descriptor: FileDescriptor
            do {
                descriptor = try FileDescriptor.open(path, .readWrite, options: [.create, .noFollow, .closeOnExec],
                                                     permissions: [.ownerReadWrite, .groupRead, .otherRead])
            } catch let error as Errno {
                throw DocumentError(.cannotCreate, path: bundle,
                                    reason: "cannot create the document's lock file \(path); open it read-only instead",
                                    underlyingError: error)
            }
            guard FileSystem.lockExclusively(descriptor, wait: false) else {
                try? descriptor.close()  // Squash close error: the lock was not taken.
                return nil
            }
            // The holder before us may have removed the file between our open and our flock: then the lock we hold
            // is on a file nobody else will ever look at. Only the file still under the name counts.
            if FileSystem.isFile(descriptor, stillNamed: path) { return descriptor }
            try? descriptor.close()  // Squash close error: a stale file, try the current one.
        }
    }

    private static func inUse(_ bundle: FilePath) -> DocumentError {
        DocumentError(.inUse, path: bundle,
                      reason: "is open for writing elsewhere (in this or another process); close it there, open it read-only, or wait for it")
    }

    /// Releases the lock and removes its file (while still holding it, so no one can be relying on that file).
    func release() {
        isReleased.withLock { isReleased in
            guard !isReleased else { return }
            isReleased = true
            try? FileIO.unlink(path)  // A file that cannot be removed stays, harmless and reusable.
            if let giveBack { return giveBack() }  // the parked file stays locked, under its own name only
            try? descriptor.close()  // Squash close error: closing releases the flock either way.
        }
    }

    deinit { release() }
}
