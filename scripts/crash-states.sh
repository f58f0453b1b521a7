#!/usr/bin/env bash
# Checks every state a power cut can leave on every write path of the library, and every step of a save failed in
# turn (Tests/ManagedDocumentTests/Saving/CrashStateTests.swift; docs/RELIABILITY.md, "Crash states"): each change
# the library makes goes through FileIO, a recorder builds the states from them under the documented persistence
# model, and each state is materialized and checked (the document recovers every acknowledged commit, the bundle is
# whole and old or new, a legacy source is never gone while its bundle is not durable).
#
#   scripts/crash-states.sh [SCALE]     default 20: each path makes SCALE times CI's commits and saves
#
# Prints each path's count and its states by kind (all persisted, none, a prefix, all but one, all but two, a write
# torn with its old bytes, a write torn with garbage), then the totals.
#
# CI checks a sample of each path's states (at most 40) with single drops capped at 12 a point; this script
# checks all of them, with every single drop, and fails each step of a save with ENOSPC, EIO and EMFILE.
# SCRATCH (default .build) is the build folder swift test uses; CONFIGURATION=release runs a release build of the
# tests (with -enable-testing), three to five times faster per state.
set -euo pipefail
cd "$(dirname "$0")/.."
scale=${1:-20}
[[ $scale =~ ^[1-9][0-9]*$ ]] || { echo "crash-states: SCALE must be a positive integer" >&2; exit 64; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "crash-states: every state, scale $scale" >&2
status=0
CRASH_STATES=all CRASH_DROPS=all CRASH_SCALE=$scale FAULTS=all \
    swift test --scratch-path "${SCRATCH:-.build}" ${CONFIGURATION:+-c "$CONFIGURATION" -Xswiftc -enable-testing} \
    --filter "CrashStateTests" 2>&1 | tee "$log" \
    | grep -E "^crash-states:|^crash-kinds:|^faults|✘|Test run" || true
grep -q "✘" "$log" && status=1
grep -q "Test run with .* passed" "$log" || status=1
awk '/^crash-states: / { states += $(NF-9); violations += $(NF-4) }
     END { printf "crash-states: %d states checked over every path, %d violations\n", states, violations }' "$log"
# > The states by kind (CrashState.Kind), over every path: "crash-kinds: PATH: kind=N, kind=N, ...".
python3 - "$log" <<'PYEOF'
import re, sys
totals = {}
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("crash-kinds: "):
        for kind, count in re.findall(r"(?:: |, )([^=,:]+)=(\d+)", line):
            totals[kind] = totals.get(kind, 0) + int(count)
print("crash-states: by kind: " + ", ".join(f"{kind} {count}" for kind, count in totals.items()))
PYEOF
exit $status
