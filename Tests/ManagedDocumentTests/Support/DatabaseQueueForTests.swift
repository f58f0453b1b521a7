import GRDB
import SystemPackage

enum DatabaseQueueForTests {
    /// A connection in WAL mode that never checkpoints on its own, so writes stay in the `-wal`.
    static func walQueue(at path: FilePath) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
        }
        let queue = try DatabaseQueue(path: path.string, configuration: configuration)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
        }
        return queue
    }
}
