@_spi(Core) import MDZCore
extension StoreSlot {
    /// A slot's entry in the table ``BundleVFS`` opens files from, for as long as this object lives: its `deinit`
    /// removes the entry, so whoever keeps the connection keeps this beside it and nobody unregisters by hand.
    ///
    /// The entry is looked up when SQLite opens the store (`xOpen`, by the `slot` parameter of ``uri``); the open
    /// file then holds the slot itself until SQLite closes it. A URI whose registration is gone opens nothing
    /// (`SQLITE_CANTOPEN`), and a number is never given twice.
    final class Registration: Sendable {
        let slot: StoreSlot
        /// The number `xOpen` reads from the URI's `slot` parameter (`sqlite3_uri_int64`): never 0, never reused.
        let number: Int64

        private static let table = Protected<(next: Int64, slots: [Int64: StoreSlot])>((1, [:]))

        init(_ slot: StoreSlot) {
            self.slot = slot
            number = Self.table.withLock { table in
                defer { table.next += 1 }
                table.slots[table.next] = slot
                return table.next
            }
        }

        deinit { _ = Self.table.withLock { $0.slots.removeValue(forKey: number) } }

        /// The `file:` URI that opens the slot through the VFS, read-only (and immutable when the slot is). Its path
        /// lies in a folder that does not exist, so the journal and WAL names SQLite derives from it are never there.
        var uri: String {
            "file:/\(BundleVFS.name)/store?vfs=\(BundleVFS.name)&mode=ro&slot=\(number)"
                + (slot.isImmutable ? "&immutable=1" : "")
        }

        /// The slot registered under `number`, while its registration lives.
        static func slot(numbered number: Int64) -> StoreSlot? {
            table.withLock { $0.slots[number] }
        }
    }
}
