#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage
@_spi(Core) import MDZCore

extension DocumentLock {
    /// Removes the lock file of `bundle` (`.<bundle name>.lock`) when no process holds it: one a killed process left
    /// beside an item a later run finds done. The file is taken as ``DocumentLock`` takes it (an exclusive
    /// `flock(2)`, without waiting, then the check that it is still the file under the name) and removed while held,
    /// as a holder removes it when it lets go: to every other writer that is an ordinary lock taken and released.
    /// A lock file another process holds (an app with the document open, another worker, a parked file of this
    /// process) is left alone.
    ///
    /// - Returns: whether a lock file was removed. Nothing there, or one that cannot be opened, is not an error: a
    ///   lock file left behind is harmless, the next writer takes it.
    @discardableResult
    static func removeIfAbandoned(for bundle: FilePath) -> Bool {
        let path = Self.path(for: bundle)
        // > Opened without creating: no lock file, nothing to do (the common case costs one failed open).
        guard let descriptor = try? FileDescriptor.open(path, .readOnly, options: [.noFollow, .closeOnExec]) else {
            return false
        }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor; closing drops the lock.
        guard FileSystem.lockExclusively(descriptor, wait: false), FileSystem.isFile(descriptor, stillNamed: path)
        else { return false }
        return (try? FileIO.unlink(path)) != nil
    }
}
