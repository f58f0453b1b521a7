import Testing

/// A trait for a `.serialized` suite: each of its tests runs in a task of high priority.
///
/// All tests of the run share the runtime's threads and take turns on them at every `await`. A serialized suite is a
/// chain: its tests run one after another, each awaiting often (it opens, reads and closes documents state after
/// state), so each of its turns waits behind the jobs of every other test of the run. The crash states' first test
/// took 809 s beside the others and 75 s alone, and the suite, the last to finish, ran its other tests on one core
/// after the rest had finished. Each test in a task of high priority, the chain keeps pace with the rest: the whole
/// run took 910 s instead of 980-1,010 s on 2 cores. What each test does and checks is unchanged.
public struct SerialChain: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        // > Suites pass through: their tests get the trait themselves (isRecursive), each in a task of its own.
        guard testCase != nil else { return try await function() }
        // > Awaited before returning: the closure never outlives the call.
        try await withoutActuallyEscaping(function) { function in
            try await Task(priority: .high) { try await function() }.value
        }
    }
}

extension Trait where Self == SerialChain {
    /// Runs each test of a `.serialized` suite in a task of high priority (``SerialChain``).
    public static var serialChain: SerialChain { SerialChain() }
}
