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

/// Something the walk found under the batch root.
enum BatchCandidate: Sendable {
    /// A legacy store or package to convert.
    case store(LegacyStore, relativePath: String)
    /// A bundle converted from a source that is no longer beside it, by an earlier run.
    case converted(bundle: FilePath, relativePath: String, metadata: DocumentMetadata, bytes: Int64)
    /// Anything else: what it is (`file`, `folder`, `symlink`, `bundle`) and the reason in words.
    case notAStore(FilePath, relativePath: String, kind: BatchItem.Kind, reason: String)
    /// A folder or file that could not be read.
    case unreadable(FilePath, relativePath: String, error: DocumentError)
    /// A file not classified yet (``BatchWalker/walk(classifyingFiles:_:)`` with `false`): ``BatchWalker/classify(_:)``
    /// tells what it is.
    case unclassified(FilePath, relativePath: String, kind: FileSystem.Kind)
    /// An item of a plan, looked at again only when a job takes it.
    case planned(BatchPlan.Item)

    var relativePath: String {
        switch self {
        case .store(_, let path), .converted(_, let path, _, _), .notAStore(_, let path, _, _), .unreadable(_, let path, _),
             .unclassified(_, let path, _):
            return path
        case .planned(let item):
            return item.source
        }
    }
}

/// Finds a batch's candidates: walks the tree by the package's one rule (``StoreTreeWalker``: hidden files included,
/// links never followed, support folders, the tools' own files, backup folders and the inside of packages skipped)
/// and classifies what it finds.
///
/// Beyond the walk's rule, it does not report sidecars whose store exists (`NAME-wal`, `NAME-shm`, `NAME-journal`),
/// report spools (`.NAME.*.spool`: a dead run's is kept for its shard's next run), batch reports and plans (files
/// that start with ``BatchReport/signature`` or a plan's), and bundles whose source is still beside them or that
/// were written after `startedAt` (this run, or a worker running beside it, reports those with their source).
struct BatchWalker {
    var root: FilePath
    var backupDirectory: FilePath?
    var startedAt: Date
    var bundleExtension = BundleLayout.defaultExtension
    /// Whether temporaries left by crashed conversions (unlocked `.NAME.*.partial`, `.NAME.*.partial.d`) are removed
    /// as the walk meets them.
    var removesStaleTemporaries = false

    /// Calls `visit` for every candidate, in directory order, until it returns `false`. With `classifyingFiles`
    /// false, files are visited ``BatchCandidate/unclassified(_:relativePath:kind:)``, for threads of the caller's to
    /// classify with ``classify(_:)`` (reading a file's first bytes is most of a walk's time).
    func walk(classifyingFiles: Bool = true, _ visit: (BatchCandidate) -> Bool) {
        guard let status = try? FileSystem.status(root), status.kind == .directory, !StoreTreeWalker.isPackage(root)
        else {
            // > A root that is a file, or a UIManagedDocument package: one item, converted as `convert` would
            // > (a package is never entered, so its store is never taken for a loose one).
            _ = visit(classify(root, relative: root.lastComponent?.string ?? root.string))
            return
        }
        let walker = StoreTreeWalker(root: root, backupDirectory: backupDirectory, bundleExtension: bundleExtension,
                                     ownSuffixes: [BatchReportSpool.suffix],
                                     removesStaleTemporaries: removesStaleTemporaries)
        walker.walk { entry in
            switch entry {
            case .package(let path, let relative):
                return visit(classify(path, relative: relative))
            case .unreadable(let path, let relative, let error):
                return visit(.unreadable(path, relativePath: relative, error: error))
            case .file(let path, let relative, let status):
                if !classifyingFiles { return visit(.unclassified(path, relativePath: relative, kind: status.kind)) }
                guard let candidate = classifyFile(path, relative: relative, kind: status.kind, status: status) else {
                    return true
                }
                return visit(candidate)
            }
        }
    }

    /// The report's word for what a path is.
    private static func kindName(_ kind: FileSystem.Kind?) -> BatchItem.Kind {
        switch kind {
        case .directory: return .folder
        case .symlink: return .symlink
        default: return .file
        }
    }

    /// A package folder, or the root when it is not a folder.
    private func classify(_ path: FilePath, relative: String) -> BatchCandidate {
        do {
            let kind = try FileSystem.status(path)?.kind
            switch try LegacyDetector.detect(at: path) {
            case .legacyStore(let store): return .store(store, relativePath: relative)
            case .notAStore(let reason):
                return .notAStore(path, relativePath: relative, kind: Self.kindName(kind), reason: reason)
            case .bundle, .sidecar:
                return classifyFile(path, relative: relative, kind: kind ?? .regular)
                    ?? .notAStore(path, relativePath: relative, kind: .file, reason: "part of another item")
            }
        } catch let error as DocumentError {
            return .unreadable(path, relativePath: relative, error: error)
        } catch {
            return .unreadable(path, relativePath: relative,
                               error: DocumentError(.ioFailure, path: path, reason: "cannot be read (\(DocumentError.summary(of: error)))"))
        }
    }

    /// What an unclassified file is; `nil` when it belongs to an item reported elsewhere. Other candidates are
    /// returned as they are.
    func classify(_ candidate: BatchCandidate) -> BatchCandidate? {
        guard case .unclassified(let path, let relative, let kind) = candidate else { return candidate }
        return classifyFile(path, relative: relative, kind: kind)
    }

    /// A file's candidate, or `nil` when the file belongs to an item reported elsewhere. With `status`, the file's
    /// `lstat(2)` the walk just read: it is not read again.
    private func classifyFile(_ path: FilePath, relative: String, kind: FileSystem.Kind,
                              status: Stat? = nil) -> BatchCandidate? {
        let detection: LegacyDetection
        do {
            detection = try status.map { try LegacyDetector.detect(at: path, status: $0) }
                ?? LegacyDetector.detect(at: path)
        } catch let error as DocumentError {
            if error.code == .notFound { return nil }  // vanished since readdir (moved by a worker)
            return .unreadable(path, relativePath: relative, error: error)
        } catch {
            return .unreadable(path, relativePath: relative, error: DocumentError(.ioFailure, path: path, reason: "cannot be read (\(DocumentError.summary(of: error)))"))
        }
        switch detection {
        case .legacyStore(let store):
            return .store(store, relativePath: relative)
        case .sidecar(let store):
            if store != nil || belongsToConvertedStore(path) { return nil }
            return .notAStore(path, relativePath: relative, kind: .file, reason: "a SQLite sidecar file whose store is missing")
        case .notAStore(let reason):
            // > A batch report (this run's, another worker's, a merged one) or a plan is the tool's own file, wherever
            // > it was written: never an item.
            if kind == .regular, Self.isToolFile(at: path) { return nil }
            return .notAStore(path, relativePath: relative, kind: Self.kindName(kind), reason: reason)
        case .bundle:
            return classifyBundle(path, relative: relative)
        }
    }

    /// Whether the file at `path` is a batch report or a batch plan (it starts with their signature).
    static func isToolFile(at path: FilePath) -> Bool {
        let count = max(BatchReport.signature.utf8.count, BatchPlan.signature.utf8.count)
        guard let prefix = FileSystem.prefix(of: path, count: count) else { return false }
        return prefix.starts(with: Array(BatchReport.signature.utf8)) || BatchPlan.isPlan(prefix: prefix)
    }

    /// A sidecar left while its store is being (or was) disposed of after conversion: its bundle is there.
    private func belongsToConvertedStore(_ sidecar: FilePath) -> Bool {
        guard let name = sidecar.lastComponent?.string,
              let suffix = LegacyDetector.sidecarSuffixes.first(where: { name.hasSuffix($0) }) else { return false }
        let store = FilePath(String(sidecar.string.dropLast(suffix.count)))
        let bundle = LegacyStore(source: store, store: store, isPackage: false, sidecars: [], packageFiles: [])
            .defaultBundlePath
        return FileSystem.isRegularFile(bundle)
    }

    private func classifyBundle(_ path: FilePath, relative: String) -> BatchCandidate? {
        let reader: BundleReader
        do {
            reader = try BundleReader(at: path)
        } catch let error as DocumentError {
            return .notAStore(path, relativePath: relative, kind: .bundle, reason: "a damaged bundle (\(error.reason))")
        } catch {
            return .notAStore(path, relativePath: relative, kind: .bundle, reason: "a damaged bundle (\(DocumentError.summary(of: error)))")
        }
        guard let provenance = reader.metadata.provenance else {
            return .notAStore(path, relativePath: relative, kind: .bundle, reason: "a document bundle, not converted from a legacy store")
        }
        let parent = path.removingLastComponent()
        let source = parent.appending(provenance.fileName)
        // Its source is still there: the source's own item reports the pair. Written since this run started (by
        // this run, or by another worker meanwhile): reported by whoever converted it. The file's own time is used
        // because it has the file system's precision; `convertedAt` has whole seconds.
        let writtenAt = (try? FileSystem.status(path))??.modificationTime ?? .infinity
        if (try? FileSystem.exists(source)) != false || writtenAt >= startedAt.timeIntervalSince1970 {
            return nil
        }
        let parentRelative = relative.split(separator: "/").dropLast().joined(separator: "/")
        let sourceRelative = parentRelative.isEmpty ? provenance.fileName : parentRelative + "/" + provenance.fileName
        return .converted(bundle: path, relativePath: sourceRelative, metadata: reader.metadata,
                          bytes: Int64(reader.fileSize))
    }
}
