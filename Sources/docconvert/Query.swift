import ArgumentParser
import Foundation
import GRDB
import ManagedDocument
import SystemPackage

struct Query: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",  // named, not derived from the type's name at every start (docs/BENCHMARKS.md)
        abstract: "Run a read-only SQL query on a bundle's store, without extracting it.",
        discussion: """
            The store is read in place when the bundle allows it (it records segment digests, and its store is \
            stored, or deflated with a restart index): only the segments the query touches are read and \
            inflated, each checked against its SHA-256 before SQLite sees a byte of it, with a bounded cache \
            (--cache-size). Otherwise (a bundle of an older or another writer, a repacked one, or one whose \
            segments are larger than reading in place holds: 16 MiB a digest segment, 4 MiB a restart \
            segment) the store is extracted into a private temporary folder, checked as a whole and read \
            there; a notice on standard error says so. The bundle is never changed, and writes are refused (the connection is read-only).

            Rows go to standard output, one per line, values separated by tabs, after a line of column names \
            (NULL for null, <blob N bytes> for blobs). A value never breaks its line: tabs, newlines, carriage \
            returns and backslashes in text print as \\t, \\n, \\r and \\\\, other control characters as \\xHH, \
            and text that would read as a null or a blob (NULL, or starting with <blob) gets a backslash first \
            (\\NULL), so the string 'NULL' and a null differ. --json prints one object with `access`, `columns` \
            and `rows` (arrays of values; blobs as {"base64": …}), streamed as the rows come: read that from a \
            program.

            Exit status: 0; 64 for a bad option, SQL that SQLite refuses, several statements or one that writes; 66 \
            when the bundle does not exist; 65 when it is refused or a segment of its store is damaged; 74 on an \
            I/O error. With --json, standard output always holds one complete JSON document: on an error it has an \
            `error` object (alone, or after the rows printed before it).

            Examples:
              docconvert query Notes.mdz "SELECT count(*) FROM note"
              docconvert query --json Notes.mdz "SELECT id, title FROM note WHERE id < 10"
            """
    )

    @Argument(help: "The bundle.")
    var bundle: String

    @Argument(help: "One SQL statement (read-only).")
    var sql: String

    @Option(name: .long, help: "MiB of inflated store segments kept in memory.")
    var cacheSize: Int = BundleStore.defaultCacheSize >> 20

    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard cacheSize >= 1 else { throw ValidationError("--cache-size must be at least 1 (MiB)") }
    }

    func run() throws {
        let json = output.json
        let store = try reportingErrors(json: json) { try BundleStore(at: FilePath(bundle), cacheSize: cacheSize << 20) }
        defer { store.close() }
        if let reason = store.reason {
            FileHandle.standardError.write(Data("notice: \(bundle): the store was extracted to be read, because \(reason)\n".utf8))
        }
        let out = BufferedOutput()
        var isDocumentOpen = false  // with --json: the result's document has begun on stdout
        do {
            try store.read { db in
                let statement = try oneStatement(in: db)
                let columns = statement.columnNames
                if json {
                    out.write("{\"access\":\(Self.json(.text(store.access.rawValue))),\"columns\":[")
                    out.write(columns.map { Self.json(.text($0)) }.joined(separator: ","))
                    out.write("],\"rows\":[")
                    isDocumentOpen = true
                }
                // > The text header is written once the statement has run (before its first row, or after it
                // > finished without rows): one that SQLite refuses as it starts (an ATTACH) prints only its error.
                let header = columns.isEmpty ? "" : columns.map { Self.text(.text($0)) }.joined(separator: "\t") + "\n"
                let rows = try Row.fetchCursor(statement)
                var first = true
                while let row = try rows.next() {
                    let values = row.databaseValues.map(Self.value)
                    if json {
                        out.write((first ? "\n" : ",\n") + "[" + values.map(Self.json).joined(separator: ",") + "]")
                    } else {
                        if first { out.write(header) }
                        out.write(values.map(Self.text).joined(separator: "\t") + "\n")
                    }
                    first = false
                }
                if !json && first { out.write(header) }
            }
        } catch {
            let (problem, status) = describe(error)
            guard isDocumentOpen else {
                out.flush()
                throw failure(problem, status: status, json: json)
            }
            // > The rows printed so far stay; the document is closed with the error, so it is still one document.
            out.write("\n],\"error\":\(Self.encoded(problem))}\n")
            out.flush()
            throw failure(problem, status: status, json: false)
        }
        if json { out.write("\n]}\n") }
        out.flush()
    }

    /// A query that SQLite or this command refuses: what to say, and the exit status.
    private struct Refusal: Error {
        var message: String
    }

    /// The one read-only statement in `sql`, or a ``Refusal`` that says what is wrong with the text.
    private func oneStatement(in db: Database) throws -> Statement {
        let cursor = try db.allStatements(sql: sql)
        var statements: [Statement] = []
        while let statement = try cursor.next() { statements.append(statement) }
        guard statements.count == 1, let statement = statements.first else {
            throw Refusal(message: statements.isEmpty
                ? "the SQL text holds no statement; give one, such as \"SELECT count(*) FROM sqlite_master\""
                : "the SQL text holds \(statements.count) statements and query runs one; run docconvert query once for each")
        }
        guard statement.isReadonly else { throw Refusal(message: Self.writeRefused) }
        return statement
    }

    private static let writeRefused = "the statement would change the store, and query only reads; to change it, extract the store (docconvert extract --output) or apply a migration (docconvert migrate)"

    /// An error of the query as one line naming the bundle, and its exit status.
    private func describe(_ error: any Error) -> (ErrorJSON, Int32) {
        let usage = DocumentError.Code.invalidArgument
        switch error {
        case let error as DocumentError:
            return (ErrorJSON(error), DocConvert.exitStatus(for: error))
        case let refusal as Refusal:
            return (ErrorJSON(code: usage.description, message: "\(bundle): \(refusal.message)"), DocConvert.exitStatus(for: usage))
        case let error as DatabaseError:
            let message = error.resultCode == .SQLITE_READONLY ? Self.writeRefused
                : "SQLite refused the query: \(error.message ?? "\(error.resultCode)"); check the SQL"
            return (ErrorJSON(code: usage.description, message: "\(bundle): \(message)"), DocConvert.exitStatus(for: usage))
        default:
            return (ErrorJSON(code: DocumentError.Code.ioFailure.description, message: "\(bundle): \(error)"),
                    DocConvert.exitStatus(for: .ioFailure))
        }
    }

    /// The error object as the other JSON outputs show it (`code`, `entry` when there is one, `message`).
    private static func encoded(_ error: ErrorJSON) -> String {
        var members = ["\"code\":" + json(.text(error.code))]
        if let entry = error.entry { members.append("\"entry\":" + json(.text(entry))) }
        members.append("\"message\":" + json(.text(error.message)))
        return "{" + members.joined(separator: ",") + "}"
    }

    enum Value {
        case null, integer(Int64), real(Double), text(String), blob(Data)
    }

    static func value(_ value: DatabaseValue) -> Value {
        switch value.storage {
        case .null: return .null
        case .int64(let number): return .integer(number)
        case .double(let number): return .real(number)
        case .string(let text): return .text(text)
        case .blob(let data): return .blob(data)
        }
    }

    static func text(_ value: Value) -> String {
        switch value {
        case .null: return "NULL"
        case .integer(let number): return String(number)
        case .real(let number): return String(number)
        case .text(let text): return escaped(text)
        case .blob(let data): return "<blob \(counted(data.count, "byte"))>"
        }
    }

    /// `text` on one line of the text output: control characters and backslashes escaped, and a backslash before text
    /// that would read as a null or a blob, so that every value reads back as what it is.
    static func escaped(_ text: String) -> String {
        var out = text == "NULL" || text.hasPrefix("<blob") ? "\\" : ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\\": out += "\\\\"
            case "\u{00}"..."\u{1F}", "\u{7F}": out += String(format: "\\x%02X", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    static func json(_ value: Value) -> String {
        switch value {
        case .null: return "null"
        case .integer(let number): return String(number)
        case .real(let number): return number.isFinite ? String(number) : "null"
        case .text(let text):
            let data = (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8)
            return String(decoding: data, as: UTF8.self)
        case .blob(let data): return "{\"base64\":\"\(data.base64EncodedString())\"}"
        }
    }
}

/// Standard output in 64 KiB writes (a query can print millions of rows).
final class BufferedOutput {
    private var buffer = Data()

    func write(_ text: String) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= 64 << 10 { flush() }
    }

    func flush() {
        guard !buffer.isEmpty else { return }
        FileHandle.standardOutput.write(buffer)
        buffer.removeAll(keepingCapacity: true)
    }
}
