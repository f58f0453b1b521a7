#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SystemPackage

/// The one-writer lock of a document: an exclusive `flock(2)` on `.<bundle name>.lock` beside the bundle.
///
/// The lock file never moves (the bundle itself is replaced by every save, so it cannot carry the lock). The lock
/// belongs to the open file description: a second writer in the same process is refused like one in another
/// process, and the kernel releases it when the process dies, however it dies. The empty lock file stays behind;
/// it holds no data.
final class DocumentLock: @unchecked Sendable {  // the descriptor is closed once, under `state`
    let path: FilePath
    private let descriptor: FileDescriptor
    private let state = NSLock()
    private var isReleased = false

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
        do {
            descriptor = try FileDescriptor.open(path, .readWrite, options: [.create, .noFollow],
                                                 permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch let error as Errno {
            throw DocumentError(.cannotCreate, path: bundle,
                                reason: "cannot create the document's lock file \(path); open it read-only instead",
                                underlyingError: error)
        }
        let deadline = Date().addingTimeInterval(timeout)
        while !FileSystem.lockExclusively(descriptor, wait: false) {
            guard Date() < deadline else {
                try? descriptor.close()  // Squash close error: the lock was not taken.
                throw DocumentError(.inUse, path: bundle,
                                    reason: "is open for writing elsewhere (in this or another process); close it there, open it read-only, or wait for it")
            }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }

    /// Releases the lock.
    func release() {
        state.lock()
        defer { state.unlock() }
        guard !isReleased else { return }
        isReleased = true
        try? descriptor.close()  // Squash close error: closing releases the flock either way.
    }

    deinit { release() }
}
