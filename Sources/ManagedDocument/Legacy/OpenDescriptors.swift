#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CArchive  // `struct stat`: Swift attributes it to the first module that includes <sys/stat.h>, CArchive in some builds
import Foundation
import SystemPackage
@_spi(Core) import MDZCore

/// The files other processes have open, as Linux shows them in `/proc/PID/fd`: what tells a store an app keeps open
/// while idle (a rollback-journal connection between transactions holds no lock SQLite's checks could see) from one
/// nobody uses, before its files are moved or deleted.
///
/// A scan lists every process this user may look at (its own processes; every process for root) and `stat(2)`s each
/// open descriptor: a set of (device, inode). This process is left out: its descriptors are its own conversions'.
/// What it cannot see: other users' processes when not run as root (their `fd` folders are not readable), processes
/// on other machines sharing the file system, and a process that opens the store after the scan began.
///
/// Scans are shared: a caller asks for one that began after a given instant (its disposal lock taken) and is given
/// the latest such scan, or waits for the one under way, or starts one that every caller waiting meanwhile then
/// shares. So a batch's workers disposing at about the same time pay for one pass over `/proc`, and no caller is
/// answered from a scan older than its lock.
final class OpenDescriptors: Sendable {
    /// The one instance: scans describe the whole machine, so every conversion of the process shares them.
    static let shared = OpenDescriptors()

    /// Which file: `st_dev` and `st_ino`.
    struct FileKey: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
    }

    /// A process holding one of the files asked about.
    struct Holder: Sendable, Equatable {
        var pid: Int32
        /// Its `comm` (the program's name, at most 15 bytes), `nil` when it could not be read.
        var name: String?
        /// The file it has open.
        var path: FilePath

        /// "process 1234 (python3)".
        var description: String { "process \(pid)\(name.map { " (\($0))" } ?? "")" }
    }

    private struct Scan: Sendable {
        /// `CLOCK_MONOTONIC` nanoseconds when the scan began.
        var started: UInt64
        /// Every file open in another process, with one process holding it.
        var open: [FileKey: Int32]
    }

    private struct State: Sendable {
        var latest: Scan?
        /// When the scan under way began, if one is.
        var running: UInt64?
    }

    private let state = WaitableState(State())

    /// The monotonic clock, in nanoseconds.
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// The first of `paths` (those that exist) another process has open, by a scan that began at `instant` or later;
    /// `nil` when none is, or when `/proc` cannot be read (then nothing can be known: the caller goes by SQLite's
    /// locks alone, as on systems without `/proc`).
    func holder(of paths: [FilePath], scannedAfter instant: UInt64) -> Holder? {
        var wanted: [(FileKey, FilePath)] = []
        for path in paths {
            // > No status (not there): nobody has it open.
            guard let status = try? Stat(path, followTargetSymlink: false) else { continue }
            wanted.append((FileKey(device: status.identity.device, inode: status.identity.inode), path))
        }
        guard !wanted.isEmpty, let open = scan(startedAfter: instant) else { return nil }
        for (key, path) in wanted {
            if let pid = open[key] { return Holder(pid: pid, name: Self.commandName(of: pid), path: path) }
        }
        return nil
    }

    /// The open files of a scan that began at `instant` or later: the latest one, the one under way, or a new one.
    /// Waiting for another thread's scan gives back this thread's CPU turn (a batch's other conversions compute).
    private func scan(startedAfter instant: UInt64) -> [FileKey: Int32]? {
        enum Step { case use([FileKey: Int32]), run(UInt64), wait }
        while true {
            let step: Step = state.withLock { state in
                if let latest = state.latest, latest.started >= instant { return .use(latest.open) }
                if state.running != nil { return .wait }  // it may serve, or free the way for a new one
                let started = Self.now()
                state.running = started
                return .run(started)
            }
            switch step {
            case .use(let open):
                return open
            case .wait:
                CPUTurns.whileWaiting {
                    state.wait { state in state.running == nil ? () : nil }
                }
            case .run(let started):
                let open = Self.scanProcesses()
                state.withLock { state in
                    state.running = nil
                    if let open { state.latest = Scan(started: started, open: open) }
                }
                return open
            }
        }
    }

    /// One pass over `/proc`: every descriptor of every other process this user may look at. `nil` when `/proc`
    /// cannot be listed.
    private static func scanProcesses() -> [FileKey: Int32]? {
        guard let proc = opendir("/proc") else { return nil }
        defer { closedir(proc) }
        let own = getpid()
        var open: [FileKey: Int32] = [:]
        while let entry = readdir(proc) {
            let name = FileSystem.entryName(entry)
            guard let pid = Int32(String(cString: name)), pid != own else { continue }  // not a process, or this one
            // > Another user's process: its `fd` folder is not readable (EACCES); one that ended: ENOENT. Both skipped.
            // > (`opendir` costs an `openat` and an `fstat`; `openat` then `fdopendir` would add an `fcntl`.)
            guard let descriptors = opendir("/proc/\(pid)/fd") else { continue }
            let folder = dirfd(descriptors)
            while let descriptor = readdir(descriptors) {
                let fd = FileSystem.entryName(descriptor)
                guard fd.pointee != 0x2E else { continue }  // "." and ".."
                var info = stat()
                // > `stat` follows the descriptor's magic link to the file itself, whatever its name is now.
                guard fstatat(folder, fd, &info, 0) == 0 else { continue }
                open[FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))] = pid
            }
            closedir(descriptors)
        }
        return open
    }

    private static func commandName(of pid: Int32) -> String? {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/comm") else { return nil }
        let name = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return name.isEmpty ? nil : name
    }
}
