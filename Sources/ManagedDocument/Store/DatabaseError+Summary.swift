@_spi(Core) import MDZCore
import GRDB

extension DatabaseError: _ShortlySummarized {
    /// SQLite's result code and message, without GRDB's "- while executing `…`" (a statement the user never wrote).
    public var shortSummary: String {
        "SQLite error \(resultCode.rawValue): \(message ?? "\(resultCode)")"
    }
}
