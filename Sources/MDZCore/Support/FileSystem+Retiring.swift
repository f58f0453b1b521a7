import Dispatch
import SystemPackage

extension FileSystem {
    /// Closes `descriptors` and drops `values` (readers of files) on a background queue. The last descriptor of a
    /// file replaced or removed since it was opened frees the file's blocks as it closes, which takes tens of
    /// milliseconds for a large one (ext4: 33-39 ms for a bundle of 181 MB): housekeeping a save need not wait for.
    @_spi(Core) public static func retire(_ descriptors: [FileDescriptor], _ values: [any Sendable] = []) {
        retiring.async {
            for descriptor in descriptors { try? descriptor.close() }  // Squash: every write to them was flushed.
            withExtendedLifetime(values) {}
        }
    }

    /// The serial queue ``retire(_:_:)`` closes descriptors on.
    private static let retiring = DispatchQueue(label: "ManagedDocument.retire", qos: .utility)
}
