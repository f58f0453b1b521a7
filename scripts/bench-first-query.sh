#!/usr/bin/env bash
# The first query of a fresh process on a large document, format version 3 beside version 2 (issue "reading in place
# at the extracted file's speed, at any size": <= 50 ms at 16 GiB; docs/BENCHMARKS.md, "Format version 3"). What a
# first query costs beyond SQLite's own work is the bundle's open: the central directory, the metadata and, in version
# 3, the store index (48 bytes a 128 KiB segment: 6.3 MB at 16 GiB, read and checked whole), which do not depend on
# what the rows hold. So the store here is made quickly: 64 MiB zero blobs up to the size asked (deflate turns them
# into a bundle of about 70 MB), converted to both versions with `docconvert create`.
#
#   scripts/bench-first-query.sh
#
# Environment (all optional):
#   BENCH_GB=16           store size in GiB (the store and both bundles need BENCH_GB GiB + 150 MB free)
#   BENCH_ROUNDS=9        fresh processes of each case, alternating version 2 and version 3; medians
#   BENCH_DIR=./bench-work  work folder (relative to the repository root; git-ignored)
#   BENCH_KEEP=1          keep the store and the bundles (a second run with the same BENCH_GB reuses them)
#
# Cases (each a fresh process, page cache warm):
#   python    connect and first point query, timed inside /usr/bin/python3 after the extension is loaded
#             (libmdzvfs, default settings), the measure the issue names; and the process's peak RSS after it
#   library   `docconvert query` of one row, the whole process timed (start, open, query), beside
#             `docconvert --version` (the same process doing nothing: its floor)
# Progress goes to stderr; the report (Markdown) goes to stdout.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

GB=${BENCH_GB:-16}
ROUNDS=${BENCH_ROUNDS:-9}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
PYTHON=/usr/bin/python3
for value in "$GB" "$ROUNDS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_GB and BENCH_ROUNDS must be positive integers" >&2; exit 64; }
done
for tool in "$PYTHON" swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"

bench_release_tools

# > The work folder is kept between runs when BENCH_KEEP=1: the store takes minutes to write and convert.
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WORK="$DIR/first-query-$GB"
mkdir -p "$WORK"
[[ $KEEP == 1 ]] || trap 'rm -rf "$WORK"' EXIT
STORE="$WORK/zero.sqlite"
ROWS=$((GB * 16))
if [[ ! -f "$WORK/v3.mdz" || ! -f "$WORK/v2.mdz" ]]; then
    log "writing a store of $GB GiB ($ROWS rows of one 64 MiB zero blob)"
    rm -f "$STORE"
    "$PYTHON" - "$STORE" "$ROWS" <<'EOF'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute('PRAGMA journal_mode = OFF'); con.execute('PRAGMA synchronous = OFF')
con.execute('CREATE TABLE item(id INTEGER PRIMARY KEY, body BLOB)')
for _ in range(int(sys.argv[2])):
    con.execute('INSERT INTO item(body) VALUES (zeroblob(64 * 1024 * 1024))')
con.commit()
EOF
    for version in 2 3; do
        log "converting it to format version $version"
        rm -f "$WORK/v$version.mdz"
        "$DOCCONVERT" create "$WORK/v$version.mdz" --from "$STORE" --format-version "$version" >&2
    done
    rm -f "$STORE"
fi

DRIVER="$WORK/first.py"
cat >"$DRIVER" <<'EOF'
import random, resource, sqlite3, sys, time
lib, uri, rows, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(lib)
random.seed(seed)
start = time.perf_counter()
con = sqlite3.connect(uri, uri=True)
row = con.execute('SELECT length(body) FROM item WHERE id = ?', (random.randint(1, rows),)).fetchone()
assert row is not None and row[0] == 64 * 1024 * 1024
print('%.2f %d' % ((time.perf_counter() - start) * 1000, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
EOF
wall_ms() { local start; start=$(date +%s%N); "$@" >/dev/null; awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f\n", (b - a) / 1e6 }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) { print v[(NR + 1) / 2] } else { printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 } }'; }

declare -A RUNS
cat "$WORK"/v2.mdz "$WORK"/v3.mdz >/dev/null
for round in $(seq 1 "$ROUNDS"); do
    # > Alternating, each version first in turn: the machine's load falls on both alike.
    order="2 3"; (( round % 2 == 0 )) && order="3 2"
    for version in $order; do
        read -r ms rss < <("$PYTHON" "$DRIVER" "$LIB" "file:$WORK/v$version.mdz?mode=ro&vfs=mdz" "$ROWS" "$round")
        RUNS[python,$version]+="$ms "
        RUNS[rss,$version]+="$rss "
        RUNS[library,$version]+="$(wall_ms "$DOCCONVERT" query "$WORK/v$version.mdz" "SELECT length(body) FROM item WHERE id = $((round % ROWS + 1))") "
    done
    RUNS[floor]+="$(wall_ms "$DOCCONVERT" --version) "
    log "round $round of $ROUNDS: python ms so far, version 2: ${RUNS[python,2]}; version 3: ${RUNS[python,3]}"
done
med() { tr ' ' '\n' <<<"$1" | grep -v '^$' | median; }

echo "# The first query of a fresh process at $GB GiB"
echo
echo "Command: \`BENCH_GB=$GB BENCH_ROUNDS=$ROUNDS $invocation\` (run in \`$root\` at $(git rev-parse --short HEAD))"
echo
echo "Machine: $(nproc) cores, load at the end $(cut -d' ' -f1-3 /proc/loadavg); release build; page cache warm;" \
     "bundles: version 2 $(stat -c %s "$WORK/v2.mdz") bytes, version 3 $(stat -c %s "$WORK/v3.mdz") bytes."
echo
echo "| measure, ms (median of $ROUNDS fresh processes) | version 2 | version 3 | target (version 3) |"
echo "| --- | ---: | ---: | --- |"
p2=$(med "${RUNS[python,2]}"); p3=$(med "${RUNS[python,3]}")
echo "| connect and first point query (python, libmdzvfs) | $p2 | $p3 | <= 50 ms: $(awk -v v="$p3" 'BEGIN { print (v <= 50 ? "yes" : "no") }') |"
echo "| peak RSS of the python process after its first query, KiB | $(med "${RUNS[rss,2]}") | $(med "${RUNS[rss,3]}") | <= 64 MiB |"
echo "| \`docconvert query\` of one row, whole process (\`docconvert --version\`: $(med "${RUNS[floor]}")) | $(med "${RUNS[library,2]}") | $(med "${RUNS[library,3]}") | |"
echo
echo "Runs (python, ms): version 2 ${RUNS[python,2]}; version 3 ${RUNS[python,3]}."
