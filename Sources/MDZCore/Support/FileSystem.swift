/// Small, checked wrappers over the POSIX calls the safety protocols need, turning a call's `Errno` into a
/// ``DocumentError`` that names the file. Every change to a file goes through ``FileIO``, the one door tests observe.
///
/// The wrappers are arranged by family, as swift-system arranges its own: a file's status, kind and identity
/// (`FileSystem+Status.swift`, over swift-system's `Stat`), reading (`+Reading`), writing and scratch files
/// (`+Writing`), copying (`+Copying`), flushes (`+Flush`), names (rename, link, removal, folders made, listed and
/// removed: `+Names`), locks (`+Locks`) and descriptors closed in the background (`+Retiring`).
@_spi(Core) public enum FileSystem: Sendable {}
