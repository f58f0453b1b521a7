// The reading core (DocumentError, DocumentMetadata, BundleReader, ReadingLimits, the zip readers and the in-place
// serving), part of this library's public API: an app imports ManagedDocument alone.
@_exported import MDZCore
