import Foundation
import GRDB
import ManagedDocument
import SystemPackage

/// Stores and bundles made in code for tests, one family of composable functions. Every store is made by
/// ``makeStore(at:pageSize:autoVacuum:journalMode:_:)`` (its settings, then what a closure writes); the shapes tests
/// use are built on it: the notes store of every column type, random blobs, text to a size, a list of values. Any
/// store becomes a bundle through ``makeBundle(at:store:externalData:additionalContent:options:)``.
public enum Fixtures {
    // MARK: Stores

    /// A new SQLite store at `path` (its folder made if missing): `pageSize`, `autoVacuum` (FULL) and `journalMode`
    /// set before anything is written, then `content` writes through the queue (its own transactions), which is closed
    /// after. Returns `path`.
    @discardableResult
    public static func makeStore(at path: FilePath, pageSize: Int? = nil, autoVacuum: Bool = false,
                                 journalMode: String = "DELETE", _ content: (DatabaseQueue) throws -> Void) throws
        -> FilePath {
        try FileManager.default.createDirectory(atPath: path.removingLastComponent().string,
                                                withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: path.string)
        try queue.writeWithoutTransaction { db in
            if let pageSize { try db.execute(sql: "PRAGMA page_size = \(pageSize)") }
            if autoVacuum { try db.execute(sql: "PRAGMA auto_vacuum = FULL") }
            try db.execute(sql: "PRAGMA journal_mode = \(journalMode)")
        }
        try content(queue)
        try queue.close()
        return path
    }

    /// The notes store: `rows` notes (text, NULLs, integers, reals, blobs of `blobSize` random bytes from `seed`) and
    /// a tags table with an index, `user_version` 7, in DELETE journal mode.
    @discardableResult
    public static func makeStore(at path: FilePath, rows: Int, blobSize: Int = 300, seed: UInt64 = 1) throws -> FilePath {
        try makeStore(at: path) { queue in
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA user_version = 7")
                try db.execute(sql: """
                    CREATE TABLE note(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT, score REAL,
                                      count INTEGER, payload BLOB);
                    CREATE TABLE tag(id INTEGER PRIMARY KEY, name TEXT UNIQUE, noteID INTEGER REFERENCES note(id));
                    CREATE INDEX note_title ON note(title);
                    """)
            }
            var generator = SeededGenerator(seed: seed)
            try queue.write { db in
                for index in 0..<rows {
                    let body: String? = index % 7 == 0 ? nil : String(repeating: "body \(index) ", count: index % 13 + 1)
                    let payload: Data? = index % 5 == 0 ? nil : randomBytes(blobSize, &generator)
                    try db.execute(
                        sql: "INSERT INTO note(title, body, score, count, payload) VALUES (?, ?, ?, ?, ?)",
                        arguments: ["Title \(index) — ünïcødé", body, index % 3 == 0 ? nil : Double(index) / 7,
                                    index, payload])
                    if index % 10 == 0 {
                        try db.execute(sql: "INSERT INTO tag(name, noteID) VALUES (?, ?)",
                                       arguments: ["tag\(index)", index + 1])
                    }
                }
            }
        }
    }

    /// A store of `rows` rows of `blobSize` random bytes from `seed` (they do not deflate) in
    /// `blob(id INTEGER PRIMARY KEY, payload BLOB, text TEXT)`, in one transaction; `text` gives row `index`'s text
    /// (NULL without it).
    @discardableResult
    public static func makeBlobStore(at path: FilePath, rows: Int, blobSize: Int, seed: UInt64, pageSize: Int? = nil,
                                     text: ((Int) -> String)? = nil) throws -> FilePath {
        try makeStore(at: path, pageSize: pageSize) { queue in
            var generator = SeededGenerator(seed: seed)
            try queue.write { db in
                try db.execute(sql: "CREATE TABLE blob(id INTEGER PRIMARY KEY, payload BLOB, text TEXT)")
                for index in 0..<rows {
                    try db.execute(sql: "INSERT INTO blob(payload, text) VALUES (?, ?)",
                                   arguments: [randomBytes(blobSize, &generator), text?(index)])
                }
            }
        }
    }

    /// A store of about `bytes` bytes of text rows (words of random letters: it deflates) in
    /// `note(id INTEGER PRIMARY KEY, body TEXT)` at `pageSize`, whose size is not a multiple of the 128 KiB restart
    /// interval (its last segment is partial). The letters follow from `bytes` and `pageSize`.
    @discardableResult
    public static func makeTextStore(at path: FilePath, bytes: Int, pageSize: Int, autoVacuum: Bool = false) throws
        -> FilePath {
        try makeStore(at: path, pageSize: pageSize, autoVacuum: autoVacuum) { queue in
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)")
            }
            var generator = SeededGenerator(seed: UInt64(bytes + pageSize))
            let letters = Array("abcdefghijklmnopqrstuvwxyz")
            var size = 0
            var rows = 0
            while size < bytes || size % 131_072 == 0 {
                try queue.write { db in
                    for _ in 0..<50 {
                        let body = String((0..<900).map { index in
                            index % 7 == 6 ? " " : letters[Int(generator.next() % 26)]
                        })
                        try db.execute(sql: "INSERT INTO note(id, body) VALUES (?, ?)", arguments: [rows, body])
                        rows += 1
                    }
                }
                let attributes = try FileManager.default.attributesOfItem(atPath: path.string)
                size = (attributes[.size] as? NSNumber)?.intValue ?? 0
            }
        }
    }

    /// A small store of one table, `table(id INTEGER PRIMARY KEY, column TEXT)`, holding `values` in order (ids from
    /// 1), in one transaction: the loose legacy store of the batch and CLI tests.
    @discardableResult
    public static func makeListStore(at path: FilePath, table: String = "note", column: String = "title",
                                     values: [String]) throws -> FilePath {
        try makeStore(at: path) { queue in
            try queue.write { db in
                try db.execute(sql: "CREATE TABLE \(table)(id INTEGER PRIMARY KEY, \(column) TEXT)")
                for value in values {
                    try db.execute(sql: "INSERT INTO \(table)(\(column)) VALUES (?)", arguments: [value])
                }
            }
        }
    }

    /// The loose legacy store of the app and CLI tests: `note(id, title)` holding `rows` titles, `note 0` onwards.
    @discardableResult
    public static func makeListStore(at path: FilePath, rows: Int) throws -> FilePath {
        try makeListStore(at: path, values: (0..<rows).map { "note \($0)" })
    }

    /// `count` random bytes from `generator`.
    public static func randomBytes(_ count: Int, _ generator: inout SeededGenerator) -> Data {
        Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    // MARK: Bundles

    /// The options that write a format version 2 bundle (its segment records in the metadata): for tests of what
    /// version 2's metadata says, which rewrite it.
    public static var version2: WritingOptions {
        var options = WritingOptions()
        options.formatVersion = 2
        return options
    }

    /// A bundle of `store` (and of the folders given) written by the library's writer with `options`, with fresh
    /// metadata; what it wrote.
    @discardableResult
    public static func makeBundle(at path: FilePath, store: FilePath, externalData: FilePath? = nil,
                                  additionalContent: FilePath? = nil, options: WritingOptions = WritingOptions()) throws
        -> DocumentMetadata {
        try BundleWriter.write(BundleContent(store: store, externalData: externalData,
                                             additionalContent: additionalContent),
                               metadata: DocumentMetadata(), to: path, options: options)
    }

    /// A bundle of the notes store of `rows` rows (blobs of `blobSize` bytes), with ``makeContentFolders(in:)``'s
    /// external data and additional content when `withFolders`; everything but the bundle is made in a scratch
    /// folder beside it, removed afterwards.
    @discardableResult
    public static func makeBundle(at path: FilePath, rows: Int = 50, blobSize: Int = 300, withFolders: Bool = false,
                                  options: WritingOptions = WritingOptions()) throws -> DocumentMetadata {
        let work = path.removingLastComponent().appending(".fixture-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: work.string, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work.string) }  // Squash cleanup error.
        let store = try makeStore(at: work.appending("store.sqlite"), rows: rows, blobSize: blobSize)
        let folders = withFolders ? try makeContentFolders(in: work) : nil
        return try makeBundle(at: path, store: store, externalData: folders?.externalData,
                              additionalContent: folders?.additionalContent, options: options)
    }

    /// An `_EXTERNAL_DATA` folder of three files of random bytes (5, 10 and 15 KB) and an `AdditionalContent` folder
    /// with a text file and a 40 KB file in a subfolder, in `folder`.
    public static func makeContentFolders(in folder: FilePath) throws
        -> (externalData: FilePath, additionalContent: FilePath) {
        let external = folder.appending("_EXTERNAL_DATA")
        let additional = folder.appending("AdditionalContent")
        try FileManager.default.createDirectory(atPath: external.string, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: additional.appending("images").string,
                                                withIntermediateDirectories: true)
        var generator = SeededGenerator(seed: 9)
        for index in 0..<3 {
            try randomBytes(5_000 * (index + 1), &generator)
                .write(to: URL(fileURLWithPath: external.appending("\(UUID().uuidString)").string))
        }
        try Data("hello".utf8).write(to: URL(fileURLWithPath: additional.appending("readme.txt").string))
        try Data(repeating: 7, count: 40_000).write(
            to: URL(fileURLWithPath: additional.appending("images/pic.raw").string))
        return (external, additional)
    }

    // MARK: Files

    /// The bytes of the file at `path`.
    public static func bytes(of path: FilePath) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path.string)))
    }

    /// Writes `bytes` to the file at `path`, replacing it.
    public static func write(_ bytes: [UInt8], to path: FilePath) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path.string))
    }
}
