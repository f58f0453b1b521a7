import SystemPackage
@_spi(Core) import MDZCore

extension SQLMigrationFolder {
    /// Applies the folder's pending migrations to one bundle, each once, and saves it atomically.
    ///
    /// This is what `docconvert migrate` and a batch with ``BatchOptions/migrations`` do to every bundle: the
    /// bundle's migrations are validated against the folder (``validate(applied:)``), then the pending ones run on a
    /// working copy under the document's lock, in version order, and the document is saved once all of them
    /// succeeded. The bundle is opened with its own media type, whatever app wrote it: a tool migrates documents of
    /// any app. A bundle that is up to date is not opened for writing, and is not an error.
    ///
    /// ```swift
    /// let folder = try SQLMigrationFolder(directory: "migrations")
    /// let applied = try await folder.apply(to: "Notes.mdz")   // ["V2__add_tags"], or [] when up to date
    /// ```
    ///
    /// - Parameters:
    ///   - bundle: The bundle to migrate.
    ///   - lockTimeout: Seconds to wait for another process that has the document open for writing.
    /// - Returns: The identifiers of the migrations applied, in order; empty when the bundle was up to date.
    /// - Throws: ``DocumentError/Code/migrationChanged`` when the bundle and the folder disagree (an applied file was
    ///   edited, renamed or removed, or a new one sorts below an applied one): nothing is applied;
    ///   ``DocumentError/Code/inUse`` when the document is open for writing elsewhere past `lockTimeout`;
    ///   ``DocumentError/Code/migrationFailed`` when a migration fails (the bundle is unchanged); the reader's codes
    ///   for a damaged bundle; ``DocumentError/Code/cannotCreate`` when its folder cannot be written.
    public func apply(to bundle: FilePath, lockTimeout: Double = 0) async throws -> [String] {
        let metadata = try Document.metadata(at: bundle)
        let validation = validate(applied: metadata.model.migrations)
        guard validation.isValid else {
            throw DocumentError(.migrationChanged, path: bundle,
                                reason: "\(validation.problems.joined(separator: "; ")); no migration was applied to it")
        }
        guard !validation.pending.isEmpty else { return [] }
        var options = Document.OpenOptions()
        options.createIfMissing = false
        options.lockTimeout = lockTimeout
        options.migrations = migrator(for: validation.pending)
        options.mediaType = metadata.mediaType  // the bundle's own: a tool migrates documents of any app
        let document = try await Document.open(at: bundle, options: options)
        let applied = document.appliedMigrations
        try await document.close(savingChanges: false)  // open saved once every migration succeeded
        return applied
    }
}
