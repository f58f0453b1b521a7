#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

// A plan: the whole tree walked once, only classifying, its items written to a file for the runs of a fleet.

extension BatchConverter {
    /// Walks the tree once, only classifying, and writes its plan at `path` (aside, then renamed into place); nothing
    /// in the tree is changed. ``progress`` counts the items as they are found. The shard, the dry run, the
    /// migrations and ``BatchOptions/plan`` play no part: a plan holds the whole tree.
    ///
    /// - Returns: the plan's header; `nil` when ``cancel()`` stopped the walk (no plan is written then).
    /// - Throws: ``DocumentError/Code/notFound`` when the root does not exist; ``DocumentError/Code/cannotCreate``
    ///   or ``DocumentError/Code/ioFailure`` when the plan cannot be written (a plan already there is unchanged).
    public func writePlan(to path: FilePath, generator: String = "ManagedDocument") throws -> BatchPlan.Header? {
        guard try FileSystem.exists(root) else {
            throw DocumentError(.notFound, path: root, reason: "no such file or folder")
        }
        let startedAt = Date()
        state.withLock { $0.progress = BatchProgress(startedAt: startedAt) }
        // > The plan's file and the first failure to write it, under a lock of their own: taken with no other held.
        let output = Protected<(writer: BatchPlanWriter, failure: DocumentError?)>(
            (try BatchPlanWriter(target: path), nil))
        let walker = BatchWalker(root: root, backupDirectory: options.conversion.backupDirectory?.lexicallyNormalized(),
                                 startedAt: startedAt)
        // > The walk lists folders on this thread; `jobs` threads read the files' first bytes and write the items
        // > (in the order they are classified: a plan's order does not matter).
        let classifiers = walkPool(name: "docconvert-plan", threads: max(1, options.jobs),
                                   capacity: 256) { [self] entry in
            guard let candidate = walker.classify(entry) else { return }
            let item = planItem(candidate)
            state.withLock { $0.progress.countFound(bytes: item.bytes) }
            let failed = output.withLock { output -> Bool in
                do {
                    try output.writer.add(item)
                    return false
                } catch {
                    output.failure = output.failure ?? (error as? DocumentError)
                        ?? .io("cannot write the plan", path: path)
                    return true
                }
            }
            if failed { cancel() }
        }
        defer { forget(classifiers) }
        walker.walk(classifyingFiles: false) { entry in
            classifiers.submit(entry)
        }
        if isCancelled { classifiers.cancel() } else { classifiers.close() }
        classifiers.wait()
        if let failure = output.withLock({ $0.failure }) { throw failure }
        guard !isCancelled else { return nil }
        state.withLock { $0.progress.walkFinished = true }
        return try output.withLock {
            try $0.writer.commit(root: root, createdAt: startedAt, generator: generator,
                                 backupDirectory: walker.backupDirectory)
        }
    }

    /// A walk's candidate as a plan's item.
    private func planItem(_ candidate: BatchCandidate) -> BatchPlan.Item {
        let source = candidate.relativePath
        let bytes = Self.sourceBytes(candidate)
        switch candidate {
        case .store(let store, _):
            let kind: BatchItem.Kind = store.isPackage ? .legacyStore(.uiManagedDocumentPackage) : .sqliteStore
            // > The bundle a run of the plan makes: the twin rule applied now, honoured by the run.
            return .init(source: source, candidate: .store, kind: kind, bytes: bytes,
                         bundle: relative(bundlePath(for: store, planned: nil)))
        case .converted(let bundle, _, let metadata, _):
            return .init(source: source, candidate: .converted, kind: BatchItem.Kind(provenanceOf: metadata),
                         bytes: bytes, bundle: relative(bundle))
        case .notAStore(_, _, let kind, let reason):
            return .init(source: source, candidate: .notAStore, kind: kind, bytes: 0, reason: reason)
        case .unreadable(_, _, let error):
            return .init(source: source, candidate: .unreadable, kind: .file, bytes: 0, error: failure(error))
        case .planned(let item):
            return item
        case .unclassified(_, let relative, _):
            return .init(source: relative, candidate: .notAStore, kind: .file, bytes: 0, reason: "not classified")
        }
    }
}
