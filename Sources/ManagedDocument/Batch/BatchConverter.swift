#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Logging
import SystemPackage
@_spi(Core) import MDZCore

/// Converts every legacy store and UIManagedDocument package under a folder into a bundle beside it.
///
/// A walk (streaming, symbolic links never followed) feeds a bounded queue that a pool of worker threads drains
/// (``BatchOptions/jobs`` of them computing at once), so conversion starts before the walk ends and memory does not
/// grow with the tree. Each store is converted under its document's lock (`.NAME.mdz.lock`, the lock ``Document``
/// writers take), so two workers, or a worker and an app, never convert the same item at once: the second waits up to
/// the busy timeout, then finds the bundle done. Nothing stops the run but ``cancel()``: failures are reported per item.
///
/// ```swift
/// var options = BatchOptions()
/// options.conversion.legacyPolicy = .keep
/// let batch = BatchConverter(root: "/srv/home", options: options)
/// let summary = try await batch.run { item in print(item.outcome, item.source) }
/// ```
public final class BatchConverter: Sendable {
    /// The folder (or single store) being converted: absolute (a relative root is taken from the current folder),
    /// lexically normalised, with a symbolic link given as the root resolved.
    public let root: FilePath
    /// The options in force (the compression threads shared out among the jobs).
    public let options: BatchOptions
    let logger: Logger
    /// What the run's threads share, under the converter's one lock: never held while another lock is taken, nor
    /// while the caller's code runs.
    let state = Protected(State())

    /// The state the run's threads share (``state``).
    struct State {
        /// Where the run is.
        var progress = BatchProgress()
        /// The items reported so far.
        var summary = BatchSummary()
        /// Whether ``BatchConverter/cancel()`` was called.
        var isCancelled = false
        /// The pools that walks under way fill: ``BatchConverter/cancel()`` cancels them, so a walk waiting for room
        /// stops at once.
        var walkPools: [WorkerPool<BatchCandidate>] = []
        /// The files the items' document locks are taken with, while conversions run.
        var parkedLocks: ParkedLockFiles?
        /// Per folder met, its names that share a stem, by stem (``BatchConverter/bundlePath(for:planned:)``).
        var twinListings: [FilePath: [String: [String]]] = [:]
    }

    /// A batch over `root`; nothing happens until ``run(_:)``. `logger` receives one line per item and the run's summary.
    ///
    /// `root` may be relative (`"."`, `"./sub"`): it is taken from the current folder now, and items are reported
    /// relative to it.
    public init(root: FilePath, options: BatchOptions = BatchOptions(),
                logger: Logger = Logger(label: "ManagedDocument.batch", factory: { _ in SwiftLogNoOpLogHandler() })) {
        var root = root
        // A relative root (`.`, `./`, `sub/..`) is taken from the current folder: lexically normalised it could be
        // empty, which names no file. Items are reported relative to it all the same.
        if root.isRelative {
            root = FilePath(FileManager.default.currentDirectoryPath).pushing(root)
        }
        // The root is the one symbolic link that is followed: the user named it.
        if (try? FileSystem.status(root))??.kind == .symlink,
           let resolved = root.withPlatformString({ realpath($0, nil) }) {
            root = FilePath(platformString: resolved)
            free(resolved)
        }
        self.root = root.lexicallyNormalized()
        var options = options
        // The cores are shared among the jobs: a large store is deflated on the cores its job has to itself.
        options.conversion.writing.compressionThreads = min(
            options.conversion.writing.compressionThreads,
            max(1, ParallelDeflater.availableCores / max(1, options.jobs)))
        // The walk removes stale temporaries in every folder it lists; a conversion does not list its folder again
        // (in a folder of n stores that would be n listings of n names).
        options.conversion.removesStaleTemporaries = false
        self.options = options
        self.logger = logger
    }

    /// Where the run is now.
    public var progress: BatchProgress { state.withLock { $0.progress } }

    /// Stops the run: no new item starts, items in progress finish (each is crash-safe anyway), ``run(_:)``
    /// returns with ``BatchSummary/interrupted`` set. Safe to call from any thread, e.g. a signal handler's queue.
    public func cancel() {
        let pools = state.withLock { state in
            state.isCancelled = true
            return state.walkPools
        }
        // > Cancelled once the lock is let go: cancelling a pool takes its queue's lock.
        for pool in pools { pool.cancel() }
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// A pool of `threads` threads running `work` on the candidates a walk submits, cancelled by ``cancel()`` (at once
    /// when the run is cancelled already); ``forget(_:)`` it when the walk is over.
    func walkPool(name: String, threads: Int, capacity: Int,
                  work: @escaping @Sendable (BatchCandidate) -> Void) -> WorkerPool<BatchCandidate> {
        let pool = WorkerPool(name: name, threads: threads, capacity: capacity, work: work)
        // > Listed and the flag read at once: a cancel either finds the pool listed or has set the flag read here.
        let cancelled = state.withLock { state in
            state.walkPools.append(pool)
            return state.isCancelled
        }
        if cancelled { pool.cancel() }
        return pool
    }

    /// Stops cancelling `pool` with the run: its walk is over.
    func forget(_ pool: WorkerPool<BatchCandidate>) {
        state.withLock { $0.walkPools.removeAll { $0 === pool } }
    }

    /// Runs the batch, calling `report` once per item as it finishes (one call at a time, in the order the items are
    /// counted, on a thread of the batch's).
    ///
    /// The walk and the conversions run on threads of their own, because they block on the disk (`fsync`, file
    /// locks, SQLite) and would otherwise hold the cooperative pool's few threads; this call awaits them without
    /// blocking. The SQL migrations of ``BatchOptions/migrations`` go through ``Document``'s async API as child tasks
    /// of this call, ``BatchOptions/jobs`` at once, each as soon as its bundle is ready. Cancelling the calling task
    /// is the same as ``cancel()``.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when the root does not exist.
    public func run(_ report: @escaping @Sendable (BatchItem) -> Void) async throws -> BatchSummary {
        try await run(starting: { _ in }, report)
    }

    /// Runs the batch as ``run(_:)`` does, also calling `starting` with an item's source (relative to the root) when
    /// its conversion starts, under its lock: ``BatchReportFile/start(_:)`` records it, so that a run killed
    /// meanwhile leaves the names of the items it was converting.
    public func run(starting: @escaping @Sendable (String) -> Void,
                    _ report: @escaping @Sendable (BatchItem) -> Void) async throws -> BatchSummary {
        guard try FileSystem.exists(root) else {
            throw DocumentError(.notFound, path: root, reason: "no such file or folder")
        }
        let startedAt = Date()
        var share = options.plan
        if let opened = share, opened.shard.index != options.shard.index || opened.shard.count != options.shard.count {
            share = try BatchPlan(at: opened.path, shard: options.shard)  // opened for another share
        }
        let plan = share
        state.withLock { state in
            state.progress = BatchProgress(startedAt: startedAt)
            state.summary = BatchSummary()
            if let plan {
                state.progress.surveyed = plan.shareItems
                state.progress.surveyedBytes = plan.shareBytes
                state.progress.surveyFinished = true
            }
        }
        // > `report` is the caller's code: one thread calls it, one item at a time, in the order the items are
        // > counted, holding no lock. Each worker waits until its item is reported, so a slow `report` holds the
        // > conversions back rather than letting the items pile up. Room for every worker and migration at once.
        let capacity = max(1, options.jobs) * (CPUTurns.threadsPerTurn + 1)
        let reporter = WorkerPool<BatchItem>(name: "docconvert-report", threads: 1, capacity: capacity) { [self] item in
            state.withLock { state in
                state.progress.countDone(bytes: item.bytesIn)
                state.summary.add(item)
            }
            report(item)
        }
        let finish: @Sendable (BatchItem) -> Void = { item in _ = reporter.perform(item) }  // never cancelled
        await withTaskCancellationHandler {
            await convertAndMigrate(startedAt: startedAt, plan: plan, starting: starting, finish: finish)
        } onCancel: {
            cancel()
        }
        reporter.close()
        await reporter.finished()
        var result = state.withLock { $0.summary }
        result.duration = Date().timeIntervalSince(startedAt)
        result.interrupted = isCancelled
        return result
    }

    /// A converted (or already converted) bundle whose item is reported once the migrations have run on it.
    private struct PendingMigration: Sendable {
        var item: BatchItem
        var bundle: FilePath
        var started: Date
    }

    /// The conversions, on threads of their own, and the migrations of the bundles they hand over, as child tasks
    /// (``BatchOptions/jobs`` at once); returns when all are done and every item has been handed to `finish`.
    private func convertAndMigrate(startedAt: Date, plan: BatchPlan?, starting: @escaping @Sendable (String) -> Void,
                                   finish: @escaping @Sendable (BatchItem) -> Void) async {
        let (converted, migrations) = AsyncStream.makeStream(of: PendingMigration.self)
        async let conversions: Void = Thread.run(named: "docconvert-batch") {
            self.convertAll(startedAt: startedAt, plan: plan, starting: starting, finish: finish,
                            migrate: { migrations.yield($0) })
            migrations.finish()
        }
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for await pending in converted {
                if running >= max(1, options.jobs) {
                    await group.next()
                    running -= 1
                }
                group.addTask {
                    var item = pending.item
                    await self.migrate(pending.bundle, into: &item)
                    item.duration = Date().timeIntervalSince(pending.started)
                    finish(item)
                }
                running += 1
            }
        }
        await conversions
    }

    /// The walk feeding the worker threads; returns when every worker is done. Blocks: runs on a thread of its own.
    private func convertAll(startedAt: Date, plan: BatchPlan?, starting: @escaping @Sendable (String) -> Void,
                            finish: @escaping @Sendable (BatchItem) -> Void,
                            migrate: @escaping @Sendable (PendingMigration) -> Void) {
        // > Parked in the root (beside it when the root is one store or a package, which must not get a file inside).
        let isFolder = FileSystem.isDirectory(root) && !FileSystem.isRegularFile(root.appending("StoreContent/persistentStore"))
        let locks = ParkedLockFiles(in: isFolder ? root : root.removingLastComponent())
        state.withLock { $0.parkedLocks = locks }
        defer {
            state.withLock { $0.parkedLocks = nil }
            locks.close()  // after the workers: every item's lock is released
        }
        // Three times as many threads as jobs, `jobs` of them on the CPU at once: a conversion waiting for its fsync
        // lets another one compute (see CPUTurns).
        let turns = CPUTurns(count: max(1, options.jobs))
        let workers = walkPool(name: "docconvert-batch", threads: CPUTurns.threadsPerTurn * max(1, options.jobs),
                               capacity: max(1, options.queueCapacity ?? options.jobs * 4)) { [self] candidate in
            // > After a cancel, candidates still queued are never started: they are not part of this run's report.
            guard !isCancelled else { return }
            let started = Date()
            let done = turns.withTurn { isCancelled ? nil : process(candidate, starting: starting) }
            guard case (var item, let bundle)? = done else { return }
            if let bundle {
                migrate(PendingMigration(item: item, bundle: bundle, started: started))
            } else {
                item.duration = Date().timeIntervalSince(started)
                finish(item)
            }
        }
        defer { forget(workers) }
        let survey = startSurvey(startedAt: startedAt, plan: plan)
        // The conversions' walk cleans up stale temporaries; the survey only counts.
        forEachCandidate(startedAt: startedAt, plan: plan, cleaning: !options.dryRun) { [self] candidate in
            guard !isCancelled else { return false }
            guard options.shard.owns(candidate.relativePath) else { return true }
            let bytes = Self.sourceBytes(candidate)
            state.withLock { $0.progress.countFound(bytes: bytes) }
            return workers.submit(candidate)
        }
        state.withLock { $0.progress.walkFinished = true }
        if isCancelled { workers.cancel() } else { workers.close() }
        workers.wait()
        survey.wait()
    }

    /// Starts the survey (``BatchOptions/survey``) on a thread of its own, unless there is a plan (its share was
    /// counted when it was opened); the group returned is left when the survey ends.
    private func startSurvey(startedAt: Date, plan: BatchPlan?) -> DispatchGroup {
        let survey = DispatchGroup()
        guard options.survey && plan == nil else { return survey }
        survey.enter()
        Thread.detach(named: "docconvert-survey", stackSize: nil) { [self] in
            forEachCandidate(startedAt: startedAt, plan: nil, cleaning: false) { candidate in
                guard !isCancelled, !progress.walkFinished else { return false }  // the walk knows the total now
                guard options.shard.owns(candidate.relativePath) else { return true }
                let bytes = Self.sourceBytes(candidate)
                state.withLock { $0.progress.countSurveyed(bytes: bytes) }
                return true
            }
            state.withLock { $0.progress.surveyFinished = true }
            survey.leave()
        }
        return survey
    }

    /// Every candidate of the tree, in order, until `visit` returns `false`: the plan's share when there is a plan,
    /// else the walk's (which removes stale temporaries as it goes when `cleaning`).
    private func forEachCandidate(startedAt: Date, plan: BatchPlan?, cleaning: Bool, _ visit: (BatchCandidate) -> Bool) {
        if let plan {
            do {
                try plan.forEachItem { visit(.planned($0)) }
            } catch let error as DocumentError {
                // > Checked whole when it was opened: only a plan changed since then gets here.
                _ = visit(.unreadable(plan.path, relativePath: plan.path.lastComponent?.string ?? "", error: error))
            } catch {
                _ = visit(.unreadable(plan.path, relativePath: "", error: DocumentError(.ioFailure, path: plan.path, reason: DocumentError.summary(of: error))))
            }
            return
        }
        var walker = BatchWalker(root: root, backupDirectory: options.conversion.backupDirectory?.lexicallyNormalized(),
                                 startedAt: startedAt)
        walker.removesStaleTemporaries = cleaning
        walker.walk(visit)
    }

    // MARK: Helpers

    /// An item's failure: the code, and the error's line with its path relative to the root, as the items are.
    func failure(_ error: DocumentError) -> BatchItem.Failure {
        // The root itself (a single store given as the root) is named as its item is: by its last component.
        let path = error.path.map { FilePath(relative($0).isEmpty ? root.lastComponent?.string ?? "." : relative($0)) }
        let shown = DocumentError(error.code, path: path, entry: error.entry, reason: error.reason,
                                  underlyingError: error.underlyingError)
        return .init(code: error.code, message: shown.description)
    }

    func relative(_ path: FilePath) -> String {
        let absolute = path.lexicallyNormalized()
        var relative = absolute
        guard relative.removePrefix(root) else { return absolute.string }
        return relative.string
    }

    func relativeIfInside(_ path: FilePath) -> String {
        let text = relative(path)
        return text.isEmpty ? "." : text
    }

    static func sourceBytes(_ candidate: BatchCandidate) -> Int64 {
        switch candidate {
        case .store(let store, _): return sourceBytes(store)
        case .converted(_, _, let metadata, _): return metadata.provenance?.size ?? 0
        case .notAStore, .unreadable, .unclassified: return 0
        case .planned(let item): return item.bytes
        }
    }

    /// The bytes a conversion reports as the source's (``ConversionReport/sourceBytes``, the provenance's files):
    /// the store, its sidecars, Core Data's external data, a package's other files. A file that cannot be read counts
    /// nothing here: the conversion reports it.
    static func sourceBytes(_ store: LegacyStore) -> Int64 {
        func size(_ path: FilePath) -> Int64 { (try? FileSystem.status(path))??.size ?? 0 }  // see above
        var files = [store.store] + store.sidecars
        if store.isPackage {
            files += store.packageFiles.map { store.source.appending($0) }
            if let plist = store.packageMetadata { files.append(plist) }
        }
        var total = files.reduce(0) { $0 + size($1) }
        if let external = store.externalData, let content = try? BundleWriter.contentFiles(in: external, prefix: BundleLayout.externalDataPrefix) {
            total += content.reduce(0) { $0 + size($1.source) }  // an unreadable folder fails the conversion itself
        }
        return total
    }
}
