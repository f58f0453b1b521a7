#if canImport(Glibc)
import Glibc
#endif
import CMDZExtension
import SystemPackage

/// The `mdz` VFS: serves a document's store to any SQLite host, read-only, straight from the bundle.
///
/// A host opens a document as `file:PATH?vfs=mdz` (with or without `mode=ro`). `xOpen` opens the bundle as the
/// library does (``BundleReader``: the zip structure, the metadata and every limit checked before anything is read;
/// a hostile bundle is refused), plans its reading (``StoreRoute``) and serves it through ``StoreFileMethods``: each
/// segment is checked against its recorded digest before SQLite sees a byte of it, and a bounded cache keeps memory
/// flat. A bundle that cannot be read in place (another tool deflated a large store again; an older writer's) is
/// extracted first, checked as a whole, as the library does. The file is immutable to SQLite (no locks, no journal,
/// no WAL) and read through the descriptor opened then: a connection reads the version that was there when it
/// opened, whole, even while the library saves a newer one; open it again to read the newer one.
///
/// Every other file (a sort's or a temporary table's) goes to the host's default VFS, and so does a plain SQLite
/// database opened through it (`ATTACH 'other.db'` on a connection to a document inherits the document's VFS).
enum DocumentVFS {
    static let name = "mdz"

    /// Bytes of segments a connection keeps in memory by default (the library's own default).
    static let defaultCacheSize = 8 << 20

    /// The cache a URI asks for with `segment_cache=MiB` (1 to 65,536; anything else, or none, is the default): a
    /// host that reads a large document at random keeps more of it inflated and checked.
    static func cacheSize(_ mebibytes: Int64) -> Int {
        (1...65536).contains(mebibytes) ? Int(mebibytes) << 20 : defaultCacheSize
    }

    /// Registers the VFS with the host's SQLite (once a process: a second load finds it); SQLite's result code.
    static func register() -> Int32 {
        if md_vfs_find(Self.name) != nil { return SQLITE_OK }
        guard let vfs = DelegatingVFS.make(named: Self.name, fileSize: MemoryLayout<md_bundle_file>.size) else {
            return SQLITE_ERROR
        }
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
            guard let file else { return SQLITE_CANTOPEN }
            guard flags & SQLITE_OPEN_MAIN_DB != 0 else {
                // > Not a document: a temporary file (a sort, a temporary table), served by the default VFS.
                return DelegatingVFS.openInFallback(vfs, name, file, flags, outFlags)
            }
            StoreFileMethods.clear(file)
            guard let name else { return SQLITE_CANTOPEN }  // a temporary main database: nothing to serve
            let path = String(cString: name)
            if DocumentVFS.isPlainDatabase(path) {
                // > A plain SQLite database, not a document (one attached beside a document inherits its VFS): the
                // > default VFS opens it as it would without the extension, its journal and WAL with it (above).
                return DelegatingVFS.openInFallback(vfs, name, file, flags, outFlags)
            }
            let cacheSize = DocumentVFS.cacheSize(md_uri_int64(name, "segment_cache", 0))
            switch DocumentVFS.open(FilePath(path), cacheSize: cacheSize) {
            case .success(let slot):
                StoreFileMethods.attach(slot, to: file)
                outFlags?.pointee = SQLITE_OPEN_READONLY
                if flags & SQLITE_OPEN_READWRITE != 0 {
                    ExtensionLog.write(SQLITE_READONLY, "\(path): served read-only by the mdz VFS: "
                                       + ExtensionLog.howToEdit)
                }
                return SQLITE_OK
            case .failure(let refusal):
                ExtensionLog.write(refusal.code, refusal.message)
                return refusal.code
            }
        }
        return md_vfs_register(vfs, 0)
    }

    /// Whether `path` is an existing plain SQLite database file (it starts with SQLite's 16-byte magic), which the
    /// default VFS serves. A missing file is not one: nothing is created under a mistyped document's name; nor is a
    /// FIFO, read without waiting for a writer.
    static func isPlainDatabase(_ path: String) -> Bool {
        FileSystem.prefix(of: FilePath(path), count: StoreHeader.magic.count).map(StoreHeader.hasMagic) ?? false
    }

    /// Why a document was not opened: SQLite's result code, and the line the log gets.
    struct Refusal: Error {
        let code: Int32
        let message: String
    }

    /// The slot serving `path`'s store, or why there is none.
    static func open(_ path: FilePath, cacheSize: Int) -> Result<StoreSlot, Refusal> {
        let reader: BundleReader
        do {
            reader = try BundleReader(at: path)
        } catch let error as DocumentError {
            let code = error.code == .notFound || error.code == .ioFailure ? SQLITE_CANTOPEN : SQLITE_NOTADB
            return .failure(Refusal(code: code, message: "mdz: \(error)"))
        } catch {
            return .failure(Refusal(code: SQLITE_CANTOPEN, message: "mdz: \(path): \(error)"))
        }
        switch StoreRoute(reader) {
        case .inPlace(let plan):
            let source = SegmentSource(reader, plan: plan, cacheSize: cacheSize)
            return .success(StoreSlot(source, isImmutable: true))
        case .extract(let reason):
            do {
                let slot = StoreSlot(try extractStore(reader), isImmutable: true)
                ExtensionLog.write(SQLITE_NOTICE, "mdz: \(path): the store was extracted to be read, because \(reason)")
                return .success(slot)
            } catch {
                return .failure(Refusal(code: SQLITE_IOERR, message: "mdz: \(error)"))
            }
        }
    }

    /// The store of `reader`'s bundle, extracted and checked as the library extracts it (sizes, CRC-32s, SHA-256s,
    /// segment digests, streamed in bounded buffers) into a private folder of the temporary folder (`TMPDIR`, or
    /// `/tmp`), open for reading; the folder is removed at once, so the copy lives as long as the connection and no
    /// longer, even when the host is killed.
    private static func extractStore(_ reader: BundleReader) throws -> StoreFile {
        let parent = FilePath(getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp")
        let scratch = try FileSystem.makeTemporaryDirectory(in: parent, prefix: ".mdzvfs-")
        defer { try? FileSystem.removeTree(scratch) }  // Squash cleanup error: the open file is what counts.
        try reader.streamEntries(into: scratch, checkingSegments: true) { $0.role == .store }
        return try StoreFile(scratch.appending(BundleLayout.store))
    }
}

extension StoreRoute {
    /// A host that loaded the extension opened a `file:` URI naming the VFS: stores can always be read in place.
    static var inPlaceUnavailable: String? { nil }
}
