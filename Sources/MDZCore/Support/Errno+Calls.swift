#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

extension Errno {
    /// The calling thread's `errno`, read now. Read it right after the call that failed, inside the closure that
    /// made it: any later call (a semaphore wait, a `close`, an allocation) may change it.
    @_spi(Core) public static var current: Errno { Errno(rawValue: errno) }

    /// The error of a system call that returns 0 when it succeeds and -1 with `errno` set when it fails: `nil`, or
    /// `errno` read at once. Wrap the call itself, inside the closure that makes it:
    ///
    /// ```swift
    /// let failure = path.withPlatformString { Errno.failure(of: unlink($0)) }
    /// ```
    @_spi(Core) public static func failure(of result: CInt) -> Errno? {
        result == 0 ? nil : current
    }
}
