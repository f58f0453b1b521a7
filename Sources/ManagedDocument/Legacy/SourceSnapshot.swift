#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

/// A legacy store's committed state, taken while no other process can commit to it: a private copy of its files,
/// or the main file itself, read in place under a lock.
///
/// SQLite's own file-locking protocol (POSIX advisory locks on the database file, as its unix VFS takes them) is
/// followed with open-file-description locks, and no byte of the source (not even a `-shm` read mark) changes:
/// - rollback-journal stores: a SHARED lock is taken, so no writer can commit. When a `-journal` is hot (no process
///   holds the RESERVED lock), the main file and the journal are copied and SQLite rolls the journal back in the
///   copy. Otherwise the main file already is the committed state, and it is read in place (``isInPlace``): the lock
///   is held until ``release()``, SQLite reads it as an immutable file (no lock of its own, no journal), and the
///   bundle packs its bytes as they are;
/// - WAL stores (the header says so, or a `-wal` is there, which SQLite would replay): the copy is taken only when
///   no process has the store open (nobody holds a lock on the `-shm`'s lock bytes), and the main file and `-wal`
///   are copied; SQLite replays the `-wal` in the copy.
/// A store that stays in use longer than the timeout is reported busy. What is packed is exactly the state another
/// SQLite connection would read.
struct SourceSnapshot {
    /// Every source file with its size and SHA-256, relative to the source's folder. In place, the main file's
    /// SHA-256 is left empty: it is the packed store's (see ``completingMainFile(in:sha256:size:)``).
    var files: [DocumentMetadata.Entry]
    /// The copied main file in the working folder, or the source's main file when read in place.
    var store: FilePath
    /// In place: the source's main file, open, holding the SHARED lock that keeps every writer from committing.
    private(set) var lock: FileDescriptor?
    /// The main file and its `-wal` as they were when the state was taken: checked again before disposal.
    var stamps: [FileStamp] = []

    var isInPlace: Bool { lock != nil }

    /// Bytes of the main file as it was taken: its size under the lock in place, the bytes copied otherwise (the
    /// main file is the first of ``files`` either way).
    var storeSize: Int64 { files.first?.size ?? 0 }

    /// The main file's bytes, read whole through the descriptor that holds the lock, when it is read in place and
    /// holds at most `limit` bytes; `nil` otherwise (the store is then read from the file where it is needed).
    ///
    /// - Throws: ``DocumentError/Code/verificationFailed`` when the file does not hold the bytes it held when it was
    ///   locked (a process that ignores SQLite's locks changed it).
    func inPlaceImage(atMost limit: Int64) throws -> InMemoryStore? {
        guard let lock, storeSize <= limit else { return nil }
        guard let image = try InMemoryStore(reading: Int(storeSize), from: lock, path: store) else {
            throw DocumentError(.verificationFailed, path: store,
                                reason: "the store changed size while it was locked; nothing was changed, try again")
        }
        return image
    }

    /// Lets writers commit again (in place); nothing otherwise.
    mutating func release() {
        try? lock?.close()  // Squash close error of a read-only descriptor; closing drops the lock.
        lock = nil
    }

    /// The main file's name in ``files``.
    static func mainFileName(of legacy: LegacyStore) -> String {
        relativeName(legacy.store, in: legacy)
    }

    // SQLite's unix VFS lock bytes (os_unix.c / os.h).
    static let pendingByte: Int64 = 0x4000_0000
    static let reservedByte: Int64 = pendingByte + 1
    static let sharedFirst: Int64 = pendingByte + 2
    static let sharedSize: Int64 = 510
    static let shmLockOffset: Int64 = 120  // WALINDEX_LOCK_OFFSET; the eight locks and the DMS byte follow
    static let shmLockCount: Int64 = 9

    /// Takes the snapshot; `directory` gives the private folder a copy goes into, only when one is needed.
    ///
    /// - Parameter inPlaceAllowed: a store that needs no recovery may be read in place.
    static func capture(_ legacy: LegacyStore, into directory: () throws -> FilePath, inPlaceAllowed: Bool,
                        busyTimeout: Double) throws -> SourceSnapshot {
        let deadline = Date().addingTimeInterval(busyTimeout)
        while true {
            if let snapshot = try attempt(legacy, into: directory, inPlaceAllowed: inPlaceAllowed) { return snapshot }
            guard Date() < deadline else {
                throw DocumentError(.storeBusy, path: legacy.store,
                                    reason: "another process has the store open or is writing it; close the app that uses it, or wait and try again (nothing was changed)")
            }
            CPUTurns.whileWaiting { _ = usleep(50_000) }
        }
    }

    /// One try: `nil` when the store is in use right now.
    private static func attempt(_ detected: LegacyStore, into directory: () throws -> FilePath,
                                inPlaceAllowed: Bool) throws -> SourceSnapshot? {
        // > Sidecars come and go with the apps that use the store (SQLite deletes its -wal and -shm on the last
        // > close, a -journal on commit): they are looked for again on every try.
        var legacy = detected
        legacy.sidecars = LegacyDetector.sidecarSuffixes.map { FilePath(detected.store.string + $0) }
            .filter { FileSystem.isRegularFile($0) }
        do {
            return try attemptWithSidecars(legacy, into: directory, inPlaceAllowed: inPlaceAllowed)
        } catch let error as DocumentError where error.code == .notFound && error.path != legacy.store {
            return nil  // a sidecar went away while it was read: the store was in use, try again
        }
    }

    private static func attemptWithSidecars(_ legacy: LegacyStore, into directory: () throws -> FilePath,
                                            inPlaceAllowed: Bool) throws -> SourceSnapshot? {
        let main = try FileSystem.openForReading(legacy.store)
        var keepsMainOpen = false
        defer { if !keepsMainOpen { try? main.close() } }  // Squash close error of a read-only descriptor (its locks go with it).
        guard let header = StoreHeader(try FileSystem.read(main, at: 0, count: StoreHeader.length,
                                                           path: legacy.store)) else {
            throw DocumentError(.notSQLite, path: legacy.store, reason: "is not a SQLite database")
        }
        // > SQLite replays a -wal it finds even when the header says rollback journal: so is it taken here.
        var isWAL = header.isWAL
        if !isWAL, let wal = legacy.sidecar("-wal"), (try FileSystem.status(wal))?.size ?? 0 > 0 { isWAL = true }
        var copies: [(FilePath, String)] = [(legacy.store, "persistentStore")]
        var walStamps: [FileStamp] = []
        if isWAL {
            if try isOpenInWALMode(legacy) { return nil }
            if try isLocked(main, start: pendingByte, length: 2 + sharedSize, path: legacy.store) { return nil }
            // > No lock keeps a WAL store still while it is copied: what it looked like before must be what it looks
            // > like after, and nobody may have opened it meanwhile.
            walStamps = try stamps(of: legacy)
            if let wal = legacy.sidecar("-wal") { copies.append((wal, "persistentStore-wal")) }
        } else {
            // > SQLite takes a read lock on PENDING, then on the SHARED range, then releases PENDING.
            guard try lock(main, type: F_RDLCK, start: pendingByte, length: 1, path: legacy.store) else { return nil }
            guard try lock(main, type: F_RDLCK, start: sharedFirst, length: sharedSize, path: legacy.store) else {
                return nil
            }
            _ = try lock(main, type: F_UNLCK, start: pendingByte, length: 1, path: legacy.store)
            // > The store may have turned to WAL between the header's read and the lock: look again, under the lock.
            guard let locked = StoreHeader(try FileSystem.read(main, at: 0, count: StoreHeader.length,
                                                               path: legacy.store)) else {
                throw DocumentError(.notSQLite, path: legacy.store, reason: "is not a SQLite database (cut short)")
            }
            if locked.isWAL { return nil }
            if let wal = legacy.sidecar("-wal"), (try FileSystem.status(wal))?.size ?? 0 > 0 { return nil }
            if let journal = legacy.sidecar("-journal"),
               try !isLocked(main, start: reservedByte, length: 1, path: legacy.store),
               try isHotJournal(journal) {
                copies.append((journal, "persistentStore-journal"))
            } else if inPlaceAllowed {
                // The main file is the committed state, and stays so while this lock is held: no copy.
                let status = try FileSystem.status(of: main, path: legacy.store,
                                                   reason: "cannot read the store's status")
                var files = [DocumentMetadata.Entry(name: mainFileName(of: legacy), size: status.size, sha256: "")]
                for sidecar in legacy.sidecars {
                    let digest = try FileDigest(of: sidecar)
                    files.append(DocumentMetadata.Entry(name: relativeName(sidecar, in: legacy), size: digest.size,
                                                        sha256: digest.sha256))
                }
                keepsMainOpen = true
                // > The main file's stamp is what the locked descriptor just said (status, first bytes): not read again.
                let stamps = [FileStamp(legacy.store, status: status, head: locked.bytes),
                              try FileStamp(FilePath(legacy.store.string + "-wal"), headCount: 32)]
                return SourceSnapshot(files: files, store: legacy.store, lock: main, stamps: stamps)
            }
        }
        let directory = try directory()
        for name in try FileSystem.contentsOfDirectory(directory) where name.hasPrefix("persistentStore") {
            try FileSystem.removeFile(directory.appending(name))  // from an earlier try
        }
        var files: [DocumentMetadata.Entry] = []
        for (source, name) in copies {
            let digest = try copy(source, to: directory.appending(name))
            files.append(DocumentMetadata.Entry(name: relativeName(source, in: legacy), size: digest.size,
                                                sha256: digest.sha256))
        }
        // Sidecars not copied (a -shm, a journal that is not hot) are recorded too.
        for sidecar in legacy.sidecars where !copies.contains(where: { $0.0 == sidecar }) {
            let digest = try FileDigest(of: sidecar)
            files.append(DocumentMetadata.Entry(name: relativeName(sidecar, in: legacy), size: digest.size,
                                                sha256: digest.sha256))
        }
        let stamps = try stamps(of: legacy)
        if isWAL {
            // Somebody opened the store, or changed it, while it was being copied: try again.
            if try isOpenInWALMode(legacy) || stamps != walStamps { return nil }
        }
        return SourceSnapshot(files: files, store: directory.appending("persistentStore"), lock: nil, stamps: stamps)
    }

    /// Whether a connection has the store open in WAL mode: one holds a lock on the `-shm`'s lock bytes (the `-shm`
    /// beside the store now, whether or not it was there when the store was found).
    private static func isOpenInWALMode(_ legacy: LegacyStore) throws -> Bool {
        let shm = FilePath(legacy.store.string + "-shm")
        guard let descriptor = try? FileSystem.openForReading(shm) else { return false }  // none: nobody has it open
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        return try isLocked(descriptor, start: shmLockOffset, length: shmLockCount, path: shm)
    }

    /// The files another process may hold open while it uses the store: the main file and its sidecars (those
    /// grouped with it, and a `-wal`, `-shm` or `-journal` made since), and Core Data's external data files.
    static func openFileCandidates(of legacy: LegacyStore) -> [FilePath] {
        var paths = [legacy.store] + legacy.sidecars
        for suffix in LegacyDetector.sidecarSuffixes where !paths.contains(FilePath(legacy.store.string + suffix)) {
            paths.append(FilePath(legacy.store.string + suffix))
        }
        if let external = legacy.externalData,
           let content = try? BundleWriter.contentFiles(in: external, prefix: BundleLayout.externalDataPrefix) {
            paths += content.map(\.source)  // an unreadable folder: the main file and sidecars are still checked
        }
        return paths
    }

    /// The files whose change would mean a commit: the main file (its header holds the change counter) and a `-wal`
    /// (its header holds the salts a restart changes; frames make it grow).
    static func stamps(of legacy: LegacyStore) throws -> [FileStamp] {
        [try FileStamp(legacy.store, headCount: 100), try FileStamp(FilePath(legacy.store.string + "-wal"), headCount: 32)]
    }

    /// Keeps every SQLite connection out of the store (an exclusive lock on its lock bytes: none can read or commit)
    /// while its files are disposed of, once they are shown to hold exactly the state that was converted.
    ///
    /// Waits up to `busyTimeout` for connections that have the store open to finish. The returned descriptor holds
    /// the lock until it is closed; `nil` when the source does not exist any more.
    ///
    /// - Throws: ``DocumentError/Code/storeBusy`` when the store stays in use, or when something was committed
    ///   after `stamps` were taken.
    static func lockForDisposal(of legacy: LegacyStore, unchangedSince stamps: [FileStamp],
                                busyTimeout: Double) throws -> FileDescriptor? {
        guard try FileSystem.exists(legacy.store) else { return nil }
        // A write lock needs a descriptor open for writing (nothing is written). A file this user may not write gets
        // SQLite's SHARED lock instead, which still keeps every rollback-journal writer from committing.
        let main: FileDescriptor
        var lockType = F_WRLCK
        do {
            main = try FileDescriptor.open(legacy.store, .readWrite, options: [.noFollow, .closeOnExec])
        } catch let error as Errno where error == .permissionDenied || error == .readOnlyFileSystem {
            main = try FileSystem.openForReading(legacy.store)
            lockType = F_RDLCK
        } catch let error as Errno {
            throw DocumentError.io("cannot open the store", path: legacy.store, errno: error)
        }
        var keepsOpen = false
        defer { if !keepsOpen { try? main.close() } }  // Squash close error of a read-only descriptor.
        let deadline = Date().addingTimeInterval(busyTimeout)
        while true {
            var inUse = try isOpenInWALMode(legacy)
            if !inUse {
                inUse = try !Self.lock(main, type: lockType, start: Self.pendingByte, length: 2 + Self.sharedSize,
                                       path: legacy.store)
            }
            // > Locked: no connection can read or commit now. One that has the store open but idle (a rollback
            // > journal between transactions holds no lock) shows only in /proc, by a scan begun after the lock.
            var holder: OpenDescriptors.Holder?
            if !inUse {
                holder = OpenDescriptors.shared.holder(of: openFileCandidates(of: legacy),
                                                       scannedAfter: OpenDescriptors.now())
                if holder != nil {
                    inUse = true
                    // > Not held while waiting: the app's next statement would meet it and fail as busy.
                    _ = try Self.lock(main, type: F_UNLCK, start: Self.pendingByte, length: 2 + Self.sharedSize,
                                      path: legacy.store)
                }
            }
            if !inUse { break }
            guard Date() < deadline else {
                if let holder {
                    throw DocumentError(.storeBusy, path: legacy.store,
                                        reason: "\(holder.description) has \(holder.path.lastComponent?.string ?? "the store") open, so the store's files cannot be moved or deleted; close it there")
                }
                throw DocumentError(.storeBusy, path: legacy.store,
                                    reason: "another process has the store open, so its files cannot be moved or deleted")
            }
            CPUTurns.whileWaiting { _ = usleep(50_000) }
        }
        for stamp in stamps where try FileStamp(stamp.path, headCount: stamp.head.count) != stamp {
            throw DocumentError(.storeBusy, path: legacy.store,
                                reason: "was written to while it was being converted (\(stamp.path.lastComponent?.string ?? "its files") changed)")
        }
        keepsOpen = true
        return main
    }

    /// `files` with the main file's SHA-256 (read in place) set to that of the bytes packed, which must be as many
    /// as the file held when it was locked.
    func completingMainFile(in files: [DocumentMetadata.Entry], sha256: String?, size: Int64,
                            legacy: LegacyStore) throws -> [DocumentMetadata.Entry] {
        guard isInPlace else { return files }
        guard let sha256 else {
            throw DocumentError(.verificationFailed, path: legacy.store,
                                reason: "the store packed in place was not hashed whole; nothing was changed")
        }
        let name = Self.mainFileName(of: legacy)
        return try files.map { file in
            guard file.name == name else { return file }
            guard file.size == size else {
                throw DocumentError(.verificationFailed, path: legacy.store,
                                    reason: "the store changed size while it was locked and packed; nothing was changed, try again")
            }
            return DocumentMetadata.Entry(name: name, size: size, sha256: sha256)
        }
    }

    /// The name recorded in the provenance: relative to a package, or the file name beside a loose store.
    static func relativeName(_ path: FilePath, in legacy: LegacyStore) -> String {
        let parent = legacy.isPackage ? legacy.source : legacy.source.removingLastComponent()
        let text = path.lexicallyNormalized().string
        if parent.isEmpty {
            // > A bare name ("Diary.sqlite"): paths beside it are relative to the current folder already.
            if !path.isAbsolute { return text.hasPrefix("./") ? String(text.dropFirst(2)) : text }
        } else {
            let base = parent.lexicallyNormalized().string
            let prefix = base.hasSuffix("/") ? base : base + "/"
            if text.hasPrefix(prefix) { return String(text.dropFirst(prefix.count)) }
        }
        return path.lastComponent?.string ?? text
    }

    /// A rollback journal is hot when it is non-empty and its header is not zeroed (SQLite's own test, less the
    /// lock, which the caller checked).
    private static func isHotJournal(_ journal: FilePath) throws -> Bool {
        let head = try LegacyDetector.readHead(journal, count: 28)
        return head.count == 28 && head.contains { $0 != 0 }
    }

    private static func copy(_ source: FilePath, to destination: FilePath) throws -> (sha256: String, size: Int64) {
        try FileSystem.copyFile(source, to: destination)
    }

    // Open-file-description locks (Linux F_OFD_*): they conflict with the POSIX locks SQLite takes, and belong
    // to this descriptor only, so no other descriptor of this process can drop them.
    private static let getLock: Int32 = 36  // F_OFD_GETLK
    private static let setLock: Int32 = 37  // F_OFD_SETLK

    /// Whether any other process or descriptor holds a lock that conflicts with a write lock on the range.
    private static func isLocked(_ descriptor: FileDescriptor, start: Int64, length: Int64, path: FilePath) throws -> Bool {
        var request = flock()
        request.l_type = Int16(F_WRLCK)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = off_t(start)
        request.l_len = off_t(length)
        request.l_pid = 0
        guard fcntl(descriptor.rawValue, getLock, &request) == 0 else {
            throw DocumentError.io("cannot test the store's locks", path: path, errno: Errno(rawValue: errno))
        }
        return request.l_type != Int16(F_UNLCK)
    }

    /// Takes or releases a lock without waiting; `false` when another holder conflicts.
    private static func lock(_ descriptor: FileDescriptor, type: Int32, start: Int64, length: Int64,
                             path: FilePath) throws -> Bool {
        var request = flock()
        request.l_type = Int16(type)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = off_t(start)
        request.l_len = off_t(length)
        request.l_pid = 0
        if fcntl(descriptor.rawValue, setLock, &request) == 0 { return true }
        if errno == EAGAIN || errno == EACCES { return false }
        throw DocumentError.io("cannot lock the store", path: path, errno: Errno(rawValue: errno))
    }
}

/// What a file looked like: identity, size, modification time and its first bytes; a file that does not exist has
/// none of them.
struct FileStamp: Equatable {
    var path: FilePath
    var exists = false
    var device: UInt64 = 0
    var inode: UInt64 = 0
    var size: Int64 = 0
    var modifiedSeconds = 0
    var modifiedNanoseconds = 0
    var head: [UInt8] = []

    /// The stamp of an open file from what was read of it: its status and its first bytes (as many as a stamp of
    /// it compares, ``SourceSnapshot/stamps(of:)``).
    init(_ path: FilePath, status: Stat, head: [UInt8]) {
        self.path = path
        exists = true
        device = status.identity.device
        inode = status.identity.inode
        size = status.size
        (modifiedSeconds, modifiedNanoseconds) = status.identity.modifiedTime
        self.head = head
    }

    /// The stamp of a file that does not exist.
    private init(missing path: FilePath, headCount: Int) {
        self.path = path
        head = [UInt8](repeating: 0, count: headCount)  // the count the comparison reads
    }

    init(_ path: FilePath, headCount: Int) throws {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileSystem.openForReading(path)
        } catch let error as DocumentError where (error.underlyingError as? Errno) == .noSuchFileOrDirectory {
            self.init(missing: path, headCount: headCount)
            return
        }
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        let status = try FileSystem.status(of: descriptor, path: path)
        var head = try FileSystem.read(descriptor, at: 0, count: headCount, path: path)
        head += [UInt8](repeating: 0, count: headCount - head.count)
        self.init(path, status: status, head: head)
    }
}
