#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// The files a batch takes its items' document locks with: made once per run, not once per item.
///
/// A document lock (``DocumentLock``) is an exclusive `flock(2)` on the file named `.<bundle name>.lock` beside the
/// bundle, made by the writer that takes it and removed when it lets go. For a batch of small stores that is a file
/// made and deleted per item, and on ext4 making a file costs more the more files were deleted in the last minutes:
/// the allocator steps over every recently freed inode of the folder's group, one buffer lookup each (without a
/// journal; `recently_deleted` in `fs/ext4/ialloc.c`), so the lock files of a batch made each new file dearer.
///
/// A parked file is made once, locked at once, and kept under a name of its own in the batch's root
/// (`.docconvert-lock.<RANDOM>.partial`: batch walks skip it, and remove it once no process holds its lock, as any
/// temporary). Taking an item's lock links it under `.<bundle name>.lock`; `link(2)` never replaces a file, so a lock
/// file already there (another writer's, or one a dead process left) makes the worker take the lock the usual way.
/// Letting go removes that name, while the file is still locked. To every other writer the lock is the one
/// ``DocumentLock`` takes: the file under the lock's name is held under `flock(2)` by this process from before its
/// name appears until after it is gone. Nothing is made or freed per item but the name.
final class ParkedLockFiles: Sendable {
    private struct Parked: Sendable {
        let path: FilePath
        let descriptor: FileDescriptor
    }

    private struct State {
        var free: [Parked] = []
        var made: [Parked] = []
        /// A parked file could not be made (a read-only root): every lock is taken the usual way.
        var cannotMake = false
    }

    private let folder: FilePath
    private let state = Protected(State())

    /// Parked files go into `folder` (the batch's root), made when a lock first needs one.
    init(in folder: FilePath) {
        self.folder = folder
    }

    /// The document lock of `bundle` through a parked file; `nil` when it cannot be taken that way (a lock file is
    /// there, another file system, no parked file can be made): the caller takes the lock the usual way.
    func lock(for bundle: FilePath) -> DocumentLock? {
        guard let parked = take() else { return nil }
        let lock = DocumentLock(for: bundle, linking: parked.path, heldBy: parked.descriptor,
                                giveBack: { [self] in state.withLock { $0.free.append(parked) } })
        if lock == nil { state.withLock { $0.free.append(parked) } }
        return lock
    }

    /// Removes the parked files' names and closes them (their locks go with them). Every lock taken through them must
    /// have been released.
    func close() {
        let made = state.withLock { state in
            defer { state = State(free: [], made: [], cannotMake: true) }
            return state.made
        }
        for parked in made {
            try? FileIO.unlink(parked.path)  // One left behind is removed by the next walk.
            try? parked.descriptor.close()  // Squash close error: closing releases the flock either way.
        }
        if !made.isEmpty { removeAbandoned() }
    }

    /// Removes the parked files a killed run left in the folder (those no process holds). The walk removes them as
    /// it meets them, but not one that a worker held at that moment: a killed run's parked file is also under the
    /// name of the item lock it was lent for, and the worker converting that item again takes the lock through that
    /// name. A run that walks no folder (``BatchOptions/plan``) would never meet them. One listing of the folder.
    private func removeAbandoned() {
        // > Not an error of the batch: a parked file left behind is harmless, and the next run tries again.
        guard let names = try? FileSystem.contentsOfDirectory(folder) else { return }
        for name in names where name.hasPrefix(Self.namePrefix) && name.hasSuffix(AtomicFile.temporarySuffix) {
            try? AtomicFile.removeIfStale(folder.appending(name))  // see above: the next run tries again
        }
    }

    /// The start of a parked file's name.
    static let namePrefix = ".docconvert-lock."

    deinit { close() }

    /// A free parked file, made when there is none.
    private func take() -> Parked? {
        let (free, cannotMake) = state.withLock { ($0.free.popLast(), $0.cannotMake) }
        if let free { return free }
        guard !cannotMake else { return nil }
        let path = folder.appending("\(Self.namePrefix)\(FileSystem.randomSuffix())\(AtomicFile.temporarySuffix)")
        // > The bits of a lock file (``DocumentLock``: 0644 less the umask), given before the file has a name.
        var ownership = AtomicFile.FinalOwnership(target: nil, restrictingTo: nil)
        ownership.mode &= 0o644
        do {
            let parked = Parked(path: path, descriptor: try AtomicFile.createLocked(path, ownership: ownership))
            state.withLock { $0.made.append(parked) }
            return parked
        } catch {
            // > Not an error of the batch: its locks are taken the usual way, one file per item.
            state.withLock { $0.cannotMake = true }
            return nil
        }
    }
}
