#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// Prints `message` on standard error and exits with `status`.
public func fail(_ message: String, status: Int32) -> Never {
    _ = try? FileDescriptor.standardError.writeAll((message + "\n").utf8)
    exit(status)
}

/// A small, fast, deterministic generator (SplitMix64), so that every run makes the same rows.
public struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Fills `bytes` with the generator's next words, little-endian.
    public mutating func fill(_ bytes: inout [UInt8]) {
        var index = 0
        while index < bytes.count {
            var word = next()
            for _ in 0..<min(8, bytes.count - index) {
                bytes[index] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                index += 1
            }
        }
    }
}
