#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
@_spi(Core) import MDZCore

/// How ``BatchConverter`` works through a tree.
public struct BatchOptions: Sendable {
    /// Conversions computing at once; one that waits for the disk to flush its bundle (or for a lock) lets another
    /// compute meanwhile (three times as many threads as jobs run). Default: the number of cores.
    public var jobs = ProcessInfo.processInfo.activeProcessorCount
    /// Find and classify, change nothing; store items are reported ``BatchItem/Outcome/wouldConvert``.
    public var dryRun = false
    /// How each store is converted (legacy policy, backup folder, compression, busy timeout, media type).
    /// Its ``WritingOptions/compressionThreads`` is capped at the cores divided by ``jobs``.
    /// ``ConversionOptions/busyTimeout`` also bounds the wait for an item that another process holds.
    public var conversion = ConversionOptions()
    /// This worker's share of the tree. Default: all of it.
    public var shard = BatchShard.all
    /// SQL migrations applied to every bundle this run converts or finds converted, each once.
    public var migrations: SQLMigrationFolder?
    /// Candidates waiting for a job, at most. Default: four per job.
    public var queueCapacity: Int?
    /// Also walk the tree ahead of the conversions, only classifying, so that ``BatchProgress`` knows the total
    /// (for a rate and an ETA) early. It reads each file's first bytes once more. Default: off.
    public var survey = false
    /// Take the items from this plan (``BatchPlan``, made by ``BatchConverter/writePlan(to:generator:)``, opened for
    /// ``shard``) instead of walking the tree: only this shard's items are looked at, each when a job takes it, and
    /// the progress knows their total from the start. Default: none, the tree is walked.
    public var plan: BatchPlan?

    /// The defaults: one job per core, the whole tree, legacy files backed up.
    public init() {}
}
