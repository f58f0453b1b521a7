#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Core) import MDZCore

// How reports write an item's kind and a failure's code: each as the one word docconvert's reports have always held.

extension BatchItem {
    /// What an item is, written in reports as one word: `coredata-sqlite`, `sqlite`, `uimanageddocument-package`;
    /// `sqlite-store` when not classified (dry run, failure); `file`, `folder`, `symlink`, `bundle` for things that
    /// are not stores.
    public enum Kind: Sendable, Hashable, Codable, CustomStringConvertible {
        /// A legacy store, of the kind its conversion (or its bundle's provenance) found.
        case legacyStore(LegacyStore.Kind)
        /// A SQLite store not classified further (a dry run, a failure before the store was read).
        case sqliteStore
        /// A document bundle that was not converted from a store beside it.
        case bundle
        /// A file that is not a store.
        case file
        /// A folder that is not a package.
        case folder
        /// A symbolic link (never followed).
        case symlink

        /// The report's word for it.
        public var description: String {
            switch self {
            case .legacyStore(let kind): return kind.rawValue
            case .sqliteStore: return "sqlite-store"
            case .bundle: return "bundle"
            case .file: return "file"
            case .folder: return "folder"
            case .symlink: return "symlink"
            }
        }

        /// A converted bundle's kind: its provenance's, or ``sqliteStore`` when the provenance names none this
        /// version knows.
        init(provenanceOf metadata: DocumentMetadata) {
            let kind = metadata.provenance.flatMap { LegacyStore.Kind(rawValue: $0.kind) }
            self = kind.map(Kind.legacyStore) ?? .sqliteStore
        }

        /// The kind a report's word names, `nil` for a word no report uses.
        init?(word: String) {
            let others: [Kind] = [.sqliteStore, .bundle, .file, .folder, .symlink]
            if let kind = LegacyStore.Kind(rawValue: word) {
                self = .legacyStore(kind)
            } else if let kind = others.first(where: { $0.description == word }) {
                self = kind
            } else {
                return nil
            }
        }

        /// Reads the word a report holds.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            let word = try container.decode(String.self)
            guard let kind = Kind(word: word) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(word)' is not an item kind")
            }
            self = kind
        }

        /// Writes the report's word.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(description)
        }
    }
}

extension BatchItem.Failure {
    private enum CodingKeys: String, CodingKey { case code, message }

    /// Reads a report's failure: a code this version does not know is an error.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .code)
        guard let code = DocumentError.Code.allCases.first(where: { $0.description == name }) else {
            throw DecodingError.dataCorruptedError(forKey: .code, in: container,
                                                   debugDescription: "'\(name)' is not an error code")
        }
        self.init(code: code, message: try container.decode(String.self, forKey: .message))
    }

    /// Writes the code's name and the message.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(code.description, forKey: .code)
        try container.encode(message, forKey: .message)
    }
}
