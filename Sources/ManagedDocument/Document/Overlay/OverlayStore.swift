#if canImport(Glibc)
import Glibc
#endif
import CMDZSQLite
import GRDBSQLite  // sqlite3.h's types are attributed to the first module that includes it: GRDB's
import SystemPackage
@_spi(Core) import MDZCore

/// A writable store made of a base (a bundle's store, read through any ``ServedStore``) and a private overlay: the
/// working copy of FORMAT.md 16.2, opened by SQLite through ``OverlayVFS``.
///
/// The working folder holds `overlay`, a sparse file with every page written since the base was taken at its offset
/// in the store, and `map` (``OverlayMap``), which says which pages `overlay` holds and the store's logical size.
/// SQLite sees the store as:
///
/// - a page `overlay` holds: read from `overlay`;
/// - any other byte below the logical size and below the base limit (the lowest logical size since the base was
///   taken): read from the base;
/// - anything else: zeros.
///
/// Pages are counted in blocks of the map's page size; a write that does not cover whole blocks composes the rest
/// of a block it makes present from what SQLite would read there, so any write is correct. At SQLite's `xSync`,
/// `overlay` is flushed, then one record appended to `map` and flushed: `map` never names a page whose bytes are
/// not durable, and SQLite's rollback journal (`overlay-journal`, beside them) does the rest.
///
/// One connection uses it at a time: a second `xOpen` while SQLite holds it open fails (`SQLITE_CANTOPEN`).
/// Every access takes one lock, so a reader on another thread (a save) never sees a write half done.
final class OverlayStore: ServedStore {
    /// The working folder.
    let folder: FilePath
    /// The overlay file's path, kept: every write and read error names it, and a path is not cheap to build.
    let overlayPath: FilePath
    /// The map file's path.
    let mapPath: FilePath
    /// The size of the blocks pages are counted in (the map's page size).
    let pageSize: Int
    private let state: Protected<State>
    private let firstFailure = FirstFailure()

    /// The overlay's file, named in the folder; SQLite's journal is named after it (`overlay-journal`).
    static let overlayName = "overlay"
    /// The page map's file, named in the folder.
    static let mapName = "map"

    /// Everything the lock guards.
    private struct State {
        var base: any ServedStore
        var overlay: FileDescriptor
        var map: FileDescriptor
        /// Where the next record is appended.
        var mapLength: Int64
        /// The sequence number of the last record.
        var sequence: UInt64
        /// The blocks `overlay` holds (those recorded, and those written since).
        var present: PageSet
        /// The blocks made present since the last record.
        var pending: PageSet
        var logicalSize: Int64
        /// The base is seen below this offset only (FORMAT.md 16.2; ``OverlayMap``).
        var baseLimit: Int64
        /// The sizes the last record (or the header) says.
        var recordedSize: Int64
        var recordedLimit: Int64
        /// Whether `overlay` was written or cut since it was last flushed.
        var isOverlayDirty = false
        /// Whether the last record is a pending base: the next `xSync` after a write then appends a record even
        /// when the write made no page present and changed no size (it rewrote pages the overlay holds), so that
        /// recovery sees a change after that save (``OverlayMap/coverage(ofStoreDigest:size:)``).
        var awaitsChange = false
        /// The map's header (rewritten as it is when the map is compacted).
        var header: OverlayMap.Header
        /// Whether the map holds a pending-base record: it is then never compacted (the record says which bundle
        /// a save put in place, and what was written after it).
        var hasPendingBase = false
        /// Whether the folder still needs a flush for the compacted map's rename (it failed once): the next `xSync`
        /// flushes it before it returns.
        var needsFolderSync = false
        /// Whether SQLite holds the store open.
        var isAttached = false
        /// Called in `xSync` once `overlay` is flushed, before the record is appended (tests only).
        var afterOverlaySync: (@Sendable () -> Void)?
        /// The most blocks one record names (``defaultPagesPerRecord``; fewer in tests).
        var pagesPerRecord = OverlayStore.defaultPagesPerRecord
    }

    /// A store over the state ``open(folder:base:expectedDigest:)`` recovered.
    private init(folder: FilePath, pageSize: Int, state: State) {
        self.folder = folder
        self.overlayPath = folder.appending(Self.overlayName)
        self.mapPath = folder.appending(Self.mapName)
        self.pageSize = pageSize
        self.state = Protected(state)
    }

    deinit {
        state.withLock { state in
            try? state.overlay.close()  // Squash close errors: every write that counts was flushed by xSync.
            try? state.map.close()
        }
    }

}

// MARK: - Creating and opening

extension OverlayStore {
    /// Makes an empty overlay and map over `base` in `folder` (written aside, flushed and renamed into place), and
    /// opens them.
    ///
    /// - Parameters:
    ///   - pageSize: the store's page size: the blocks the map counts (a power of two, 512 to 65536).
    ///   - baseIdentity: the base bundle's identity (recorded for diagnosis: recovery decides by the digest).
    ///   - baseDigest: the base's store digest.
    /// - Precondition: `pageSize` is a power of two from 512 to 65536.
    /// - Throws: ``DocumentError/Code/alreadyExists`` when the folder holds a map already; I/O errors.
    static func create(folder: FilePath, base: any ServedStore, pageSize: Int, baseIdentity: OverlayMap.BaseIdentity,
                       baseDigest: String) throws -> OverlayStore {
        precondition(pageSize >= 512 && pageSize <= 65_536 && pageSize & (pageSize - 1) == 0,
                     "a page size is a power of two from 512 to 65536")
        let mapPath = folder.appending(mapName)
        guard try !FileSystem.exists(mapPath) else {
            throw DocumentError(.alreadyExists, path: mapPath, reason: "the working copy has a page map already")
        }
        let header = OverlayMap.Header(pageSize: pageSize, baseIdentity: baseIdentity, baseDigest: baseDigest,
                                       baseSize: base.size)
        let files = try replaceFiles(in: folder, header: header)
        try? files.overlay?.close()  // Squash close errors: both were flushed; open reads them again.
        try? files.map.close()
        if let failure = files.failure { throw failure }
        return try open(folder: folder, base: base, expectedDigest: baseDigest)
    }

    /// Opens the overlay and map in `folder` over `base`, as the last acknowledged `xSync` left them: the map is
    /// read up to its last good record and cut back there, and `overlay` cut to the logical size (what lies beyond
    /// was never committed). SQLite rolls a hot journal back when it opens the store.
    ///
    /// `base` is the store the map's header names, or one a save put in place from this overlay
    /// (``OverlayMap/coverage(ofStoreDigest:size:)``): `expectedDigest` is its store digest.
    ///
    /// - Throws: ``DocumentError/Code/metadataMismatch`` when the overlay lies over neither (nothing is changed or
    ///   removed then); ``DocumentError/Code/notFound`` when there is no map; ``DocumentError/Code/storeCorrupt``
    ///   when its header is damaged, or `overlay` is missing while the map names pages.
    static func open(folder: FilePath, base: any ServedStore, expectedDigest: String) throws -> OverlayStore {
        let mapPath = folder.appending(mapName)
        let map = try openFile(mapPath, creating: false)
        do {
            let bytes = try FileSystem.read(map, at: 0, count: Int(fileSize(map, path: mapPath)), path: mapPath)
            let parsed = try OverlayMap(parsing: bytes, path: mapPath)
            guard parsed.coverage(ofStoreDigest: expectedDigest, size: base.size).isOver else {
                throw DocumentError(.metadataMismatch, path: mapPath,
                                    reason: "the working copy's changes were made over another version of the document "
                                        + "(its page map names another base); nothing was changed")
            }
            if parsed.length < bytes.count {
                // > The records after the last good one were never acknowledged: cut them off.
                try resize(map, to: Int64(parsed.length), path: mapPath)
                try FileSystem.sync(map, path: mapPath)
            }
            let state = try recover(parsed, base: base, map: map, folder: folder)
            return OverlayStore(folder: folder, pageSize: parsed.header.pageSize, state: state)
        } catch {
            try? map.close()  // Squash close error and throw the first one.
            throw error
        }
    }

    /// The state the map's records describe, with `overlay` opened and cut to the logical size.
    private static func recover(_ parsed: OverlayMap, base: any ServedStore, map: FileDescriptor,
                                folder: FilePath) throws -> State {
        var present = PageSet()
        for record in parsed.records { present.formUnion(record.pages) }
        let size = parsed.records.last?.logicalSize ?? parsed.header.baseSize
        let limit = parsed.records.last?.baseLimit ?? parsed.header.baseSize
        let overlayPath = folder.appending(overlayName)
        let hasOverlay = try FileSystem.exists(overlayPath)
        guard parsed.records.isEmpty || hasOverlay else {
            throw DocumentError(.storeCorrupt, path: overlayPath,
                                reason: "the working copy's overlay is missing while its page map names pages")
        }
        let overlay = try openFile(overlayPath, creating: true)
        do {
            if try fileSize(overlay, path: overlayPath) > size {
                try resize(overlay, to: size, path: overlayPath)
                try dataSync(overlay, path: overlayPath)
            }
        } catch {
            try? overlay.close()  // Squash close error and throw the first one.
            throw error
        }
        return State(base: base, overlay: overlay, map: map, mapLength: Int64(parsed.length),
                     sequence: parsed.records.last?.sequence ?? 0, present: present, pending: PageSet(), logicalSize: size,
                     baseLimit: limit, recordedSize: size, recordedLimit: limit,
                     awaitsChange: parsed.records.last?.pendingBase != nil, header: parsed.header,
                     hasPendingBase: parsed.hasPendingBase)
    }

    /// What ``replaceFiles(in:header:)`` put in place, once the new map was: the map, open; the new overlay, open,
    /// when its rename was done too (`nil`: the old `overlay` is still under the name, unseen by the new map);
    /// and why the rest failed (the overlay's rename, or the folder's flush).
    private struct Replacement {
        let map: FileDescriptor
        let mapLength: Int64
        let overlay: FileDescriptor?
        let failure: DocumentError?
    }

    /// Writes an empty overlay and a map of `header` alone aside, flushes them, and renames them into place: the
    /// map first (from then on, it names no page: whatever `overlay` holds is unseen), then the overlay; then
    /// flushes the folder. Throws when it fails before the map's rename (nothing replaced, the files aside
    /// removed); once the map is in place, returns what is, with the failure of what followed.
    private static func replaceFiles(in folder: FilePath, header: OverlayMap.Header) throws -> Replacement {
        let suffix = FileSystem.randomSuffix()
        let overlayAside = folder.appending(".\(overlayName).\(suffix).partial")
        let mapAside = folder.appending(".\(mapName).\(suffix).partial")
        let overlay = try openFile(overlayAside, creating: true)
        do {
            let map = try openFile(mapAside, creating: true)
            do {
                let bytes = OverlayMap.encode(header)
                try bytes.withUnsafeBytes { try FileSystem.writeAll(map, $0, path: mapAside) }
                try FileSystem.sync(map, path: mapAside)
                try FileSystem.sync(overlay, path: overlayAside)
                try FileSystem.rename(mapAside, to: folder.appending(mapName))
                do {
                    try FileSystem.rename(overlayAside, to: folder.appending(overlayName))
                } catch let error as DocumentError {
                    try? overlay.close()  // Squash cleanup errors: the old overlay stays under its name.
                    try? FileSystem.removeFile(overlayAside)
                    return Replacement(map: map, mapLength: Int64(bytes.count), overlay: nil, failure: error)
                }
                do {
                    try FileSystem.syncDirectory(folder)
                } catch let error as DocumentError {
                    return Replacement(map: map, mapLength: Int64(bytes.count), overlay: overlay, failure: error)
                }
                return Replacement(map: map, mapLength: Int64(bytes.count), overlay: overlay, failure: nil)
            } catch {
                try? map.close()  // Squash close error and throw the first one.
                try? FileSystem.removeFile(mapAside)
                throw error
            }
        } catch {
            try? overlay.close()  // Squash close error and throw the first one.
            try? FileSystem.removeFile(overlayAside)
            throw error
        }
    }

    /// Switches to `newBase` and empties the overlay: new empty files are made aside and renamed into place, then
    /// the state switched, all under the lock, so a read sees the old store or the new one, never a mix.
    ///
    /// Call it between transactions, once `newBase` holds what SQLite sees now (a save's new bundle): SQLite's cache
    /// stays valid, since every page reads the same.
    ///
    /// Once the new map is in place the switch is made, whatever fails after it: the new map names no page, so
    /// the overlay file under the name `overlay` (the new one, or the old one when its rename failed) is unseen
    /// until written again; a folder flush that failed is done again by the next `xSync` before that returns, so
    /// no commit is acknowledged on a map whose name may not be durable. The store stays writable.
    ///
    /// - Throws: I/O errors before the new map was in place: the overlay and base are then unchanged (a save's
    ///   pending-base record tells recovery which bundle holds their content).
    func reset(newBase: any ServedStore, identity: OverlayMap.BaseIdentity, digest: String) throws {
        let header = OverlayMap.Header(pageSize: pageSize, baseIdentity: identity, baseDigest: digest,
                                       baseSize: newBase.size)
        try state.withLock { state in
            let files = try Self.replaceFiles(in: folder, header: header)
            // > The old files and base are closed off the caller's path: the old bundle, replaced by a save,
            // > frees its blocks as its last descriptor closes.
            FileSystem.retire(files.overlay == nil ? [state.map] : [state.overlay, state.map], [state.base])
            state.base = newBase
            state.overlay = files.overlay ?? state.overlay
            state.map = files.map
            state.mapLength = files.mapLength
            state.sequence = 0
            state.present = PageSet()
            state.pending = PageSet()
            state.logicalSize = newBase.size
            state.baseLimit = newBase.size
            state.recordedSize = newBase.size
            state.recordedLimit = newBase.size
            state.isOverlayDirty = false
            state.awaitsChange = false
            state.header = header
            state.hasPendingBase = false
            state.needsFolderSync = files.failure != nil
        }
    }
}

// MARK: - Saves and recovery

extension OverlayStore {
    /// Appends a pending-base record naming `digest`, the store digest of the bundle a save is about to rename into
    /// place, and flushes it (FORMAT.md 16.2): recovery after a crash between that rename and ``reset(newBase:identity:digest:)``
    /// knows the overlay's content is in that bundle. Call it between transactions (a save holds the writers).
    ///
    /// - Throws: I/O errors (the record is then cut off again); the store's own failure once it is unwritable.
    func appendPendingBase(digest: String) throws {
        try state.withLock { state in
            try Self.sync(&state, self)
            let record = OverlayMap.Record(sequence: state.sequence + 1, logicalSize: state.logicalSize,
                                           baseLimit: state.baseLimit, pages: [], pendingBase: digest)
            let bytes = OverlayMap.encode(record)
            do {
                try bytes.withUnsafeBytes { raw in
                    try Self.writeAll(state.map, raw.baseAddress!, count: raw.count, at: state.mapLength, path: mapPath)
                }
                try Self.dataSync(state.map, path: mapPath)
            } catch {
                try? Self.resize(state.map, to: state.mapLength, path: mapPath)  // Squash: recovery cuts it too.
                throw error
            }
            state.mapLength += Int64(bytes.count)
            state.sequence = record.sequence
            state.awaitsChange = true
            state.hasPendingBase = true
        }
    }

    /// The map in `folder`, read (its header checked, its records up to the last good one), without opening or
    /// changing anything; `nil` when the folder has no map.
    ///
    /// - Throws: ``DocumentError/Code/storeCorrupt`` when the header is damaged; I/O errors.
    static func readMap(in folder: FilePath) throws -> OverlayMap? {
        let path = folder.appending(mapName)
        guard try FileSystem.exists(path) else { return nil }
        let map = try openFile(path, creating: false)
        defer { try? map.close() }  // Squash close error: nothing was written.
        let bytes = try FileSystem.read(map, at: 0, count: Int(fileSize(map, path: path)), path: path)
        return try OverlayMap(parsing: bytes, path: path)
    }

    /// Removes the files a reset or a creation cut short left in `folder` (`.overlay.*.partial`, `.map.*.partial`):
    /// none of them is ever read. Call it only while holding the working copy's lock.
    static func removeLeftovers(in folder: FilePath) {
        guard let names = try? FileSystem.contentsOfDirectory(folder) else { return }
        for name in names where name.hasSuffix(".partial")
            && (name.hasPrefix(".\(overlayName).") || name.hasPrefix(".\(mapName).")) {
            try? FileSystem.removeFile(folder.appending(name))  // housekeeping; never fails an open
        }
    }

    /// The lowest logical size since the base was taken: the base's bytes are seen below it only.
    var baseLimit: Int64 { state.withLock { $0.baseLimit } }
}

// MARK: - What the save reads

extension OverlayStore {
    /// The store's size as SQLite sees it.
    var size: Int64 { state.withLock { $0.logicalSize } }
    /// The store's size as SQLite sees it.
    var logicalSize: Int64 { size }
    /// The working folder, for errors.
    var origin: FilePath { folder }
    /// The base the overlay lies over.
    var base: any ServedStore { state.withLock { $0.base } }

    /// The blocks (of ``pageSize`` bytes) `overlay` holds, in order: those the map records and those written since.
    var presentPages: PageSet { state.withLock { $0.present } }

    /// Asks the kernel to read `overlay`'s bytes in `range` into the page cache in the background
    /// (`posix_fadvise(POSIX_FADV_WILLNEED)`): a save reading the store in order asks for the bytes ahead of it, so
    /// that reading an overlay that holds most of the store overlaps the deflating instead of waiting for the disk.
    /// Only advice: the reads are the same with or without it. Only runs of present blocks are asked for: the
    /// kernel would fill the page cache with zeros for the holes between them (a sparse overlay of a few pages
    /// under a large store).
    func readAhead(_ range: Range<Int64>) {
        state.withLock { state in
            guard !state.present.isEmpty else { return }
            let block = Int64(pageSize)
            var index = max(0, range.lowerBound) / block
            let end = (max(0, range.upperBound) + block - 1) / block
            while index < end {
                guard state.present.contains(index) else {
                    index += 1
                    continue
                }
                let first = index
                while index < end, state.present.contains(index) { index += 1 }
                _ = posix_fadvise(state.overlay.rawValue, off_t(first * block), off_t((index - first) * block),
                                  POSIX_FADV_WILLNEED)
            }
        }
    }

    /// Copies `count` bytes at `offset` as SQLite reads them (base and overlay composed) into `buffer`; returns how
    /// many lie inside the logical size (the rest is zeros).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws -> Int {
        try state.withLock { state in try Self.view(state, into: buffer, count: count, at: offset, self) }
    }

    /// Records why a read or write failed, for the caller to report (the first one is kept).
    func fail(_ error: DocumentError) { firstFailure.record(error) }

    /// The first failure SQLite met reading or writing the store (a damaged base segment, a full disk).
    var failure: DocumentError? { firstFailure.error }

    /// Called in `xSync` once `overlay` is flushed, before the record is appended; `nil` in production (tests take
    /// a crash image there).
    var afterOverlaySync: (@Sendable () -> Void)? {
        get { state.withLock { $0.afterOverlaySync } }
        set { state.withLock { $0.afterOverlaySync = newValue } }
    }

    /// The most blocks one record of `map` names: ``defaultPagesPerRecord`` in production (tests make records of a
    /// few pages).
    var pagesPerRecord: Int {
        get { state.withLock { $0.pagesPerRecord } }
        set { state.withLock { $0.pagesPerRecord = max(1, newValue) } }
    }

    /// The failure SQLite met reading or writing (a damaged base segment, named) in place of its "disk I/O error".
    func reported(_ error: any Error) -> any Error {
        failure ?? error
    }
}

// MARK: - What the VFS calls

extension OverlayStore {
    /// Marks the store open by SQLite; `false` when it is open already.
    func attach() -> Bool {
        state.withLock { state in
            guard !state.isAttached else { return false }
            state.isAttached = true
            return true
        }
    }

    /// Marks the store closed by SQLite.
    func detach() { state.withLock { $0.isAttached = false } }

    /// `xRead`: the bytes as SQLite sees them, zeros past the logical size (`SQLITE_IOERR_SHORT_READ`).
    func sqliteRead(_ buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) -> Int32 {
        do {
            let read = try read(into: buffer, count: count, at: offset)
            return read == count ? SQLITE_OK : md_sqlite_ioerr_short_read
        } catch {
            record(error, "cannot read the store")
            return md_sqlite_ioerr_read
        }
    }

    /// `xWrite`: into `overlay`, whole blocks made present.
    func sqliteWrite(_ buffer: UnsafeRawPointer, count: Int, at offset: Int64) -> Int32 {
        do {
            try state.withLock { state in
                try Self.write(&state, buffer, count: count, at: offset, self)
            }
            return SQLITE_OK
        } catch {
            record(error, "cannot write the store")
            return md_sqlite_ioerr_write
        }
    }

    /// `xTruncate`: the new logical size (`overlay` cut there too, so that a store grown again reads zeros). A
    /// store made smaller is recorded at once, as at `xSync`.
    func sqliteTruncate(_ size: Int64) -> Int32 {
        do {
            try state.withLock { state in
                guard size < state.logicalSize else {
                    state.logicalSize = size
                    return
                }
                try Self.resize(state.overlay, to: size, path: overlayPath)
                // > A page wholly past the end reads zeros whether it is present (the overlay is cut) or not (past
                // > the base limit): it is forgotten, so the sets never outgrow the store.
                let end = size / Int64(pageSize) + (size % Int64(pageSize) == 0 ? 0 : 1)
                state.present.removeAll(from: end)
                state.pending.removeAll(from: end)
                state.baseLimit = min(state.baseLimit, size)
                state.logicalSize = size
                state.isOverlayDirty = true
                // > In a rollback journal mode, SQLite makes the file smaller once the commit's journal is deleted,
                // > and calls no xSync after it (pager_end_transaction): without a record, the map would keep the
                // > larger size after a crash or a close, and a save would copy the dead pages past the store's end.
                try Self.sync(&state, self)
            }
            return SQLITE_OK
        } catch {
            record(error, "cannot truncate the store")
            return md_sqlite_ioerr_truncate
        }
    }

    /// `xSync`: `overlay` flushed, then one record appended to `map` and flushed.
    func sqliteSync() -> Int32 {
        do {
            try state.withLock { state in
                try Self.sync(&state, self)
            }
            return SQLITE_OK
        } catch {
            record(error, "cannot flush the store")
            return md_sqlite_ioerr_fsync
        }
    }

    /// Records why a call failed: the base's own error (a damaged segment) as it is, any other wrapped.
    private func record(_ error: any Error, _ what: String) {
        if let error = error as? DocumentError {
            fail(error)
        } else {
            fail(DocumentError(.ioFailure, path: folder, reason: "\(what): \(error)"))
        }
    }
}

// MARK: - Reading, writing and syncing under the lock

extension OverlayStore {
    /// Copies the store's bytes at `offset` into `buffer`: runs of present blocks from `overlay`, other runs from the
    /// base below the base limit, zeros elsewhere. Returns how many lie inside the logical size.
    private static func view(_ state: State, into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64,
                             _ store: OverlayStore) throws -> Int {
        let block = Int64(store.pageSize)
        let visible = Int(max(0, min(Int64(count), state.logicalSize - offset)))
        var done = 0
        while done < visible {
            let position = offset + Int64(done)
            let isPresent = state.present.contains(position / block)
            var end = min(visible, done + Int(block - position % block))
            while end < visible, state.present.contains((offset + Int64(end)) / block) == isPresent {
                end = min(visible, end + Int(block))
            }
            let length = end - done
            var filled = 0
            if isPresent {
                let target = UnsafeMutableRawBufferPointer(start: buffer + done, count: length)
                filled = try FileSystem.read(state.overlay, at: position, into: target, path: store.overlayPath)
            } else if state.baseLimit > position {
                let fromBase = Int(min(Int64(length), state.baseLimit - position))
                filled = try state.base.read(into: buffer + done, count: fromBase, at: position)
            }
            (buffer + done + filled).initializeMemory(as: UInt8.self, repeating: 0, count: length - filled)
            done = end
        }
        (buffer + visible).initializeMemory(as: UInt8.self, repeating: 0, count: count - visible)
        return visible
    }

    /// Writes `count` bytes at `offset` into `overlay`. Runs of whole blocks and of blocks already present are
    /// written as they are; a block partly written and not yet present is composed first (``compose``).
    private static func write(_ state: inout State, _ bytes: UnsafeRawPointer, count: Int, at offset: Int64,
                              _ store: OverlayStore) throws {
        let block = store.pageSize
        var done = 0
        while done < count {
            let position = offset + Int64(done)
            let first = position / Int64(block)
            let take = min(count - done, block - Int(position % Int64(block)))
            if take < block, !state.present.contains(first) {
                try compose(&state, block: first, with: bytes + done, count: take, at: position, store)
                done += take
                continue
            }
            var end = done + take
            var blocks = [first]
            while end < count {
                let next = min(count - end, block)
                guard next == block || state.present.contains(first + Int64(blocks.count)) else { break }
                blocks.append(first + Int64(blocks.count))
                end += next
            }
            try writeAll(state.overlay, bytes + done, count: end - done, at: position, path: store.overlayPath)
            for index in blocks {
                if state.present.insert(index) { state.pending.insert(index) }
            }
            done = end
        }
        state.logicalSize = max(state.logicalSize, offset + Int64(count))
        state.isOverlayDirty = true
    }

    /// Makes block `index` present with `count` new bytes at `position` in it: the whole block is written, the rest
    /// of it as SQLite reads it now (base, or zeros past the logical size).
    private static func compose(_ state: inout State, block index: Int64, with bytes: UnsafeRawPointer, count: Int,
                                at position: Int64, _ store: OverlayStore) throws {
        let block = store.pageSize
        let start = index * Int64(block)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        _ = try view(state, into: buffer, count: block, at: start, store)
        (buffer + Int(position - start)).copyMemory(from: bytes, byteCount: count)
        try writeAll(state.overlay, buffer, count: block, at: start, path: store.overlayPath)
        state.present.insert(index)
        state.pending.insert(index)
    }

    /// `overlay` flushed, then records naming the blocks made present since the last one (at most
    /// ``defaultPagesPerRecord`` each), the logical size and the base limit appended to `map`, and `map` flushed once.
    /// Nothing is appended when nothing changed, except after a pending base (``State/awaitsChange``).
    ///
    /// A transaction of many pages is recorded in several records, so that no record, and no array of its pages,
    /// grows with the store. A crash between two of them is as safe as a torn record: a block made present since
    /// the last `xSync` was the base's before it, so where it is not recorded it reads as it did before the
    /// transaction, and SQLite's hot journal rolls back the blocks that are.
    private static func sync(_ state: inout State, _ store: OverlayStore) throws {
        let wrote = state.isOverlayDirty
        if wrote {
            try dataSync(state.overlay, path: store.overlayPath)
            state.isOverlayDirty = false
        }
        guard !state.pending.isEmpty || state.logicalSize != state.recordedSize
            || state.baseLimit != state.recordedLimit || (wrote && state.awaitsChange) else { return }
        state.afterOverlaySync?()
        var sequence = state.sequence
        var end = state.mapLength
        do {
            var pages: [Int64] = []
            pages.reserveCapacity(min(state.pending.count, state.pagesPerRecord))
            func append(_ pages: [Int64], _ state: State) throws {
                sequence += 1
                let record = OverlayMap.Record(sequence: sequence, logicalSize: state.logicalSize,
                                               baseLimit: state.baseLimit, pages: pages)
                let bytes = OverlayMap.encode(record)
                try bytes.withUnsafeBytes { raw in
                    try writeAll(state.map, raw.baseAddress!, count: raw.count, at: end, path: store.mapPath)
                }
                end += Int64(bytes.count)
            }
            try state.pending.forEach { page in
                pages.append(page)
                if pages.count == state.pagesPerRecord {
                    try append(pages, state)
                    pages.removeAll(keepingCapacity: true)
                }
            }
            if !pages.isEmpty || sequence == state.sequence { try append(pages, state) }
            try dataSync(state.map, path: store.mapPath)
        } catch {
            // > The records are written again, whole, at the same place at the next xSync; a torn rest is cut off.
            try? resize(state.map, to: state.mapLength, path: store.mapPath)  // Squash: recovery cuts it too.
            if wrote { state.isOverlayDirty = true }  // the next xSync records this write still
            throw error
        }
        state.mapLength = end
        state.sequence = sequence
        state.awaitsChange = false
        state.pending = PageSet()
        state.recordedSize = state.logicalSize
        state.recordedLimit = state.baseLimit
        if state.needsFolderSync {
            try FileSystem.syncDirectory(store.folder)
            state.needsFolderSync = false
        }
        if !state.hasPendingBase, state.mapLength > compactionThreshold(state) { compact(&state, store) }
    }

    /// The map's length past which it is compacted: four times what a compacted map of the present pages takes, and
    /// at least 256 KiB (a store that shrinks and grows again records the same pages again and again; the map is
    /// read whole at recovery, so it must not grow without bound between saves).
    private static func compactionThreshold(_ state: State) -> Int64 {
        let records = Int64(max(1, (state.present.count + state.pagesPerRecord - 1) / state.pagesPerRecord))
        let compacted = Int64(OverlayMap.encode(state.header).count) + records * Int64(OverlayMap.recordOverhead)
            + Int64(state.present.count) * 8
        return max(256 << 10, 4 * compacted)
    }

    /// Rewrites the map as its header and records naming every present page, the logical size and the base limit,
    /// the same state in fewer bytes: written aside, flushed, renamed over the map, and the folder flushed. Called
    /// right after a record was flushed (nothing pending): recovery reads the same from the old map or the new one,
    /// whichever a crash leaves. A failure before the rename leaves the old map, which stays in use; a folder flush
    /// that fails after it is done again by the next `xSync` before that returns.
    private static func compact(_ state: inout State, _ store: OverlayStore) {
        let aside = store.folder.appending(".\(mapName).\(FileSystem.randomSuffix()).partial")
        var bytes = OverlayMap.encode(state.header)
        var sequence: UInt64 = 0
        var pages: [Int64] = []
        func append() {
            sequence += 1
            bytes += OverlayMap.encode(OverlayMap.Record(sequence: sequence, logicalSize: state.logicalSize,
                                                         baseLimit: state.baseLimit, pages: pages))
            pages.removeAll(keepingCapacity: true)
        }
        state.present.forEach { page in
            pages.append(page)
            if pages.count == state.pagesPerRecord { append() }
        }
        if !pages.isEmpty || sequence == 0 { append() }
        let map: FileDescriptor
        do {
            map = try openFile(aside, creating: true)
        } catch {
            return  // the old map stays in use: compaction is only housekeeping
        }
        do {
            try bytes.withUnsafeBytes { raw in try writeAll(map, raw.baseAddress!, count: raw.count, at: 0, path: aside) }
            try dataSync(map, path: aside)
            try FileSystem.rename(aside, to: store.mapPath)
        } catch {
            try? map.close()  // Squash cleanup errors: the old map stays in use, whole.
            try? FileSystem.removeFile(aside)
            return
        }
        FileSystem.retire([state.map], [])
        state.map = map
        state.mapLength = Int64(bytes.count)
        state.sequence = sequence
        do {
            try FileSystem.syncDirectory(store.folder)
        } catch {
            state.needsFolderSync = true
        }
    }

    /// The most blocks one record of `map` names (512 KiB of page numbers).
    static let defaultPagesPerRecord = 65_536
}

// MARK: - Files

extension OverlayStore {
    /// Opens a working file for reading and writing (mode 0600 when it is created), without following a link.
    private static func openFile(_ path: FilePath, creating: Bool) throws -> FileDescriptor {
        do {
            if creating {
                return try FileIO.create(path, .readWrite, options: [.noFollow, .closeOnExec],
                                         permissions: [.ownerReadWrite])
            }
            return try FileDescriptor.open(path, .readWrite, options: [.noFollow, .closeOnExec])
        } catch let error as Errno {
            if error == .noSuchFileOrDirectory {
                throw DocumentError(.notFound, path: path, reason: "no such file", underlyingError: error)
            }
            throw DocumentError(.cannotCreate, path: path, reason: "cannot open the working copy's file",
                                underlyingError: error)
        }
    }

    /// The size of an open file (`fstat(2)`).
    private static func fileSize(_ descriptor: FileDescriptor, path: FilePath) throws -> Int64 {
        try FileSystem.status(of: descriptor, path: path).size
    }

    /// `ftruncate(2)`.
    private static func resize(_ descriptor: FileDescriptor, to size: Int64, path: FilePath) throws {
        try FileSystem.resize(descriptor, to: size, path: path)
    }

    /// `fdatasync(2)`: the file's bytes and size made durable.
    private static func dataSync(_ descriptor: FileDescriptor, path: FilePath) throws {
        try FileSystem.dataSync(descriptor, path: path)
    }

    /// `pwrite(2)` of all `count` bytes at `offset`.
    private static func writeAll(_ descriptor: FileDescriptor, _ bytes: UnsafeRawPointer, count: Int, at offset: Int64,
                                 path: FilePath) throws {
        try FileSystem.write(descriptor, UnsafeRawBufferPointer(start: bytes, count: count), at: offset, path: path)
    }
}
