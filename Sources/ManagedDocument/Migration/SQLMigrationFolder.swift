import Crypto
import Foundation
import GRDB
import SystemPackage
@_spi(Core) import MDZCore

/// A folder of SQL migrations, applied in version order, each once per document (`docconvert migrate`).
///
/// ## Naming
/// Each migration is one file named `V<version>__<description>.sql`, as Flyway names its versioned migrations:
/// - `<version>` is one or more decimal numbers separated by `.` or `_` (`1`, `2.1`, `2_1`, `10`); versions are
///   compared number by number (`2` < `2.1` < `10`), and trailing zeros do not count (`1` and `1.0` are the same
///   version, which is an error).
/// - `<description>` is letters, digits and `_` (shown with spaces); two underscores separate it from the version.
///
/// Other `.sql` files are an error (a misspelt name must not be skipped silently); hidden files and files with other
/// extensions (a README) are ignored. Each file is a script of SQL statements, run in one transaction.
///
/// ## Identity and checksums
/// A migration is recorded by its file's stem (`V2__add_categories`) and the lowercase hex SHA-256 of its content,
/// with `\r\n` read as `\n`. Before anything is applied, ``validate(applied:)`` compares a document's applied
/// migrations with the folder: an applied version whose file has changed (content or description) or is gone, and a
/// pending version lower than one already applied, are reported and nothing is applied.
public struct SQLMigrationFolder: Sendable {
    /// One migration file.
    public struct File: Sendable, Equatable {
        /// The version's numbers, trailing zeros removed.
        public var version: [Int]
        /// The description, underscores as spaces.
        public var description: String
        /// The file's stem, recorded as the migration's identifier: `V2__add_categories`.
        public var identifier: String
        /// Lowercase hex SHA-256 of the content (line endings normalised to `\n`).
        public var checksum: String
        /// The SQL script.
        public var sql: String
        /// Where the file is.
        public var path: FilePath

        /// The version as written in documents and reports: `2.1`.
        public var versionString: String { version.map(String.init).joined(separator: ".") }
    }

    /// What a document's applied migrations say about this folder.
    public struct Validation: Sendable, Equatable {
        /// Files not applied yet, in order.
        public var pending: [File] = []
        /// Problems that stop everything: edited, renamed or removed applied files; files older than applied ones.
        public var problems: [String] = []
        /// Applied migrations that are not SQL migrations of this scheme (an app's own); they are left alone.
        public var others: [String] = []
        /// Whether the folder and the document agree (no problems).
        public var isValid: Bool { problems.isEmpty }
    }

    /// The folder.
    public let directory: FilePath
    /// The migrations, in version order.
    public let files: [File]

    /// Reads and checks every migration file in `directory`.
    ///
    /// - Throws: ``DocumentError/Code/notFound`` when the folder does not exist,
    ///   ``DocumentError/Code/invalidMigrations`` for a name outside the scheme, a duplicate version, an empty or
    ///   non-UTF-8 file.
    public init(directory: FilePath) throws {
        self.directory = directory
        guard FileSystem.isDirectory(directory) else {
            throw DocumentError(.notFound, path: directory, reason: "no such migrations folder")
        }
        var files: [File] = []
        for name in try FileSystem.contentsOfDirectory(directory) where !name.hasPrefix(".") && name.hasSuffix(".sql") {
            let path = directory.appending(name)
            guard let (version, description) = Self.parse(name: name) else {
                throw DocumentError(.invalidMigrations, path: path,
                                    reason: "not a migration name: use V<version>__<description>.sql, e.g. V1__create_tables.sql")
            }
            guard FileSystem.isRegularFile(path) else {
                throw DocumentError(.invalidMigrations, path: path, reason: "not a regular file")
            }
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: path.string))
            } catch {
                throw DocumentError(.invalidMigrations, path: path, reason: "cannot be read: \(error.localizedDescription)")
            }
            guard let text = String(data: data, encoding: .utf8) else {
                throw DocumentError(.invalidMigrations, path: path, reason: "is not UTF-8 text")
            }
            let sql = text.replacingOccurrences(of: "\r\n", with: "\n")
            guard !sql.allSatisfy(\.isWhitespace) else {
                throw DocumentError(.invalidMigrations, path: path, reason: "is empty")
            }
            if let other = files.first(where: { $0.version == version }) {
                throw DocumentError(.invalidMigrations, path: path,
                                    reason: "has the same version as \(other.path.lastComponent?.string ?? "another file"); give each migration its own version")
            }
            files.append(File(version: version, description: description.replacingOccurrences(of: "_", with: " "),
                              identifier: String(name.dropLast(4)),
                              checksum: SHA256.hash(data: Array(sql.utf8)).hexString, sql: sql, path: path))
        }
        self.files = files.sorted { $0.version.lexicographicallyPrecedes($1.version) }
    }

    /// Splits `V<version>__<description>.sql`; `nil` when the name is outside the scheme.
    static func parse(name: String) -> (version: [Int], description: String)? {
        guard name.hasPrefix("V"), name.hasSuffix(".sql") else { return nil }
        let stem = name.dropFirst().dropLast(4)
        guard let separator = stem.range(of: "__") else { return nil }
        let versionText = stem[..<separator.lowerBound]
        let description = String(stem[separator.upperBound...])
        guard !description.isEmpty,
              description.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_") })
        else { return nil }
        let parts = versionText.split(separator: ".", omittingEmptySubsequences: false)
            .flatMap { $0.split(separator: "_", omittingEmptySubsequences: false) }
        guard !parts.isEmpty else { return nil }
        var numbers: [Int] = []
        for part in parts {
            guard !part.isEmpty, part.count <= 9, part.allSatisfy(\.isASCII), let number = Int(part), number >= 0 else {
                return nil
            }
            numbers.append(number)
        }
        while numbers.count > 1, numbers.last == 0 { numbers.removeLast() }
        return (numbers, description)
    }

    /// The version of an applied migration's identifier, when it is one of this scheme's.
    static func version(ofIdentifier identifier: String) -> [Int]? {
        parse(name: identifier + ".sql")?.version
    }

    /// Compares a document's applied migrations with the folder.
    public func validate(applied: [DocumentMetadata.AppliedMigration]) -> Validation {
        var validation = Validation()
        var appliedVersions: [[Int]] = []
        for record in applied {
            guard let version = Self.version(ofIdentifier: record.identifier) else {
                validation.others.append(record.identifier)
                continue
            }
            appliedVersions.append(version)
            guard let file = files.first(where: { $0.version == version }) else {
                validation.problems.append("\(record.identifier) was applied, but no file in the folder has version \(version.map(String.init).joined(separator: ".")) any more: restore it")
                continue
            }
            if file.identifier != record.identifier {
                validation.problems.append("\(record.identifier) was applied, but its file is now named \(file.identifier).sql: restore the name")
            } else if let checksum = record.checksum, checksum != file.checksum {
                validation.problems.append("\(file.identifier).sql has changed since it was applied (checksum \(checksum.prefix(12)) then, \(file.checksum.prefix(12)) now): restore it and put the change in a new migration")
            }
        }
        let highest = appliedVersions.max { $0.lexicographicallyPrecedes($1) }
        for file in files where !appliedVersions.contains(file.version) {
            if let highest, file.version.lexicographicallyPrecedes(highest) {
                validation.problems.append("\(file.identifier).sql is not applied, but a later version (\(highest.map(String.init).joined(separator: "."))) is: give it a version above the applied ones")
            } else {
                validation.pending.append(file)
            }
        }
        return validation
    }

    /// A migrator that runs `files` (normally a validation's `pending`) and leaves the document's model alone.
    public func migrator(for files: [File]) -> DocumentMigrator {
        var migrator = DocumentMigrator.supplementary()
        for file in files {
            let sql = file.sql
            migrator.registerMigration(file.identifier, checksum: file.checksum) { db in
                try db.execute(sql: sql)
            }
        }
        return migrator
    }
}
