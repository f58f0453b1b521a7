/// The release's version: the one number of the library, `docconvert --version`, the generator every bundle written
/// records in its metadata, and the documentation (`scripts/docs.sh` checks that README.md, CHANGELOG.md,
/// docs/CLI.md and docs/FORMAT.md name this one).
///
/// Semantic versioning: a release that changes the public API incompatibly, or writes bundles older releases cannot
/// read, raises the major number (while it is 0, the minor one). Change it here only, with a CHANGELOG.md entry.
///
/// ```swift
/// print("ManagedDocument \(ManagedDocumentVersion.string)")   // ManagedDocument 0.1.0
/// ```
public enum ManagedDocumentVersion {
    /// `MAJOR.MINOR.PATCH`, as a package manifest names it in `.package(url:from:)`.
    public static let string = "0.1.0"
}
