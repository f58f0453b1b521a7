#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Logging
import SystemPackage

/// Converts every legacy store and UIManagedDocument package under a folder into a bundle beside it.
///
/// A walk (streaming, symbolic links never followed) feeds a bounded queue that ``BatchOptions/jobs`` threads
/// drain, so conversion starts before the walk ends and memory does not grow with the tree. Each store is
/// converted under its document's lock (`.NAME.mdz.lock`, the lock ``Document`` writers take), so two workers,
/// or a worker and an app, never convert the same item at once: the second waits up to the busy timeout, then finds
/// the bundle done. Nothing stops the run but ``cancel()``: failures are reported per item.
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
    private let logger: Logger
    /// Where the run is, and whether it was told to stop.
    private let guarded = Protected<(progress: BatchProgress, cancelled: Bool)>((BatchProgress(), false))
    /// The queues that walks under way fill: ``cancel()`` closes them, so a walk waiting for room stops at once.
    private let walkQueues = Protected<[BoundedQueue<BatchCandidate>]>([])
    /// The files the items' document locks are taken with, while conversions run.
    private let parkedLocks = Protected<ParkedLockFiles?>(nil)
    /// Per folder met, its names that share a stem, by stem (``bundlePath(for:planned:)``).
    private let twinListings = Protected<[FilePath: [String: [String]]]>([:])

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
    public var progress: BatchProgress { guarded.withLock { $0.progress } }

    /// Stops the run: no new item starts, items in progress finish (each is crash-safe anyway), ``run(_:)``
    /// returns with ``BatchSummary/interrupted`` set. Safe to call from any thread, e.g. a signal handler's queue.
    public func cancel() {
        guarded.withLock { $0.cancelled = true }
        for queue in walkQueues.withLock({ $0 }) { queue.close(discardingPending: true) }
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { guarded.withLock { $0.cancelled } }

    /// A queue for a walk to fill, closed by ``cancel()`` (at once when the run is cancelled already); ``forget(_:)``
    /// it when the walk is over.
    private func walkQueue(capacity: Int) -> BoundedQueue<BatchCandidate> {
        let queue = BoundedQueue<BatchCandidate>(capacity: capacity)
        walkQueues.withLock { $0.append(queue) }
        // > After the append: a cancel that read the queues before it has set the flag this reads.
        if isCancelled { queue.close(discardingPending: true) }
        return queue
    }

    private func forget(_ queue: BoundedQueue<BatchCandidate>) {
        walkQueues.withLock { $0.removeAll { $0 === queue } }
    }

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
        guarded.withLock { $0.progress = BatchProgress(startedAt: startedAt) }
        let writer = Protected(try BatchPlanWriter(target: path))
        let failure = Protected<DocumentError?>(nil)
        let walker = BatchWalker(root: root, backupDirectory: options.conversion.backupDirectory?.lexicallyNormalized(),
                                 startedAt: startedAt)
        // > The walk lists folders on this thread; `jobs` threads read the files' first bytes and write the items
        // > (in the order they are classified: a plan's order does not matter).
        let queue = walkQueue(capacity: 256)
        defer { forget(queue) }
        let classifiers = DispatchGroup()
        for number in 0..<max(1, options.jobs) {
            classifiers.enter()
            let thread = Thread { [self] in
                while let entry = queue.pop() {
                    guard let candidate = walker.classify(entry) else { continue }
                    let item = planItem(candidate)
                    guarded.withLock {
                        $0.progress.found += 1
                        $0.progress.foundBytes = $0.progress.foundBytes.addingSaturated(item.bytes)
                    }
                    do { try writer.withLock { try $0.add(item) } } catch {
                        failure.withLock { $0 = $0 ?? (error as? DocumentError) ?? .io("cannot write the plan", path: path) }
                        cancel()
                    }
                }
                classifiers.leave()
            }
            thread.name = "docconvert-plan-\(number)"
            thread.stackSize = 1 << 20
            thread.start()
        }
        walker.walk(classifyingFiles: false) { entry in
            queue.push(entry)
        }
        queue.close(discardingPending: isCancelled)
        classifiers.wait()
        if let failure = failure.withLock({ $0 }) { throw failure }
        guard !isCancelled else { return nil }
        guarded.withLock { $0.progress.walkFinished = true }
        return try writer.withLock {
            try $0.commit(root: root, createdAt: startedAt, generator: generator, backupDirectory: walker.backupDirectory)
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

    /// Runs the batch, calling `report` once per item as it finishes (one call at a time, on worker threads or
    /// tasks).
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
        guarded.withLock {
            $0.progress = BatchProgress(startedAt: startedAt)
            if let plan {
                $0.progress.surveyed = plan.shareItems
                $0.progress.surveyedBytes = plan.shareBytes
                $0.progress.surveyFinished = true
            }
        }
        let summary = Protected(BatchSummary())
        // > `report` is the caller's code: a serial queue, which guards no state, makes its calls one at a time and
        // > in the order the items are counted; no lock of the library is held while it runs.
        let reporting = DispatchQueue(label: "ManagedDocument.batch.report")
        let finish: @Sendable (BatchItem) -> Void = { [self] item in
            reporting.sync {
                summary.withLock { summary in
                    guarded.withLock {
                        $0.progress.done += 1
                        $0.progress.doneBytes = $0.progress.doneBytes.addingSaturated(item.bytesIn)
                    }
                    summary.add(item)
                }
                report(item)
            }
        }
        let (converted, migrations) = AsyncStream.makeStream(of: PendingMigration.self)
        await withTaskCancellationHandler {
            async let conversions: Void = onThread(named: "docconvert-batch") {
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
        } onCancel: {
            cancel()
        }
        var result = summary.withLock { $0 }
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

    /// The walk feeding the worker threads; returns when every worker is done. Blocks: runs on a thread of its own.
    private func convertAll(startedAt: Date, plan: BatchPlan?, starting: @escaping @Sendable (String) -> Void,
                            finish: @escaping @Sendable (BatchItem) -> Void,
                            migrate: @escaping @Sendable (PendingMigration) -> Void) {
        let capacity = max(1, options.queueCapacity ?? options.jobs * 4)
        let queue = walkQueue(capacity: capacity)
        defer { forget(queue) }
        // > Parked in the root (beside it when the root is one store or a package, which must not get a file inside).
        let isFolder = FileSystem.isDirectory(root) && !FileSystem.isRegularFile(root.appending("StoreContent/persistentStore"))
        let locks = ParkedLockFiles(in: isFolder ? root : root.removingLastComponent())
        parkedLocks.withLock { $0 = locks }
        defer {
            parkedLocks.withLock { $0 = nil }
            locks.close()  // after the workers: every item's lock is released
        }

        // Three times as many threads as jobs, `jobs` of them on the CPU at once: a conversion waiting for its fsync
        // lets another one compute (see CPUTurns).
        let turns = CPUTurns(count: max(1, options.jobs))
        let workers = DispatchGroup()
        for number in 0..<(CPUTurns.threadsPerTurn * max(1, options.jobs)) {
            workers.enter()
            let thread = Thread { [self] in
                while !isCancelled, let candidate = queue.pop() {
                    let started = Date()
                    let done = turns.withTurn { isCancelled ? nil : process(candidate, starting: starting) }
                    guard case (var item, let bundle)? = done else { continue }
                    if let bundle {
                        migrate(PendingMigration(item: item, bundle: bundle, started: started))
                    } else {
                        item.duration = Date().timeIntervalSince(started)
                        finish(item)
                    }
                }
                workers.leave()
            }
            thread.name = "docconvert-batch-\(number)"
            thread.stackSize = 1 << 20
            thread.start()
        }

        let survey = DispatchGroup()
        if options.survey && plan == nil {  // a plan's share is counted when it is opened
            survey.enter()
            let thread = Thread { [self] in
                forEachCandidate(startedAt: startedAt, plan: nil, cleaning: false) { candidate in
                    guard !isCancelled, !progress.walkFinished else { return false }  // the walk knows the total now
                    guard options.shard.owns(candidate.relativePath) else { return true }
                    let bytes = Self.sourceBytes(candidate)
                    guarded.withLock {
                        $0.progress.surveyed += 1
                        $0.progress.surveyedBytes = $0.progress.surveyedBytes.addingSaturated(bytes)
                    }
                    return true
                }
                guarded.withLock { $0.progress.surveyFinished = true }
                survey.leave()
            }
            thread.name = "docconvert-survey"
            thread.start()
        }
        // The conversions' walk cleans up stale temporaries; the survey only counts.
        forEachCandidate(startedAt: startedAt, plan: plan, cleaning: !options.dryRun) { [self] candidate in
            guard !isCancelled else { return false }
            guard options.shard.owns(candidate.relativePath) else { return true }
            let bytes = Self.sourceBytes(candidate)
            guarded.withLock {
                $0.progress.found += 1
                $0.progress.foundBytes = $0.progress.foundBytes.addingSaturated(bytes)
            }
            return queue.push(candidate)
        }
        guarded.withLock { $0.progress.walkFinished = true }
        queue.close(discardingPending: isCancelled)
        workers.wait()
        survey.wait()
        // After a cancel, candidates still queued were never started: they are not part of this run's report.
        queue.close(discardingPending: true)
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

    // MARK: One item

    /// One candidate's item, and the bundle to migrate before it is reported (when migrations are asked for).
    private func process(_ candidate: BatchCandidate, starting: (String) -> Void) -> (BatchItem, FilePath?)? {
        switch candidate {
        case .notAStore(_, let relative, let kind, let reason):
            return (BatchItem(source: relative, kind: kind, outcome: .notAStore, reason: reason), nil)
        case .unreadable(_, let relative, let error):
            return (BatchItem(source: relative, kind: .file, outcome: .failed, error: failure(error)), nil)
        case .converted(let bundle, let relative, let metadata, let bytes):
            var done = BatchItem(source: relative, kind: BatchItem.Kind(provenanceOf: metadata),
                                 outcome: .alreadyDone, bundle: self.relative(bundle))
            done.bytesIn = metadata.provenance?.size ?? 0
            done.bytesOut = bytes
            done.storeDigest = metadata.store.contentDigest
            done.sourceSHA256 = metadata.provenance?.mainFileSHA256
            // > A run killed while converting it left the item's lock file: removed now that nobody holds it.
            if !options.dryRun { DocumentLock.removeIfAbandoned(for: bundle) }
            return (done, options.migrations != nil && !options.dryRun ? bundle : nil)
        case .store(let store, let relative):
            return convert(store, relative: relative, planned: nil, starting: starting)
        case .planned(let item):
            let resolved = resolve(item)
            if item.candidate == .store, case .store(let store, let relative) = resolved {
                return convert(store, relative: relative, planned: item.bundle.map { root.appending($0) },
                               starting: starting)
            }
            return process(resolved, starting: starting)
        case .unclassified:
            let walker = BatchWalker(root: root, backupDirectory: options.conversion.backupDirectory, startedAt: Date())
            return walker.classify(candidate).flatMap { process($0, starting: starting) }
        }
    }

    /// A plan's item as the tree has it now: a store still there is converted (detected again under its lock), one
    /// gone since the plan is found converted (its bundle) or reported gone; the rest as the plan says.
    private func resolve(_ item: BatchPlan.Item) -> BatchCandidate {
        let source = root.appending(item.source)
        func gone(_ what: String) -> BatchCandidate {
            .notAStore(source, relativePath: item.source, kind: item.kind,
                       reason: "\(what): changed since the plan was made; nothing was done")
        }
        switch item.candidate {
        case .store:
            // > Looked at again (its first bytes, its sidecars): it may have changed since the plan. The conversion
            // > detects it once more under its lock.
            switch try? LegacyDetector.detect(at: source) {
            case .legacyStore(let store)?:
                return .store(store, relativePath: item.source)
            case .notAStore(let reason)?:
                return gone("not a store any more (\(reason))")
            case .bundle?, .sidecar?:
                return gone("not a store any more")
            case nil:
                // > Gone: converted since the plan (by a run without it, or an app), when its bundle says it was
                // > made from this source.
                // > (`STEM.mdz`, or `NAME.mdz` when a sibling with the same stem took that name.)
                let isPackage = item.kind == .legacyStore(.uiManagedDocumentPackage)
                let bundle = LegacyStore(source: source, store: source, isPackage: isPackage, sidecars: [],
                                         packageFiles: []).defaultBundlePath
                let alternative = bundle.removingLastComponent()
                    .appending("\(source.lastComponent?.string ?? "").\(BundleLayout.defaultExtension)")
                return convertedBundle(at: bundle, source: item.source) ?? convertedBundle(at: alternative, source: item.source)
                    ?? gone("no longer there (moved or removed)")
            }
        case .converted:
            guard let bundle = item.bundle else { return gone("no bundle named") }
            return convertedBundle(at: root.appending(bundle), source: item.source) ?? gone("its bundle is no longer there (moved or removed)")
        case .notAStore:
            return .notAStore(source, relativePath: item.source, kind: item.kind, reason: item.reason ?? "not a store")
        case .unreadable:
            let failure = item.error ?? .init(code: .ioFailure, message: "could not be read")
            return .unreadable(source, relativePath: item.source, error: DocumentError(
                .ioFailure, path: source, reason: "could not be read when the plan was made (\(failure.message)); make the plan again once it can be read"))
        }
    }

    /// The bundle at `path` as a converted item of `source` (relative), when it is a bundle made from it.
    private func convertedBundle(at path: FilePath, source: String) -> BatchCandidate? {
        guard let reader = try? BundleReader(at: path), let provenance = reader.metadata.provenance,
              provenance.fileName == FilePath(source).lastComponent?.string else { return nil }
        return .converted(bundle: path, relativePath: source, metadata: reader.metadata, bytes: Int64(reader.fileSize))
    }

    /// Converts one store under its document's lock; the item, and its bundle when migrations are to run on it.
    private func convert(_ store: LegacyStore, relative: String, planned: FilePath?,
                         starting: (String) -> Void) -> (BatchItem, FilePath?)? {
        let name = store.source.lastComponent?.string ?? ""
        var target = store.defaultBundlePath
        var item = BatchItem(source: relative, kind: store.isPackage ? .legacyStore(.uiManagedDocumentPackage) : .sqliteStore,
                             outcome: .failed, bundle: self.relative(target))
        // > The source's bytes are measured only for an item the conversion does not report on (its report has them).
        func unconverted(_ item: BatchItem) -> (BatchItem, FilePath?) {
            var item = item
            item.bytesIn = Self.sourceBytes(store)
            return (item, nil)
        }
        if options.dryRun {
            target = bundlePath(for: store, planned: planned)
            item.bundle = self.relative(target)
            let earlier = try? BundleReader(at: target).metadata.provenance
            item.outcome = earlier?.fileName == name ? .alreadyDone : .wouldConvert
            return unconverted(item)
        }
        var locks: [DocumentLock] = []
        defer { for lock in locks { lock.release() } }
        do {
            locks.append(try lock(target))
            // The twin rule, decided under STEM.mdz's lock, so no twin can make STEM.mdz meanwhile: a sibling with the
            // same stem (Notes.sqlite beside Notes.db) made STEM.mdz, or sorts first and is still to be converted:
            // this one is NAME.mdz. STEM.mdz's lock is let go then, so the twin need not wait for this conversion.
            let chosen = bundlePath(for: store, planned: planned)
            if chosen != target {
                target = chosen
                item.bundle = self.relative(target)
                locks.append(try lock(target))
                locks.removeFirst().release()
            }
        } catch let error as DocumentError {
            if error.code == .inUse {
                if isCancelled { return nil }  // abandoned before it started: not part of this run
                item.outcome = .busy
                item.error = .init(code: error.code,
                                   message: "\(self.relative(target)): another process (an app or another docconvert worker) has it open or is converting it; run again later")
            } else if error.code == .cannotCreate {
                // > The document lock's own advice ("open it read-only") is for an app; here nothing can be converted.
                item.error = .init(code: error.code,
                                   message: "\(self.relative(target)): cannot create the lock file beside it (\(error.underlyingError.map { DocumentError.summary(of: $0) } ?? "the folder cannot be written")); make the folder writable for this user, or convert a copy of the store, and run again")
            } else {
                item.error = failure(error)
            }
            return unconverted(item)
        } catch {
            item.error = .init(code: .ioFailure, message: "\(self.relative(target)): \(DocumentError.summary(of: error))")
            return unconverted(item)
        }
        starting(relative)
        do {
            // Looked at again under the lock: another worker may have converted and moved it meanwhile.
            let report = try LegacyConverter(options: options.conversion, logger: logger)
                .convert(detected: store, to: target)
            item.outcome = report.outcome == .converted ? .converted : .alreadyDone
            item.kind = .legacyStore(report.kind)
            item.bytesIn = report.sourceBytes
            item.bytesOut = report.bundleBytes
            item.storeDigest = report.storeDigest
            item.sourceSHA256 = report.sourceSHA256
            if report.outcome == .converted { item.rows = report.rowCounts.values.reduce(0, +) }
            switch report.legacyPolicy {
            case .keep: item.legacyFiles = "kept"
            case .delete: item.legacyFiles = report.disposedFiles.isEmpty ? nil : "deleted"
            case .backup: item.legacyFiles = report.backupLocation.map { relativeIfInside(FilePath($0)) }
            }
        } catch let error as DocumentError {
            item.outcome = error.code == .storeBusy ? .busy : .failed
            item.error = failure(error)
            return unconverted(item)
        } catch {
            item.error = .init(code: .ioFailure, message: "\(relative): \(DocumentError.summary(of: error))")
            return unconverted(item)
        }
        for lock in locks { lock.release() }
        locks = []
        return (item, options.migrations != nil ? target : nil)
    }

    private func lock(_ target: FilePath) throws -> DocumentLock {
        if let lock = parkedLocks.withLock({ $0 })?.lock(for: target) { return lock }
        return try DocumentLock(for: target, timeout: options.conversion.busyTimeout, shouldStop: { self.isCancelled })
    }

    /// The bundle a store of the batch gets, by the twin rule (docs/CLI.md, "Bundles"): `STEM.mdz`, unless a bundle
    /// made from another source is there, or `NAME.mdz` was made from this store already, or it is free and a store
    /// beside this one with the same stem sorts first (its name's bytes): then `NAME.mdz` (`Notes.sqlite.mdz` beside `Notes.db`'s `Notes.mdz`). Which store gets
    /// which name depends on the tree only, not on which is converted first: a dry run and a plan name the bundles
    /// the run makes. With `planned` (a plan's name for it), that name, unless it is `STEM.mdz` and another source's
    /// bundle took it since.
    func bundlePath(for store: LegacyStore, planned: FilePath?) -> FilePath {
        let target = store.defaultBundlePath
        guard let name = store.source.lastComponent?.string else { return target }
        let full = target.removingLastComponent().appending("\(name).\(BundleLayout.defaultExtension)")
        guard full != target else { return target }  // no extension: STEM.mdz is NAME.mdz
        if FileSystem.isRegularFile(target) {
            // > A file there that is not a bundle, or one not converted: the conversion says so (alreadyExists).
            guard let earlier = try? BundleReader(at: target).metadata.provenance else { return target }
            return earlier.fileName == name ? target : full
        }
        // > Converted earlier as NAME.mdz (its twin has gone since, or sorted first then): found there, not redone.
        if FileSystem.isRegularFile(full), (try? BundleReader(at: full).metadata.provenance)?.fileName == name {
            return full
        }
        if let planned, planned == full || planned == target { return planned }
        return hasEarlierTwin(store, name: name) ? full : target
    }

    /// Whether a store beside `store` with its stem, whose name sorts before `name`, is there to be converted. Only
    /// inside a folder root: a root that is one store has no siblings in the batch.
    private func hasEarlierTwin(_ store: LegacyStore, name: String) -> Bool {
        guard store.source != root, let stem = store.source.stem else { return false }
        let folder = store.source.removingLastComponent()
        for other in twins(in: folder)[stem] ?? [] where other.utf8.lexicographicallyPrecedes(name.utf8) {
            if case .legacyStore? = try? LegacyDetector.detect(at: folder.appending(other)) { return true }
        }
        return false
    }

    /// The names of `folder` that share a stem with another name (sidecars and bundles left out), by stem: listed
    /// once per folder and run. A store that appears in a folder after it was listed is not seen as a twin.
    private func twins(in folder: FilePath) -> [String: [String]] {
        if let known = twinListings.withLock({ $0[folder] }) { return known }
        var byStem: [String: [String]] = [:]
        // > A folder that cannot be listed has no twins to know of: the conversion reports what it cannot read.
        for name in (try? FileSystem.contentsOfDirectory(folder)) ?? [] {
            let path = FilePath(name)
            guard let stem = path.stem, path.extension != BundleLayout.defaultExtension,
                  !LegacyDetector.sidecarSuffixes.contains(where: { name.hasSuffix($0) }) else { continue }
            byStem[stem, default: []].append(name)
        }
        let twins = byStem.filter { $0.value.count > 1 }
        twinListings.withLock { listings in
            if listings.count >= 1024 { listings.removeAll() }  // bounded: folders are met in walk order
            listings[folder] = twins
        }
        return twins
    }

    /// Applies the pending SQL migrations to a bundle, each once (``SQLMigrationFolder/apply(to:lockTimeout:)``, as
    /// `docconvert migrate` does); a problem makes the item `failed` (the bundle stays as it was before the
    /// migrations: they run on a working copy).
    private func migrate(_ bundle: FilePath, into item: inout BatchItem) async {
        guard let folder = options.migrations else { return }
        do {
            item.migrationsApplied = try await folder.apply(to: bundle, lockTimeout: options.conversion.busyTimeout)
        } catch let error as DocumentError {
            item.outcome = error.code == .inUse ? .busy : .failed
            item.error = failure(error)
        } catch {
            item.outcome = .failed
            item.error = .init(code: .migrationFailed, message: "\(relative(bundle)): \(DocumentError.summary(of: error))")
        }
    }

    // MARK: Helpers

    /// An item's failure: the code, and the error's line with its path relative to the root, as the items are.
    private func failure(_ error: DocumentError) -> BatchItem.Failure {
        // The root itself (a single store given as the root) is named as its item is: by its last component.
        let path = error.path.map { FilePath(relative($0).isEmpty ? root.lastComponent?.string ?? "." : relative($0)) }
        let shown = DocumentError(error.code, path: path, entry: error.entry, reason: error.reason,
                                  underlyingError: error.underlyingError)
        return .init(code: error.code, message: shown.description)
    }

    private func relative(_ path: FilePath) -> String {
        let absolute = path.lexicallyNormalized()
        var relative = absolute
        guard relative.removePrefix(root) else { return absolute.string }
        return relative.string
    }

    private func relativeIfInside(_ path: FilePath) -> String {
        let text = relative(path)
        return text.isEmpty ? "." : text
    }

    private static func sourceBytes(_ candidate: BatchCandidate) -> Int64 {
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
    private static func sourceBytes(_ store: LegacyStore) -> Int64 {
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

/// Runs blocking work on a thread of its own and awaits it without holding a thread of the concurrency pool.
private func onThread(named name: String, _ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let thread = Thread {
            body()
            continuation.resume()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }
}

/// A first-in first-out queue of at most `capacity` elements: `push` waits while it is full, `pop` while it is empty.
/// Closing it wakes both at once: a cancelled batch's walk, waiting for room, stops without delay.
final class BoundedQueue<Element: Sendable>: Sendable {
    private struct State {
        var elements: [Element] = []
        var head = 0
        var isClosed = false
    }
    private let state = WaitableState(State())
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// Adds an element, waiting for room. Returns `false` (dropping it) when the queue is closed, before or while
    /// waiting.
    func push(_ element: Element) -> Bool {
        state.wait { state -> Bool? in
            guard !state.isClosed else { return false }
            guard state.elements.count - state.head < capacity else { return nil }
            if state.head > 0 && state.head * 2 >= state.elements.count {
                state.elements.removeFirst(state.head)
                state.head = 0
            }
            state.elements.append(element)
            return true
        }
    }

    /// The next element, waiting for one; `nil` once the queue is closed and empty.
    func pop() -> Element? {
        state.wait { state -> Element?? in
            guard state.head < state.elements.count else { return state.isClosed ? .some(nil) : nil }
            state.head += 1
            return state.elements[state.head - 1]
        }
    }

    /// No more pushes; pending elements are still popped unless `discardingPending`.
    func close(discardingPending: Bool) {
        state.withLock { state in
            state.isClosed = true
            if discardingPending {
                state.elements.removeAll()
                state.head = 0
            }
        }
    }
}
