import Foundation
import SystemPackage
@_spi(Core) import MDZCore

/// The check a consolidated copy must pass before its bundle may take its name: `PRAGMA integrity_check`, and the
/// same schema and row count per table (and page size, `user_version`, `application_id`) as SQLite read right after
/// recovering it.
///
/// For a large store the check runs on a thread of its own while the bundle is written aside, so that SQLite's walk
/// of the copy and the packing overlap; nothing irreversible happens before ``result()`` has returned: the bundle
/// is renamed into place only afterwards, and the legacy files are disposed of later still. A failed check
/// discards the written temporary like any other failure.
final class CopyCheck: Sendable {
    let isInBackground: Bool
    /// The check's outcome, set once when it ends.
    private let outcome = WaitableState<Result<StoreFacts, any Error>?>(nil)

    /// Starts the check: on a new thread when `inBackground`, otherwise right here.
    ///
    /// - Parameter immutableURI: how to open a store read in place (``SourceSnapshot/isInPlace``).
    init(copy: FilePath, source: FilePath, before: StoreFacts, inBackground: Bool, immutableURI: String? = nil) {
        isInBackground = inBackground
        let run: @Sendable () -> Result<StoreFacts, any Error> = {
            Result { try Self.check(copy, source: source, before: before, immutableURI: immutableURI) }
        }
        if inBackground {
            let thread = Thread { [outcome] in outcome.set(run()) }
            thread.name = "ManagedDocument.check"
            thread.stackSize = 1 << 20
            thread.start()
        } else {
            outcome.set(run())
        }
    }

    /// The copy's facts once the check has passed; waits for it to end. Throws the check's error.
    func result() throws -> StoreFacts {
        try outcome.wait().get()
    }

    /// The same check, right here, of a small copy read whole into memory (`image`, read from `copy`): SQLite
    /// checks the bytes the bundle then packs, so the copy is not read again to pack it.
    static func check(_ image: InMemoryStore, copy: FilePath, source: FilePath, before: StoreFacts) throws -> StoreFacts {
        try compare(before, source: source) { try StoreInspector.inspectSelfContained(image, path: copy) }
    }

    private static func check(_ copy: FilePath, source: FilePath, before: StoreFacts,
                              immutableURI: String?) throws -> StoreFacts {
        try compare(before, source: source) {
            try StoreInspector.inspectSelfContained(copy, fullCheck: true, immutableURI: immutableURI)
        }
    }

    /// The facts `inspect` finds, when they are `before`'s.
    private static func compare(_ before: StoreFacts, source: FilePath,
                                inspecting inspect: () throws -> StoreFacts) throws -> StoreFacts {
        let after: StoreFacts
        do {
            after = try inspect()
        } catch let error as DocumentError where error.code == .storeCorrupt || error.code == .notSQLite {
            throw DocumentError(error.code, path: source,
                                reason: "the store fails SQLite's integrity check; it was left exactly as it was (\(error.reason))",
                                underlyingError: error.underlyingError)
        }
        guard after == before else {
            throw DocumentError(.verificationFailed, path: source,
                                reason: "the consolidated copy does not have the source's tables and row counts; nothing was changed")
        }
        return after
    }
}
