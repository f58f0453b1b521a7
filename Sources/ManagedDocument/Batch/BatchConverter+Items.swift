#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SystemPackage
@_spi(Core) import MDZCore

// One item of a batch: a walk's or a plan's candidate classified, converted under its document's lock, migrated.

extension BatchConverter {

    /// One candidate's item, and the bundle to migrate before it is reported (when migrations are asked for).
    func process(_ candidate: BatchCandidate, starting: (String) -> Void) -> (BatchItem, FilePath?)? {
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
        // > The parked files are read under the converter's lock, and their own lock taken once it is let go.
        if let lock = state.withLock({ $0.parkedLocks })?.lock(for: target) { return lock }
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
        if let known = state.withLock({ $0.twinListings[folder] }) { return known }
        var byStem: [String: [String]] = [:]
        // > A folder that cannot be listed has no twins to know of: the conversion reports what it cannot read.
        for name in (try? FileSystem.contentsOfDirectory(folder)) ?? [] {
            let path = FilePath(name)
            guard let stem = path.stem, path.extension != BundleLayout.defaultExtension,
                  !LegacyDetector.sidecarSuffixes.contains(where: { name.hasSuffix($0) }) else { continue }
            byStem[stem, default: []].append(name)
        }
        let twins = byStem.filter { $0.value.count > 1 }
        state.withLock { state in
            // > Bounded: folders are met in walk order.
            if state.twinListings.count >= 1024 { state.twinListings.removeAll() }
            state.twinListings[folder] = twins
        }
        return twins
    }

    /// Applies the pending SQL migrations to a bundle, each once (``SQLMigrationFolder/apply(to:lockTimeout:)``, as
    /// `docconvert migrate` does); a problem makes the item `failed` (the bundle stays as it was before the
    /// migrations: they run on a working copy).
    func migrate(_ bundle: FilePath, into item: inout BatchItem) async {
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

}
