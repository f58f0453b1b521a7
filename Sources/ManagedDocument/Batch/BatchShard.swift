import Crypto
@_spi(Core) import MDZCore

/// One worker's share of a tree: the items whose path, relative to the root, hashes to ``index`` modulo ``count``.
///
/// The partition depends only on the relative path, so N workers that see the same tree (a shared volume mounted
/// anywhere) split it the same way, every item belongs to exactly one shard, and a rerun gives each worker the same
/// items again.
///
/// ```swift
/// let shard = try BatchShard(parsing: "2/8")
/// shard.owns("home/ana/Diary.sqlite")
/// ```
public struct BatchShard: Sendable, Equatable, Codable, CustomStringConvertible {
    /// This worker's index, `0..<count`.
    public var index: Int
    /// The number of workers.
    public var count: Int
    /// Where the shard came from: `--shard`, `JOB_COMPLETION_INDEX`, `SLURM_ARRAY_TASK_ID`, or `none`.
    public var origin: String

    /// The whole tree: one worker.
    public static let all = BatchShard(uncheckedIndex: 0, count: 1, origin: "none")

    private init(uncheckedIndex index: Int, count: Int, origin: String) {
        self.index = index
        self.count = count
        self.origin = origin
    }

    /// A shard `index` of `count`.
    ///
    /// - Throws: ``DocumentError/Code/invalidArgument`` when `count` is not positive or `index` is not in `0..<count`.
    public init(index: Int, count: Int, origin: String = "--shard") throws {
        guard count >= 1 else { throw Self.problem("the number of shards must be at least 1 (got \(count))") }
        guard (0..<count).contains(index) else {
            throw Self.problem("the shard index must be from 0 to \(count - 1) (got \(index) of \(count))")
        }
        self.init(uncheckedIndex: index, count: count, origin: origin)
    }

    /// Parses `K/N`, e.g. `0/4` … `3/4`.
    public init(parsing text: String) throws {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]) else {
            throw Self.problem("'\(text)' is not a shard; write K/N, e.g. 0/4 for the first of four workers")
        }
        try self.init(index: index, count: count)
    }

    /// The shard a scheduler gave this process through its environment, or `nil` when it gave none.
    ///
    /// - A Kubernetes Indexed Job sets `JOB_COMPLETION_INDEX`; the number of shards (the Job's `completions`) comes
    ///   from `count`, or from `DOCCONVERT_SHARD_COUNT` when `count` is `nil`.
    /// - A Slurm job array sets `SLURM_ARRAY_TASK_ID`. With a fixed number of shards N (`count`, or
    ///   `DOCCONVERT_SHARD_COUNT`), the shard is the task ID modulo N, whatever was submitted this time: the
    ///   original array (`--array=0-15` or `1-16` with N = 16) and a resubmission of some of its IDs alone
    ///   (`--array=9`) give each ID the same shard. An array whose IDs span more than N values would put two
    ///   tasks on one shard and is refused. Without a fixed N, the array's own `SLURM_ARRAY_TASK_COUNT` is N: a
    ///   contiguous array maps its IDs the same way (ID modulo N), a stepped one (`--array=0-30:10`) by its place
    ///   in the array (`SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_STEP`); a resubmitted single ID is then an array
    ///   of one task, which takes the whole tree (safe, but not its share: fix N).
    ///
    /// - Throws: ``DocumentError/Code/invalidArgument`` when a variable is set but the shard it describes is incomplete or invalid.
    public static func fromEnvironment(_ environment: [String: String], count: Int? = nil) throws -> BatchShard? {
        func number(_ name: String) throws -> Int? {
            guard let text = environment[name], !text.isEmpty else { return nil }
            guard let value = Int(text.trimmingWhitespace) else { throw Self.problem("\(name)=\(text) is not a whole number") }
            return value
        }
        if let index = try number("JOB_COMPLETION_INDEX") {
            guard let count = try count ?? number("DOCCONVERT_SHARD_COUNT") else {
                throw Self.problem("JOB_COMPLETION_INDEX is set but the number of shards is unknown; pass --shard-count with the Job's completions, or set DOCCONVERT_SHARD_COUNT")
            }
            return try BatchShard(index: index, count: count, origin: "JOB_COMPLETION_INDEX")
        }
        guard let id = try number("SLURM_ARRAY_TASK_ID") else { return nil }
        guard id >= 0 else { throw Self.problem("SLURM_ARRAY_TASK_ID=\(id) is negative") }
        let minimum = try number("SLURM_ARRAY_TASK_MIN")
        let maximum = try number("SLURM_ARRAY_TASK_MAX")
        if let fixed = try count ?? number("DOCCONVERT_SHARD_COUNT") {
            guard fixed >= 1 else { throw Self.problem("the number of shards must be at least 1 (got \(fixed))") }
            if let minimum, let maximum, maximum - minimum >= fixed {
                throw Self.problem("this array's task IDs run from \(minimum) to \(maximum), more than the \(fixed) shards: two tasks would share a shard; submit \(fixed) consecutive IDs (e.g. --array=0-\(fixed - 1)) and resubmit single IDs from that range")
            }
            return try BatchShard(index: id % fixed, count: fixed, origin: "SLURM_ARRAY_TASK_ID")
        }
        guard let total = try number("SLURM_ARRAY_TASK_COUNT") else {
            throw Self.problem("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; pass --shard-count with the array's size")
        }
        let step = max(1, try number("SLURM_ARRAY_TASK_STEP") ?? 1)
        let first = minimum ?? 0
        guard id >= first, (id - first) % step == 0, (id - first) / step < total else {
            throw Self.problem("SLURM_ARRAY_TASK_ID=\(id) does not fit the array (min \(first), step \(step), \(total) tasks)")
        }
        let index = step == 1 ? id % max(1, total) : (id - first) / step
        return try BatchShard(index: index, count: total, origin: "SLURM_ARRAY_TASK_ID")
    }

    /// Whether this shard owns the item at `relativePath` (relative to the batch root, `/`-separated).
    public func owns(_ relativePath: String) -> Bool {
        count == 1 || Self.bucket(of: relativePath, count: count) == index
    }

    /// The shard an item belongs to: the first 8 bytes of the SHA-256 of its relative path, modulo `count`.
    public static func bucket(of relativePath: String, count: Int) -> Int {
        let digest = Array(SHA256.hash(data: Array(relativePath.utf8)))
        let value = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int(value % UInt64(count))
    }

    public var description: String { "\(index)/\(count)" }

    /// A shard that cannot be used: ``DocumentError/Code/invalidArgument`` with the reason in words.
    static func problem(_ reason: String) -> DocumentError {
        DocumentError(.invalidArgument, path: nil, reason: reason)
    }
}

extension String {
    fileprivate var trimmingWhitespace: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
