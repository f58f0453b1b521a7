#if canImport(Glibc)
import Glibc
#endif
import CMDZExtension
import CMDZSQLite
import SystemPackage
@_spi(Core) import MDZCore

/// The `mdz` VFS: serves a document's store to any SQLite host, read-only, straight from the bundle.
///
/// A host opens a document as `file:PATH?vfs=mdz` (with or without `mode=ro`), or by its plain path once
/// `sqlite3_mdzvfs_default_init` made the default VFS serve documents (``DefaultVFS``). `xOpen` opens the bundle as the
/// library does (``BundleReader``: the zip structure, the metadata and every limit checked before anything is read;
/// a hostile bundle is refused), plans its reading (``StoreRoute``) and serves it through ``StoreFileMethods``: each
/// segment is checked against its recorded digest before SQLite sees a byte of it, and a bounded cache keeps memory
/// flat. A bundle that cannot be read in place (another tool deflated a large store again; an older writer's) is
/// extracted first, checked as a whole, as the library does. The file is read-only to SQLite (immutable when opened
/// with `mode=ro`: no locks, no journal, no WAL) and read through the descriptor opened then: a connection reads the
/// version that was there when it opened, whole, even while the library saves a newer one; open it again to read the
/// newer one.
///
/// Every other file (a sort's or a temporary table's, a journal) goes to the host's default VFS, and so does a main
/// database that is not a bundle (``serves(_:named:)``): a plain SQLite database, and one to create by a path that
/// does not name the VFS (`ATTACH 'new.db'` or `VACUUM INTO 'copy.sqlite'` on a document's connection, which inherit
/// its VFS).
enum DocumentVFS {
    static let name = "mdz"

    /// Bytes of segments a connection keeps in memory by default (the library's own default).
    static let defaultCacheSize = 8 << 20

    /// The cache a URI asks for with `segment_cache=MiB` (1 to 65,536; anything else, or none, is the default): a
    /// host that reads a large document at random keeps more of it inflated and checked.
    static func cacheSize(_ mebibytes: Int64) -> Int {
        (1...65536).contains(mebibytes) ? Int(mebibytes) << 20 : defaultCacheSize
    }

    /// Registers the VFS with the host's SQLite (once a process: a second load finds it); SQLite's result code. Its
    /// calls other than opening a main database go to the default VFS of that moment (SQLite's `unix`).
    static func register() -> Int32 {
        if md_vfs_find(Self.name) != nil { return SQLITE_OK }
        // > A segment that fails its check is "disk I/O error" to the host: the log says which and why.
        StoreFileMethods.readFailureLog.withLock { $0 = { ExtensionLog.write(md_sqlite_ioerr_read, $0) } }
        guard let vfs = DelegatingVFS.make(named: Self.name, fileSize: MemoryLayout<md_bundle_file>.size) else {
            return SQLITE_ERROR
        }
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
            let named = name.flatMap { md_uri_parameter($0, "vfs") }.map { String(cString: $0) == DocumentVFS.name }
            return DocumentVFS.open(name, file, flags, outFlags, named: named ?? false) { name, file, flags, outFlags in
                DefaultVFS.open(in: DelegatingVFS.fallback(vfs), name, file, flags, outFlags)
            }
        }
        return md_vfs_register(vfs, 0)
    }

    /// SQLite's `xOpen`, for the `mdz` VFS and the default VFS it is interposed on: a main database that is a bundle
    /// is served (`named`: the path names the `mdz` VFS); anything else goes to `fallback`, the default VFS's own open.
    static func open(_ name: sqlite3_filename?, _ file: UnsafeMutablePointer<sqlite3_file>?, _ flags: Int32,
                     _ outFlags: UnsafeMutablePointer<Int32>?, named: Bool, fallback: DefaultVFS.Open) -> Int32 {
        guard let file else { return SQLITE_CANTOPEN }
        StoreFileMethods.clear(file)
        guard flags & SQLITE_OPEN_MAIN_DB != 0, let name else {
            // > Not a document: a temporary file (a sort, a temporary table, a temporary database), a journal or a
            // > WAL, served by the default VFS.
            return fallback(name, file, flags, outFlags)
        }
        let path = String(cString: name)
        guard serves(Kind(of: path), named: named) else {
            // > Not a document: a plain database, or one to create (`ATTACH 'new.db'`, `VACUUM INTO`, a new file while
            // > documents are served by the default VFS), opened by the default VFS as without the extension.
            return fallback(name, file, flags, outFlags)
        }
        let cacheSize = cacheSize(md_uri_int64(name, "segment_cache", 0))
        let writable = flags & SQLITE_OPEN_READWRITE != 0
        switch open(FilePath(path), cacheSize: cacheSize, writable: writable) {
        case .success(let slot):
            StoreFileMethods.attach(slot, to: file)
            // > Opened for writing, it says so to SQLite: a write then reaches the file's lock, which refuses it and
            // > logs how to edit a document (a read-only open makes SQLite refuse writes itself).
            outFlags?.pointee = writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY
            return SQLITE_OK
        case .failure(let refusal):
            ExtensionLog.write(refusal.code, refusal.message)
            return refusal.code
        }
    }

    /// What a path names, by its first bytes (following symbolic links, as SQLite does).
    enum Kind: Equatable {
        /// A regular file that starts as a zip (a local file header): a document, or a damaged or hostile one.
        case bundle
        /// A regular file with SQLite's 16-byte magic.
        case plainDatabase
        /// Nothing.
        case missing
        /// Anything else: an empty file, another format, a folder, a FIFO (never read: nothing waits on a writer).
        case other

        static let zipMagic: [UInt8] = [0x50, 0x4B, 0x03, 0x04]

        init(of path: String) {
            let status: Stat
            do {
                status = try Stat(FilePath(path))
            } catch {
                self = error == .noSuchFileOrDirectory || error == .notDirectory ? .missing : .other
                return
            }
            guard status.kind == .regular,
                  let descriptor = try? FileDescriptor.open(FilePath(path), .readOnly, options: [.closeOnExec, .nonBlocking])
            else {
                self = .other
                return
            }
            defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
            let head = (try? FileSystem.read(descriptor, at: 0, count: StoreHeader.magic.count, path: FilePath(path))) ?? []
            if StoreHeader.hasMagic(head) {
                self = .plainDatabase
            } else if head.starts(with: Self.zipMagic) {
                self = .bundle
            } else {
                self = .other
            }
        }
    }

    /// Whether the VFS serves a main database of `kind` itself, rather than the default VFS.
    ///
    /// A bundle is served, however it was reached; a plain database never is. A path that names the VFS (`vfs=mdz` in
    /// its URI) must be a document: a missing one is refused (a mistyped document's name creates nothing) and any other
    /// file gets the reader's reason. A path that reaches the VFS without naming it (the VFS is the default, or an
    /// `ATTACH` or `VACUUM INTO` on a document's connection inherits it) and is not a bundle goes to the default VFS,
    /// which opens, or creates, it as SQLite does without the extension.
    static func serves(_ kind: Kind, named: Bool) -> Bool {
        switch kind {
        case .bundle: return true
        case .plainDatabase: return false
        case .missing, .other: return named
        }
    }

    /// Why a document was not opened: SQLite's result code, and the line the log gets.
    struct Refusal: Error {
        let code: Int32
        let message: String
    }

    /// The slot serving `path`'s store, or why there is none.
    ///
    /// A bundle file another connection of the process serves already (the same device, inode, size and times to
    /// the nanosecond: ``FileIdentity``) is not parsed again: the connection shares that one's checked plan, or its
    /// extracted file, and the segments already loaded (the process's ``SegmentPool``). So a connection's memory
    /// beyond the shared cache is small whatever the metadata lists, and its open costs a `stat`.
    static func open(_ path: FilePath, cacheSize: Int, writable: Bool) -> Result<StoreSlot, Refusal> {
        // > stat(2), not open(2): a FIFO named like a document is never waited on here.
        if let status = try? Stat(path), status.kind == .regular, case let identity = FileIdentity(status),
           identity.hasFineTimes, let served = SharedBundles.find(identity) {
            return .success(slot(served.source(cacheSize: cacheSize), path: path, writable: writable))
        }
        let reader: BundleReader
        do {
            reader = try BundleReader(at: path)
        } catch let error as DocumentError {
            let code = error.code == .notFound || error.code == .ioFailure ? SQLITE_CANTOPEN : SQLITE_NOTADB
            return .failure(Refusal(code: code, message: "mdz: \(error)"))
        } catch {
            return .failure(Refusal(code: SQLITE_CANTOPEN, message: "mdz: \(path): \(error)"))
        }
        let served: SharedBundle
        switch StoreRoute(reader) {
        case .inPlace(let plan):
            served = SharedBundle(.inPlace(SegmentLoader(reader: reader, plan: plan)))
        case .extract(let reason):
            do {
                let (file, seconds) = try extractStore(reader)
                let size = reader.metadata.store.size
                ExtensionLog.write(SQLITE_NOTICE, "mdz: \(path): the store (\(size) bytes) was extracted to be read, in \(Int((seconds * 1000).rounded())) ms, into an unnamed file of \(FileSystem.temporaryFolder) (TMPDIR), because \(reason)")
                served = SharedBundle(.extracted(file))
            } catch {
                return .failure(Refusal(code: SQLITE_IOERR, message: "mdz: \(error)"))
            }
        }
        let source = served.source(cacheSize: cacheSize)
        do {
            try source.checkHeader(against: reader.metadata.store, bundle: path)
        } catch let error as DocumentError where error.code != .ioFailure {
            return .failure(Refusal(code: SQLITE_NOTADB, message: "mdz: \(error)"))
        } catch {
            return .failure(Refusal(code: SQLITE_IOERR, message: "mdz: \(error)"))
        }
        SharedBundles.record(served, as: reader.openedIdentity)
        return .success(slot(source, path: path, writable: writable))
    }

    /// The slot of a connection. Opened read-only, it is immutable (SQLite takes no locks, looks for no journal, and
    /// refuses writes itself); opened for writing, it is not, so that a write reaches its lock, which refuses it and
    /// logs how to edit a document: the notice comes only when something writes. Its bytes never change either way.
    private static func slot(_ source: any ServedStore, path: FilePath, writable: Bool) -> StoreSlot {
        guard writable else { return StoreSlot(source, isImmutable: true) }
        return StoreSlot(source, isImmutable: false, refusingWrites: {
            ExtensionLog.write(SQLITE_READONLY, "\(path): served read-only by the mdz VFS: " + ExtensionLog.howToEdit)
        })
    }

    /// The store of `reader`'s bundle, extracted and checked as the library extracts it (sizes, CRC-32s, SHA-256s,
    /// segment digests, streamed in bounded buffers) into a file without a name in the temporary folder (`TMPDIR`, or
    /// `/tmp`), once its free space is found to hold it: the copy lives as long as the connections reading it and no
    /// longer, and a host killed at any instant, mid-extraction too, leaves nothing on disk.
    private static func extractStore(_ reader: BundleReader) throws -> (StoreFileReader, seconds: Double) {
        let (descriptor, seconds) = try reader.extractStoreUnnamed(in: FileSystem.temporaryFolder)
        return (StoreFileReader(descriptor: descriptor, size: reader.metadata.store.size, origin: reader.path), seconds)
    }
}

/// What the process serves of one bundle file, checked once: the plan and file that segments are read from, or the
/// unnamed file its store was extracted to. Shared by every connection to that file (each holds it), and gone with
/// the last of them.
final class SharedBundle: Sendable {
    enum Kind: Sendable {
        case inPlace(SegmentLoader)
        case extracted(StoreFileReader)
    }

    let kind: Kind

    init(_ kind: Kind) { self.kind = kind }

    /// A source for one more connection: its view of the process's segment pool over the shared loader, or the
    /// shared file.
    func source(cacheSize: Int) -> any ServedStore {
        switch kind {
        case .inPlace(let loader): return InPlaceStore(loader, cacheSize: cacheSize, owner: self)
        case .extracted(let file): return file
        }
    }
}

/// The bundles this process serves, by file identity, held weakly: a record lives as long as a connection reads it.
enum SharedBundles {
    private struct Key: Hashable {
        let device: UInt64, inode: UInt64, size: Int64
        let modified: [Int], changed: [Int]

        init(_ identity: FileIdentity) {
            device = identity.device
            inode = identity.inode
            size = identity.size
            modified = [identity.modified.tv_sec, identity.modified.tv_nsec]
            changed = [identity.changed.tv_sec, identity.changed.tv_nsec]
        }
    }

    private static let table = Protected<[Key: WeakReference]>([:])

    private struct WeakReference: @unchecked Sendable {  // a weak reference read only under the table's lock
        weak var store: SharedBundle?
    }

    /// The record of the bundle file with `identity`, when a connection still holds one.
    static func find(_ identity: FileIdentity) -> SharedBundle? {
        table.withLock { $0[Key(identity)]?.store }
    }

    /// Records `store` as what serves the file with `identity` (an identity without fine times proves nothing and is
    /// not recorded); records whose connections are all gone are dropped.
    static func record(_ store: SharedBundle, as identity: FileIdentity) {
        guard identity.hasFineTimes else { return }
        table.withLock { table in
            table = table.filter { $0.value.store != nil }
            table[Key(identity)] = WeakReference(store: store)
        }
    }
}
