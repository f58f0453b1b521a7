import Crypto
import Foundation
@_spi(Core) import MDZCore
import ManagedDocument
import SystemPackage

/// Records every change the library makes under a folder (through ``FileIO``) and builds from them the states a
/// power cut can leave, in the manner of SQLite's crash-test VFS, ALICE (OSDI '14) and CrashMonkey (OSDI '18).
///
/// The persistence model (docs/RELIABILITY.md, "Crash states"):
/// - A file's bytes and size written since its last `fsync`/`fdatasync` may each be missing after a cut, in any
///   combination, and the last write to a file may be torn at a 4 KiB page (its first pages there, the rest not).
/// - A name made, moved or removed in a folder (create, link, rename, unlink, mkdir, rmdir) since that folder's
///   last `fsync` may be missing, with every later change to names in the same folder (a folder's changes persist
///   in the order they were made, as journaling file systems commit them); a rename is atomic: the old name or the
///   new one. A flush of a file does not make its name durable.
/// - What `fsync`/`fdatasync` returned for, and what a folder's `fsync` returned for, is durable.
/// - A write may be torn: its first part reached the disk, the rest holds the old bytes or garbage (a write of more
///   than 4 KiB torn at a page, a smaller one at a 512-byte sector or, below that, in the middle).
/// - SQLite's own files (the rollback journal, the WAL, an extracted working store) are written through the
///   library's ``WorkingFilesVFS``, which reports each of SQLite's changes like the library's own: the model holds
///   them as a power cut would leave them, not as they are in the page cache.
///
/// States are taken just before and just after every flush, at every mark the test sets, and at the end; at each
/// such point: nothing unflushed persisted, everything persisted (what a killed process leaves), every prefix of
/// the unflushed changes in the order they were made (ALICE's in-order persistence), everything but one change and
/// everything but two (for a change to names, with the later changes in its folder), and everything with one write
/// torn, its rest old bytes or garbage (each of up to `maximumDrops` of the prefixes, drops and tears, and at most
/// 24 pairs).
/// Each state says its ``CrashState/Kind``, so a run counts them by kind.
final class CrashRecorder: FileIO.Observer, @unchecked Sendable {  // every field is guarded by `lock`
    let root: FilePath
    private let lock = NSLock()
    private var operations: [Operation] = []
    private var identities: [FileKey: Int] = [:]
    private var files = 0
    /// The names as the process sees them now (files made, linked, renamed and removed through the library).
    private var currentNames: [String: Int] = [:]
    private var initialContent: [Int: [UInt8]] = [:]
    private var initialNames: [String: Int] = [:]
    private var initialFolders: Set<String> = []

    struct FileKey: Hashable { var device: UInt64; var inode: UInt64 }

    enum Operation {
        case write(file: Int, offset: Int64, bytes: [UInt8])
        case truncate(file: Int, size: Int64)
        case sync(file: Int)
        case name(String, file: Int)
        case rename(String, to: String)
        case unlink(String)
        case makeFolder(String)
        case removeFolder(String)
        case syncFolder(String)
        case mark(String)

        var isFlush: Bool {
            switch self {
            case .sync, .syncFolder: return true
            default: return false
            }
        }
    }

    /// Events left out of the record, as if the code had not made them (the checker's own check): called with
    /// each event and the one before it in the record.
    private let dropping: (@Sendable (FileIO.Event, FileIO.Event?) -> Bool)?
    private var previous: FileIO.Event?

    /// Starts recording under `root` (its files and folders now are the initial, durable state); `dropping` leaves
    /// the events it picks out of the record.
    init(root: FilePath, dropping: (@Sendable (FileIO.Event, FileIO.Event?) -> Bool)? = nil) throws {
        self.root = root
        self.dropping = dropping
        try snapshot(root, relative: "")
    }

    private func snapshot(_ folder: FilePath, relative: String) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.string).sorted() {
            let path = folder.appending(name)
            let key = relative.isEmpty ? name : relative + "/" + name
            var info = stat()
            guard lstat(path.string, &info) == 0 else { continue }
            if info.st_mode & S_IFMT == S_IFDIR {
                initialFolders.insert(key)
                try snapshot(path, relative: key)
            } else if info.st_mode & S_IFMT == S_IFREG {
                let id = identity(FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
                initialContent[id] = Array(try Data(contentsOf: URL(fileURLWithPath: path.string)))
                initialNames[key] = id
                currentNames[key] = id
            }
        }
    }

    /// Marks this point: a state is taken here, and `label` tells the checker what was acknowledged.
    func mark(_ label: String) {
        lock.withLock { operations.append(.mark(label)) }
    }

    private func identity(_ key: FileKey) -> Int {
        if let id = identities[key] { return id }
        return newIdentity(key)
    }

    /// A new file for `key`: an inode number is used again once its file is gone (SQLite removes its own files
    /// outside the library), so a file made now is never taken for one seen before.
    private func newIdentity(_ key: FileKey) -> Int {
        let id = files
        files += 1
        identities[key] = id
        return id
    }

    private func relative(_ path: FilePath?) -> String? {
        guard let path, path.starts(with: root), path != root else { return nil }
        return path.components.dropFirst(root.components.count).map(\.string).joined(separator: "/")
    }

    private func key(of descriptor: FileDescriptor) -> FileKey? {
        var info = stat()
        guard fstat(descriptor.rawValue, &info) == 0 else { return nil }
        return FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    private func key(of path: FilePath) -> FileKey? {
        var info = stat()
        guard lstat(path.string, &info) == 0 else { return nil }
        return FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// The file a write, truncation or flush acts on: its descriptor's, or, for a file SQLite's default VFS holds
    /// open (``FileIO/observing(_:_:)`` has no descriptor), the one under its name.
    private func key(of event: FileIO.Event) -> FileKey? {
        if let descriptor = event.descriptor { return key(of: descriptor) }
        return key(of: event.path)
    }

    func willPerform(_ event: FileIO.Event) throws {}

    func didPerform(_ event: FileIO.Event) {
        lock.withLock {
            defer {
                previous = event
                previous?.bytes = nil  // valid during the call only
            }
            if let dropping, dropping(event, previous) { return }
            let path = relative(event.path), destination = relative(event.destination)
            switch event.kind {
            case .write:
                guard path != nil, let key = key(of: event), let bytes = event.bytes else { return }
                operations.append(.write(file: identity(key), offset: event.offset, bytes: Array(bytes)))
            case .truncate:
                guard path != nil, let key = key(of: event) else { return }
                operations.append(.truncate(file: identity(key), size: event.size))
            case .sync, .dataSync:
                guard path != nil, let key = key(of: event) else { return }
                operations.append(.sync(file: identity(key)))
            case .create:
                guard let path, let key = key(of: event.path) else { return }
                guard currentNames[path] == nil || currentNames[path] != identities[key] else { return }
                let id = newIdentity(key)
                currentNames[path] = id
                operations.append(.name(path, file: id))
            case .link:
                guard let destination, let target = event.destination, let key = key(of: target) else { return }
                // > An unnamed file (O_TMPFILE) is new; a named one is the file under its name.
                let id = event.descriptor != nil ? newIdentity(key) : (path.flatMap { currentNames[$0] } ?? identity(key))
                currentNames[destination] = id
                operations.append(.name(destination, file: id))
            case .rename:
                guard let path, let destination else { return }
                currentNames[destination] = currentNames[path]
                currentNames[path] = nil
                operations.append(.rename(path, to: destination))
            case .unlink:
                guard let path else { return }
                currentNames[path] = nil
                operations.append(.unlink(path))
            case .makeDirectory:
                guard let path else { return }
                operations.append(.makeFolder(path))
            case .removeDirectory:
                guard let path else { return }
                operations.append(.removeFolder(path))
            case .syncDirectory:
                guard let path = path ?? (event.path == root ? "" : nil) else { return }
                operations.append(.syncFolder(path))
            }
        }
    }

    /// The recorded operations, for the tests' own checks.
    var recorded: [Operation] { lock.withLock { operations } }
}

/// A state a power cut can leave: every file's bytes and every folder's names.
struct CrashState {
    var folders: Set<String>
    var files: [String: [UInt8]]
    /// The marks set before the point it was taken at.
    var marks: [String]
    /// Where it was taken (the operation's index) and how (for failure messages).
    var description: String
    /// Which of the model's variants it is.
    var kind: Kind
    /// Whether it was taken at a mark or at the end (not at a flush, where a change may be under way).
    var isAtMark: Bool

    /// The model's variants of the changes not yet flushed at a point.
    enum Kind: String, CaseIterable, Sendable {
        case all = "all persisted"
        case none = "none persisted"
        case prefix = "a prefix persisted"
        case allButOne = "all but one"
        case allButTwo = "all but two"
        case tornOld = "a write torn (old bytes)"
        case tornGarbage = "a write torn (garbage)"
    }

    /// A digest of the content, to count and check each distinct state once.
    var digest: String {
        var hasher = SHA256()
        for folder in folders.sorted() { hasher.update(data: Array("d:\(folder)\n".utf8)) }
        for (name, bytes) in files.sorted(by: { $0.key < $1.key }) {
            hasher.update(data: Array("f:\(name):\(bytes.count)\n".utf8))
            hasher.update(data: bytes)
        }
        hasher.update(data: Array(marks.joined(separator: ",").utf8))
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// Replaces everything under `root` with this state.
    func materialize(at root: FilePath) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: root.string) {
            try FileManager.default.removeItem(atPath: root.appending(name).string)
        }
        for folder in folders.sorted() {
            try FileManager.default.createDirectory(atPath: root.appending(folder).string, withIntermediateDirectories: true)
        }
        for (name, bytes) in files {
            let path = root.appending(name)
            try FileManager.default.createDirectory(atPath: path.removingLastComponent().string,
                                                    withIntermediateDirectories: true)
            try Data(bytes).write(to: URL(fileURLWithPath: path.string))
        }
    }
}

extension CrashRecorder {
    /// Hands each distinct state a power cut can leave during the recording (see the type's persistence model) to
    /// `body`, in the order they arise, one at a time: a state holds every file's bytes, so they are never all held
    /// at once (only their digests, to hand each once). Returns how many there were.
    @discardableResult
    func forEachState(maximumDrops: Int = 12, _ body: (CrashState) async throws -> Void) async rethrows -> Int {
        let (operations, content, names, folders) = lock.withLock { (self.operations, initialContent, initialNames, initialFolders) }
        var builder = StateBuilder(content: content, names: names, folders: folders)
        var seen: Set<String> = []
        func take(_ index: Int, atMark: Bool) async throws {
            for var state in builder.variants(at: index, maximumDrops: maximumDrops) where seen.insert(state.digest).inserted {
                state.isAtMark = atMark
                try await body(state)
            }
        }
        for (index, operation) in operations.enumerated() {
            if operation.isFlush { try await take(index, atMark: false) }
            builder.apply(operation, index: index)
            if operation.isFlush { try await take(index + 1, atMark: false) }
            if case .mark = operation { try await take(index + 1, atMark: true) }
        }
        try await take(operations.count, atMark: true)
        return seen.count
    }
}

/// Replays recorded operations, keeping what is durable apart from what is not yet.
private struct StateBuilder {
    var durableContent: [Int: [UInt8]]
    var durableNames: [String: Int]
    var durableFolders: Set<String>
    /// Changes to each file not yet flushed, in order (operation index, operation).
    var pendingData: [Int: [(Int, CrashRecorder.Operation)]] = [:]
    /// Changes to names not yet flushed, in order.
    var pendingNames: [(Int, CrashRecorder.Operation)] = []
    var marks: [String] = []

    init(content: [Int: [UInt8]], names: [String: Int], folders: Set<String>) {
        durableContent = content
        durableNames = names
        durableFolders = folders
    }

    mutating func apply(_ operation: CrashRecorder.Operation, index: Int) {
        switch operation {
        case .write(let file, _, _), .truncate(let file, _):
            pendingData[file, default: []].append((index, operation))
        case .sync(let file):
            durableContent[file] = Self.content(durableContent[file] ?? [], pendingData[file] ?? [])
            pendingData[file] = nil
        case .name, .rename, .unlink, .makeFolder, .removeFolder:
            pendingNames.append((index, operation))
        case .syncFolder(let folder):
            var kept: [(Int, CrashRecorder.Operation)] = []
            for change in pendingNames {
                if Self.folders(of: change.1).contains(folder) {
                    Self.applyName(change.1, to: &durableNames, folders: &durableFolders)
                } else {
                    kept.append(change)
                }
            }
            pendingNames = kept
        case .mark(let label):
            marks.append(label)
        }
    }

    /// The states at this point: nothing pending persisted, all of it, a prefix of it, all but one change, all but
    /// two, one write torn (its rest old bytes, or garbage).
    func variants(at index: Int, maximumDrops: Int) -> [CrashState] {
        let pending = (pendingData.values.flatMap { $0 } + pendingNames).sorted { $0.0 < $1.0 }.map(\.0)
        var states = [state(keeping: { _ in true }, torn: [:], .all, "after \(index): all"),
                      state(keeping: { _ in false }, torn: [:], .none, "after \(index): none")]
        let step = max(1, pending.count / max(1, maximumDrops))
        for dropped in stride(from: 0, to: pending.count, by: step) {
            let gone = withLaterNames(pending[dropped])
            states.append(state(keeping: { !gone.contains($0) }, torn: [:], .allButOne, "after \(index): all but \(pending[dropped])"))
        }
        // > Pairs: up to `maximumDrops` of them and never more than `maximumPairs` (there are n(n-1)/2: all of them
        // > would grow as the square of the changes), spread over the pending changes (deterministic).
        if pending.count >= 2 {
            let pairs = min(maximumDrops, Self.maximumPairs, pending.count * (pending.count - 1) / 2)
            for pair in 0..<pairs {
                let first = (pair * 7919) % pending.count
                let second = (first + 1 + (pair * 104_729) % (pending.count - 1)) % pending.count
                let gone = withLaterNames(pending[first]).union(withLaterNames(pending[second]))
                states.append(state(keeping: { !gone.contains($0) }, torn: [:], .allButTwo,
                                    "after \(index): all but \(pending[first]) and \(pending[second])"))
            }
        }
        for end in stride(from: 1, to: pending.count, by: step) {
            let last = pending[end - 1]
            states.append(state(keeping: { $0 <= last }, torn: [:], .prefix, "after \(index): the first \(end) changes"))
        }
        let writes = pendingData.values.flatMap { changes in
            changes.compactMap { change -> Int? in
                if case .write(_, _, let bytes) = change.1, bytes.count > 1 { return change.0 }
                return nil
            }
        }.sorted()
        let tearStep = max(1, writes.count / max(1, maximumDrops))
        for torn in stride(from: 0, to: writes.count, by: tearStep) {
            let write = writes[torn]
            states.append(state(keeping: { _ in true }, torn: [write: false], .tornOld, "after \(index): write \(write) torn"))
            states.append(state(keeping: { _ in true }, torn: [write: true], .tornGarbage,
                                "after \(index): write \(write) torn, garbage after the tear"))
        }
        return states
    }

    /// The most pairs of changes left out at one point, whatever `maximumDrops` says.
    static let maximumPairs = 24

    /// The change at `operation`, with, for a change to names, the later changes in its folders (which go with it).
    private func withLaterNames(_ operation: Int) -> Set<Int> {
        var gone: Set<Int> = [operation]
        if let change = pendingNames.first(where: { $0.0 == operation }) {
            let folders = Set(Self.folders(of: change.1))
            for later in pendingNames where later.0 > operation && !folders.isDisjoint(with: Self.folders(of: later.1)) {
                gone.insert(later.0)
            }
        }
        return gone
    }

    /// Where a write of `count` bytes tears: at a 4 KiB page past its middle for a large one, at a 512-byte sector
    /// for one of 1 KiB to 4 KiB, in the middle below that.
    private static func tear(_ count: Int) -> Int {
        if count > 4096 { return (count / 2 / 4096) * 4096 }
        if count >= 1024 { return (count / 2 / 512) * 512 }
        return count / 2
    }

    /// The state with the pending changes `isKept` keeps, and the writes in `torn` torn (`true`: garbage after the
    /// tear, `false`: the old bytes).
    private func state(keeping isKept: (Int) -> Bool, torn: [Int: Bool], _ kind: CrashState.Kind,
                       _ description: String) -> CrashState {
        var names = durableNames
        var folders = durableFolders
        for (index, change) in pendingNames where isKept(index) {
            Self.applyName(change, to: &names, folders: &folders)
        }
        // > A name lives only while every folder above it does.
        func isReachable(_ name: String) -> Bool {
            var parts = name.split(separator: "/").dropLast()
            while !parts.isEmpty {
                guard folders.contains(parts.joined(separator: "/")) else { return false }
                parts = parts.dropLast()
            }
            return true
        }
        folders = folders.filter(isReachable)
        var files: [String: [UInt8]] = [:]
        for (name, file) in names where isReachable(name) {
            let changes = (pendingData[file] ?? []).filter { isKept($0.0) }.map { change -> (Int, CrashRecorder.Operation) in
                guard let garbage = torn[change.0], case .write(let id, let offset, let bytes) = change.1 else { return change }
                // > Torn: the first part of the write reached the disk; the rest did not, or reached it as garbage.
                let kept = Self.tear(bytes.count)
                var written = Array(bytes.prefix(kept))
                if garbage {
                    var seed = UInt32(truncatingIfNeeded: change.0) &* 2_654_435_761 | 1
                    for _ in kept..<bytes.count {
                        seed ^= seed << 13; seed ^= seed >> 17; seed ^= seed << 5
                        written.append(UInt8(truncatingIfNeeded: seed))
                    }
                }
                return (change.0, .write(file: id, offset: offset, bytes: written))
            }
            files[name] = Self.content(durableContent[file] ?? [], changes)
        }
        return CrashState(folders: folders, files: files, marks: marks, description: description, kind: kind,
                          isAtMark: false)
    }

    private static func content(_ base: [UInt8], _ changes: [(Int, CrashRecorder.Operation)]) -> [UInt8] {
        var bytes = base
        for (_, change) in changes {
            switch change {
            case .write(_, let offset, let data):
                let end = Int(offset) + data.count
                if bytes.count < end { bytes += [UInt8](repeating: 0, count: end - bytes.count) }
                bytes.replaceSubrange(Int(offset)..<end, with: data)
            case .truncate(_, let size):
                if bytes.count > Int(size) { bytes.removeLast(bytes.count - Int(size)) } else {
                    bytes += [UInt8](repeating: 0, count: Int(size) - bytes.count)
                }
            default: break
            }
        }
        return bytes
    }

    /// The folders whose flush makes a change to names durable.
    private static func folders(of change: CrashRecorder.Operation) -> [String] {
        func parent(_ path: String) -> String { path.split(separator: "/").dropLast().joined(separator: "/") }
        switch change {
        case .name(let path, _), .unlink(let path), .makeFolder(let path), .removeFolder(let path): return [parent(path)]
        case .rename(let from, let to): return [parent(from), parent(to)]
        default: return []
        }
    }

    private static func applyName(_ change: CrashRecorder.Operation, to names: inout [String: Int],
                                  folders: inout Set<String>) {
        switch change {
        case .name(let path, let file): names[path] = file
        case .rename(let from, let to):
            if let file = names[from] {
                names[to] = file
                names[from] = nil
            } else if folders.contains(from) {
                folders.remove(from)
                folders.insert(to)
                for (name, file) in names where name.hasPrefix(from + "/") {
                    names[name] = nil
                    names[to + name.dropFirst(from.count)] = file
                }
            }
        case .unlink(let path): names[path] = nil
        case .makeFolder(let path): folders.insert(path)
        case .removeFolder(let path): folders.remove(path)
        default: break
        }
    }
}
