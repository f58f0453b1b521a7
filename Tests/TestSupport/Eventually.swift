// Waiting in a test for something another task does, on a machine that may be loaded.

/// Polls `condition` every `interval` seconds until it holds; whether it did. It gives up only after the sleeps
/// between polls add up to `timeout`, then looks once more. Counting sleeps, not the clock, matters on a loaded
/// machine: a test run keeps two cooperative threads busy for minutes at a time, a poll then wakes long after its
/// interval, and a clock deadline could pass before the awaited task (on the same threads) ran at all.
public func eventually(
    timeout: Double = 120, every interval: Double = 0.02, _ condition: () async -> Bool
) async -> Bool {
    var slept = 0.0
    while slept < timeout {
        if await condition() { return true }
        try? await Task.sleep(nanoseconds: UInt64(interval * 1_000_000_000))
        slept += interval
    }
    return await condition()
}
