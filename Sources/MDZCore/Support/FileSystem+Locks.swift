#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SystemPackage

extension FileSystem {
    /// Takes an exclusive `flock(2)` on an open file. Returns `false` when another open file description holds it
    /// and `wait` is false. The lock dies with the descriptor and with the process.
    @_spi(Core) public static func lockExclusively(_ descriptor: FileDescriptor, wait: Bool) -> Bool {
        while true {
            guard let failure = Errno.failure(of: flock(descriptor.rawValue, LOCK_EX | (wait ? 0 : LOCK_NB))) else {
                return true
            }
            if failure != .interrupted { return false }
        }
    }
}
