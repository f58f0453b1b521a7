#!/usr/bin/env python3
"""The planted durability bugs of scripts/crash-mutants.sh, one line each.

  crash-mutants.py list                  name|file|check|journal modes, one mutant a line
  crash-mutants.py apply NAME FILE       replaces the mutant's line in FILE (which must hold it exactly once)
"""
import sys

# name, file, the line as it is, the line as the mutant has it, the check (swift test filter), journal modes
MUTANTS = [
    ("journal-unlink-unflushed", "Sources/ManagedDocument/Document/WorkingStore/WorkingFilesVFS.swift",
     "            try FileSystem.syncDirectory(path.removingLastComponent())",
     "            _ = path  // mutant: no folder flush after the journal's unlink",
     "CrashStateTests/commits", "overlay:DELETE"),
    ("powersafe-sequential", "Sources/ManagedDocument/Document/Overlay/OverlayVFS.swift",
     "        methods.pointee.xDeviceCharacteristics = { _ in SQLITE_IOCAP_POWERSAFE_OVERWRITE }",
     "        methods.pointee.xDeviceCharacteristics = { _ in SQLITE_IOCAP_POWERSAFE_OVERWRITE | SQLITE_IOCAP_SEQUENTIAL }"
     "  // mutant: SQLite never flushes its journal",
     "CrashStateTests/commits", "overlay:DELETE"),
    ("bundle-not-flushed", "Sources/MDZCore/Support/AtomicFile.swift",
     "        try FileSystem.sync(descriptor, path: temporaryPath)",
     "        // mutant: the bundle is not flushed before its rename",
     "CrashStateTests/save", ""),
    ("bundle-folder-not-flushed", "Sources/MDZCore/Support/AtomicFile.swift",
     '        try FileSystem.syncDirectory(directory.isEmpty ? "." : directory)',
     "        // mutant: no folder flush after the rename",
     "CrashStateTests/save", ""),
    ("map-record-unflushed", "Sources/ManagedDocument/Document/Overlay/OverlayStore.swift",
     "            try dataSync(state.map, path: store.mapPath)",
     "            // mutant: the commit is acknowledged before its map record is flushed",
     "CrashStateTests/commits", "overlay:DELETE"),
    ("pages-unflushed", "Sources/ManagedDocument/Document/Overlay/OverlayStore.swift",
     "            try dataSync(state.overlay, path: store.overlayPath)",
     "            // mutant: the map names pages whose bytes are not flushed",
     "CrashStateTests/commits", "overlay:DELETE"),
    ("extracted-syncs-dropped", "Sources/ManagedDocument/Document/WorkingStore/WorkingFilesVFS.swift",
     "        table.pointee.xSync = { file, flags in",
     "        table.pointee.xSync = { file, flags in return SQLITE_OK  // mutant: an extracted store's flushes dropped",
     "CrashStateTests/commits", "extracted:DELETE"),
    ("group-flush-off-by-one", "Sources/MDZCore/Support/FolderFlushes.swift",
     "                    if state.covered >= ticket { return .covered }",
     "                    if state.covered + 1 >= ticket { return .covered }  // mutant: a ticket taken as covered by the flush before it",
     "CrashStateTests/batch", ""),
    ("working-folder-unflushed", "Sources/ManagedDocument/Document/Document+Opening.swift",
     "            try FileSystem.syncDirectory(copy.directory.removingLastComponent())",
     "            // mutant: the working copy's folder entry is not flushed",
     "CrashStateTests/openAndCommit", ""),
]


def main(argv):
    if len(argv) == 2 and argv[1] == "list":
        for name, file, _, _, check, modes in MUTANTS:
            print(f"{name}|{file}|{check}|{modes}")
        return 0
    if len(argv) == 4 and argv[1] == "apply":
        found = [m for m in MUTANTS if m[0] == argv[2]]
        if not found:
            sys.exit(f"no mutant named {argv[2]}")
        _, _, old, new, _, _ = found[0]
        with open(argv[3]) as f:
            lines = f.read().split("\n")
        hits = [i for i, line in enumerate(lines) if line == old]
        if len(hits) != 1:
            sys.exit(f"the line is in the file {len(hits)} times, not once: {old.strip()}")
        lines[hits[0]] = new
        with open(argv[3], "w") as f:
            f.write("\n".join(lines))
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
