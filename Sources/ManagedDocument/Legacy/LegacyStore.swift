import SystemPackage
@_spi(Core) import MDZCore

/// A legacy store found on disk: the files that belong together and will become one bundle.
///
/// Detected by content (the 16-byte SQLite header), never by extension. A loose store is grouped with its
/// sidecars (`NAME-wal`, `NAME-shm`, `NAME-journal`) and Core Data's external-data folder
/// `.STEM_SUPPORT/_EXTERNAL_DATA/`; a UIManagedDocument package is a folder holding `StoreContent/persistentStore`.
public struct LegacyStore: Sendable, Equatable {
    /// What kind of source it is. The Core Data/plain distinction is made from the store's tables when it is read.
    public enum Kind: String, Sendable, Codable {
        /// A SQLite store with Core Data's `Z_METADATA` and `Z_PRIMARYKEY` tables.
        case coreDataSQLite = "coredata-sqlite"
        /// Any other SQLite store.
        case sqlite
        /// A UIManagedDocument package folder.
        case uiManagedDocumentPackage = "uimanageddocument-package"
    }

    /// The source as the user names it: the store file, or the package folder.
    public var source: FilePath
    /// The SQLite file.
    public var store: FilePath
    /// Whether the source is a UIManagedDocument package.
    public var isPackage: Bool
    /// Sidecars that exist: `-wal`, `-shm`, `-journal`.
    public var sidecars: [FilePath]
    /// Core Data's external binary data folder, when it exists.
    public var externalData: FilePath?
    /// The folder holding `_EXTERNAL_DATA` (`.STEM_SUPPORT` beside a loose store).
    public var supportFolder: FilePath?
    /// A package's `DocumentMetadata.plist`, when it has one.
    public var packageMetadata: FilePath?
    /// Other files in a package, carried into the bundle's `AdditionalContent/`, relative to the package.
    public var packageFiles: [String]

    /// The sidecar of a kind, when it exists.
    func sidecar(_ suffix: String) -> FilePath? {
        sidecars.first { $0.string.hasSuffix(suffix) }
    }

    /// The name a bundle gets by default: the source's stem with `.mdz`, beside it.
    public var defaultBundlePath: FilePath {
        let parent = source.removingLastComponent()
        let stem = source.stem ?? "Document"
        let name = "\(stem).\(BundleLayout.defaultExtension)"
        return parent.isEmpty ? FilePath(name) : parent.appending(name)
    }
}

/// What a path on disk is, as far as conversion is concerned.
public enum LegacyDetection: Sendable, Equatable {
    /// A legacy store or package that can be converted.
    case legacyStore(LegacyStore)
    /// A managed-document bundle already.
    case bundle
    /// A `-wal`, `-shm` or `-journal` file; it is converted with its store, or is an orphan when there is none.
    case sidecar(store: FilePath?)
    /// Anything else, with the reason in words ("empty file", "not a SQLite database", …).
    case notAStore(reason: String)
}

/// Finds legacy stores by content and groups their files.
public enum LegacyDetector {
    static let sidecarSuffixes = ["-wal", "-shm", "-journal"]

    /// Classifies one path without changing anything.
    ///
    /// ```swift
    /// if case .legacyStore(let store) = try LegacyDetector.detect(at: "Notes.sqlite") { … }
    /// ```
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when nothing is there; ``DocumentError/Code/ioFailure`` when it
    ///   cannot be read.
    public static func detect(at path: FilePath) throws -> LegacyDetection {
        guard let status = try FileSystem.status(path) else {
            throw DocumentError(.notFound, path: path, reason: "no such file or folder")
        }
        return try detect(at: path, status: status)
    }

    /// ``detect(at:)`` of a path whose `lstat(2)` the caller has just read (a walk, from the same listing).
    static func detect(at path: FilePath, status: Stat) throws -> LegacyDetection {
        switch status.kind {
        case .directory:
            return try detectPackage(at: path)
        case .symlink:
            return .notAStore(reason: "a symbolic link (not followed)")
        case .other:
            return .notAStore(reason: "not a regular file")
        case .regular:
            break
        }
        let name = path.lastComponent?.string ?? ""
        for suffix in sidecarSuffixes where name.hasSuffix(suffix) && name.count > suffix.count {
            let main = FilePath(String(path.string.dropLast(suffix.count)))
            if FileSystem.isRegularFile(main), try hasSQLiteHeader(main) { return .sidecar(store: main) }
            if try !hasSQLiteHeader(path) { return .sidecar(store: nil) }
        }
        if status.size == 0 { return .notAStore(reason: "an empty file") }
        let head = try readHead(path, count: 64)
        if StoreHeader.hasMagic(head) {
            if status.size < 512 {
                return .notAStore(reason: "too short to be a SQLite database (\(status.size) bytes)")
            }
            return .legacyStore(try group(store: path, source: path, isPackage: false))
        }
        if head.count >= 38, head[0..<4] == [0x50, 0x4B, 0x03, 0x04], Array(head[30..<38]) == Array("mimetype".utf8) {
            return .bundle
        }
        return .notAStore(reason: "not a SQLite database")
    }

    private static func detectPackage(at folder: FilePath) throws -> LegacyDetection {
        let store = folder.appending("StoreContent/persistentStore")
        guard FileSystem.isRegularFile(store) else { return .notAStore(reason: "a folder") }
        guard try hasSQLiteHeader(store) else {
            return .notAStore(reason: "a package whose StoreContent/persistentStore is not a SQLite database")
        }
        var legacy = try group(store: store, source: folder, isPackage: true)
        let plist = folder.appending("DocumentMetadata.plist")
        legacy.packageMetadata = FileSystem.isRegularFile(plist) ? plist : nil
        // Everything else in the package travels as additional content.
        var grouped = Set([store] + legacy.sidecars + (legacy.packageMetadata.map { [$0] } ?? []))
        if let support = legacy.supportFolder { grouped.insert(support) }
        var others: [String] = []
        func walk(_ directory: FilePath, _ relative: String) throws {
            for name in try FileSystem.contentsOfDirectory(directory) {
                let path = directory.appending(name)
                if grouped.contains(path) { continue }
                guard let status = try FileSystem.status(path) else { continue }
                switch status.kind {
                case .directory: try walk(path, relative + name + "/")
                case .regular: others.append(relative + name)
                case .symlink, .other: continue  // not data: links are not followed
                }
            }
        }
        try walk(folder, "")
        legacy.packageFiles = others
        return .legacyStore(legacy)
    }

    /// Groups a store with its sidecars and support folder.
    static func group(store: FilePath, source: FilePath, isPackage: Bool) throws -> LegacyStore {
        let sidecars = sidecarSuffixes.map { FilePath(store.string + $0) }.filter { FileSystem.isRegularFile($0) }
        let parent = store.removingLastComponent()
        let folder: FilePath = parent.isEmpty ? "." : parent
        let stem = store.stem ?? ""
        let support = folder.appending(".\(stem)_SUPPORT")
        let external = support.appending("_EXTERNAL_DATA")
        let hasSupport = FileSystem.isDirectory(support)
        return LegacyStore(source: source, store: store, isPackage: isPackage, sidecars: sidecars,
                           externalData: FileSystem.isDirectory(external) ? external : nil,
                           supportFolder: hasSupport ? support : nil, packageMetadata: nil, packageFiles: [])
    }

    static func hasSQLiteHeader(_ path: FilePath) throws -> Bool {
        StoreHeader.hasMagic(try readHead(path, count: 16))
    }

    static func readHead(_ path: FilePath, count: Int) throws -> [UInt8] {
        let descriptor = try FileSystem.openForReading(path)
        defer { try? descriptor.close() }  // Squash close error of a read-only descriptor.
        return try FileSystem.read(descriptor, at: 0, count: count, path: path)
    }
}
