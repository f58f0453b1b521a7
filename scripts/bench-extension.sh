#!/usr/bin/env bash
# Reads one large document through the mdzvfs SQLite extension from Python, beside the same reads on its extracted
# store and through the library's own read-only path (`docconvert query`), in the same run, and times the
# extension's load into Python and into the sqlite3 shell. Prints a Markdown table of medians with the targets.
#
#   scripts/bench-extension.sh
#
# Environment (all optional):
#   BENCH_MB=1024            size of the document's store in MiB
#   BENCH_RUNS=5             timed runs of each whole-process case (full scans); loads: 4 x BENCH_RUNS + 1
#   BENCH_QUERIES=300        point queries a pass (random ids over the whole store)
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored by default)
#   BENCH_KEEP=1             keep the document and the extracted store afterwards
#   BENCH_DROP_CACHES=0      do not drop the page cache for the cold-cache rows (by default it is dropped when
#                            `echo 3 > /proc/sys/vm/drop_caches` works silently; the rows are left out otherwise)
#
# Cases (Debian's /usr/bin/python3, its sqlite3 module; one connection a store, opened once: a warm process):
#   point, repeated   one point query (`SELECT body FROM item WHERE id = ?`) run BENCH_QUERIES times in a process
#                     that keeps its connection (the extension's segment inflated, checked and cached; SQLite's
#                     pages in the page cache). Target: the extension <= 2x the extracted store.
#   point, again      BENCH_QUERIES point queries on ids drawn at random over the whole store, after one pass over
#                     the same ids: with the default 8 MiB segment cache most segments were dropped since (each miss
#                     inflates and checks a whole digest segment); with `segment_cache=` the whole store, none were.
#   point, first      the first pass over fresh random ids, page cache warm: each query on the extension inflates and
#                     checks the digest segments it touches (FORMAT.md 13.1); with the default 8 MiB segment cache,
#                     and with `segment_cache=` the whole store.
#   point, cold       the first pass with the page cache dropped first (when it can be).
#   point, second     after the first pass, a second connection opened in the same process (the first still open)
#                     runs the same ids: the extension's segments are the process's (one cache per bundle file,
#                     shared by its connections), so what is still cached is not inflated again.
#   full scan         `SELECT count(*), sum(length(body)) FROM item` in a fresh process, page cache warm, the whole
#                     process timed (start, open, scan): python with the extension, python on the extracted store,
#                     and `docconvert query` (the library's read-only path, in place). Target: the extension as fast
#                     as `docconvert query`.
#   load              `load_extension` in a fresh python (timed inside), and `.load` in the sqlite3 shell (the
#                     shell's run with `.load` less the same run without). Target: python <= 5 ms.
# Progress goes to stderr; the report (Markdown) goes to stdout.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

MB=${BENCH_MB:-1024}
RUNS=${BENCH_RUNS:-5}
QUERIES=${BENCH_QUERIES:-300}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
PYTHON=/usr/bin/python3
for value in "$MB" "$RUNS" "$QUERIES"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB, BENCH_RUNS and BENCH_QUERIES must be positive integers" >&2; exit 64; }
done
for tool in "$PYTHON" sqlite3 swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 69; }
done
"$PYTHON" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)' 2>/dev/null \
    || { echo "$PYTHON's sqlite3 module cannot load extensions" >&2; exit 69; }

source "$root/scripts/bench-common.sh"

echo "# mdzvfs extension benchmark"
echo
echo "Command: \`BENCH_MB=$MB BENCH_RUNS=$RUNS BENCH_QUERIES=$QUERIES $invocation\` (run in \`$root\`)"
echo

bench_release_tools

bench_work_folder extension-run
bench_page_cache

# --- the document: a store of BENCH_MB MiB (rows of ~1 KiB of words, compressible as text is), converted ----------
STORE="$WORK/source.sqlite"
DOC="$WORK/document.mdz"
EXTRACTED="$WORK/extracted.sqlite"
log "making a ${MB} MiB store"
bench_item_store "$STORE" "$MB"
log "converting it: docconvert create, then extract"
"$DOCCONVERT" create "$DOC" --from "$STORE" >&2
"$DOCCONVERT" extract "$DOC" --output "$EXTRACTED" >&2
rm -f "$STORE"
ROWS=$(sqlite3 -readonly "$EXTRACTED" 'SELECT max(id) FROM item')
DOC_BYTES=$(stat -c %s "$DOC")
STORE_BYTES=$(stat -c %s "$EXTRACTED")
WHOLE_MIB=$(( STORE_BYTES / 1048576 + 16 ))
SEGMENT=$("$PYTHON" -c 'import json, sys, zipfile; print(json.loads(zipfile.ZipFile(sys.argv[1]).read("DocumentMetadata.json"))["store"]["segments"]["interval"])' "$DOC")
log "document: $DOC_BYTES bytes; store: $STORE_BYTES bytes, $ROWS rows"

# --- the python driver: one measurement a process, one line of results --------------------------------------------
DRIVER="$WORK/driver.py"
cat >"$DRIVER" <<'EOF'
import os, random, sqlite3, statistics, sys, time
mode, lib, uri, rows, queries, seed = sys.argv[1:7]
rows, queries, seed = int(rows), int(queries), int(seed)
if mode == 'load':
    start = time.perf_counter()
    con = sqlite3.connect(':memory:'); con.enable_load_extension(True); con.load_extension(lib)
    print('%.3f' % ((time.perf_counter() - start) * 1000))
    sys.exit()
loader = sqlite3.connect(':memory:'); loader.enable_load_extension(True); loader.load_extension(lib)
con = sqlite3.connect(uri, uri=True)
if mode == 'scan':
    start = time.perf_counter()
    con.execute('SELECT count(*), sum(length(body)) FROM item').fetchone()
    print('%.1f' % ((time.perf_counter() - start) * 1000))
    sys.exit()
random.seed(seed)
ids = [random.randint(1, rows) for _ in range(queries)]
def one_pass():
    times = []
    for i in ids:
        start = time.perf_counter()
        row = con.execute('SELECT body FROM item WHERE id = ?', (i,)).fetchone()
        times.append((time.perf_counter() - start) * 1e6)
        assert row is not None
    return statistics.median(times)
first = one_pass()
if mode == 'shared':
    # A second connection, opened while the first is still open, runs the same ids: the extension's segments
    # are the process's, so what the first connection inflated (and its cache still holds) is not inflated again.
    con = sqlite3.connect(uri, uri=True)
    print('%.1f %.1f' % (first, one_pass()))
    sys.exit()
hot = statistics.median(one_pass() for _ in range(3))
ids = ids[:1] * queries
repeated = one_pass()
print('%.1f %.1f %.1f' % (first, hot, repeated))
EOF

uri_of() { printf 'file:%s?mode=ro%s' "$1" "${2:-}"; }
EXT_URI=$(uri_of "$DOC" "&vfs=mdz")
WHOLE_URI=$(uri_of "$DOC" "&vfs=mdz&segment_cache=$WHOLE_MIB")
PLAIN_URI=$(uri_of "$EXTRACTED")

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a" } else if (NR % 2) { print v[(NR + 1) / 2] } else { printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 } }'; }
warm() { cat "$DOC" "$EXTRACTED" >/dev/null; }

# Point queries: first pass and hot passes, page cache warm; then the first pass with the page cache dropped.
declare -A FIRST HOT COLD REPEATED
for name in plain ext whole; do
    case $name in plain) uri=$PLAIN_URI ;; ext) uri=$EXT_URI ;; whole) uri=$WHOLE_URI ;; esac
    firsts=() hots=() colds=() repeats=()
    for round in $(seq 1 3); do
        warm
        read -r first hot repeated < <("$PYTHON" "$DRIVER" point "$LIB" "$uri" "$ROWS" "$QUERIES" "$round")
        firsts+=("$first"); hots+=("$hot"); repeats+=("$repeated")
        if [[ $DROP == 1 ]]; then
            drop_caches
            read -r cold _ < <("$PYTHON" "$DRIVER" point "$LIB" "$uri" "$ROWS" "$QUERIES" "$((round + 100))")
            colds+=("$cold")
        fi
    done
    FIRST[$name]=$(printf '%s\n' "${firsts[@]}" | median)
    HOT[$name]=$(printf '%s\n' "${hots[@]}" | median)
    REPEATED[$name]=$(printf '%s\n' "${repeats[@]}" | median)
    COLD[$name]=$(printf '%s\n' "${colds[@]}" | median)
    log "point queries, $name: repeated ${REPEATED[$name]} us, first ${FIRST[$name]} us, again ${HOT[$name]} us, cold ${COLD[$name]} us"
done

# A second connection in the same process, the first still open, on the same ids.
declare -A SECOND
for name in plain ext whole; do
    case $name in plain) uri=$PLAIN_URI ;; ext) uri=$EXT_URI ;; whole) uri=$WHOLE_URI ;; esac
    seconds=()
    for round in $(seq 1 3); do
        warm
        read -r _ second < <("$PYTHON" "$DRIVER" shared "$LIB" "$uri" "$ROWS" "$QUERIES" "$round")
        seconds+=("$second")
    done
    SECOND[$name]=$(printf '%s\n' "${seconds[@]}" | median)
    log "point queries on a second connection, $name: ${SECOND[$name]} us"
done

# Full scans, page cache warm, each in a fresh process, interleaved round by round.
declare -A SCAN
scans_plain=() scans_ext=() scans_ours=()
warm
for round in $(seq 1 "$RUNS"); do
    start=$(date +%s%N)
    "$PYTHON" "$DRIVER" scan "$LIB" "$PLAIN_URI" 0 0 0 >/dev/null
    scans_plain+=("$(( ($(date +%s%N) - start) / 1000000 ))")
    start=$(date +%s%N)
    "$PYTHON" "$DRIVER" scan "$LIB" "$EXT_URI" 0 0 0 >/dev/null
    scans_ext+=("$(( ($(date +%s%N) - start) / 1000000 ))")
    start=$(date +%s%N)
    "$DOCCONVERT" query "$DOC" 'SELECT count(*), sum(length(body)) FROM item' >/dev/null
    scans_ours+=("$(( ($(date +%s%N) - start) / 1000000 ))")
done
SCAN[plain]=$(printf '%s\n' "${scans_plain[@]}" | median)
SCAN[ext]=$(printf '%s\n' "${scans_ext[@]}" | median)
SCAN[ours]=$(printf '%s\n' "${scans_ours[@]}" | median)
log "full scans (ms): extension ${SCAN[ext]}, extracted ${SCAN[plain]}, docconvert query ${SCAN[ours]}"

# Loads: python (inside the process) and the sqlite3 shell (its whole run, with and without .load).
loads=() shell_with=() shell_without=()
for round in $(seq 1 $((4 * RUNS + 1))); do
    loads+=("$("$PYTHON" "$DRIVER" load "$LIB" - 0 0 0)")
    for with in 1 0; do
        start=$(date +%s%N)
        if [[ $with == 1 ]]; then sqlite3 :memory: -cmd ".load $LIB" 'SELECT 1' >/dev/null
        else sqlite3 :memory: 'SELECT 1' >/dev/null; fi
        elapsed=$(( ($(date +%s%N) - start) / 1000 ))
        if [[ $with == 1 ]]; then shell_with+=("$elapsed"); else shell_without+=("$elapsed"); fi
    done
done
LOAD_PY=$(printf '%s\n' "${loads[@]}" | median)
SHELL_WITH=$(printf '%s\n' "${shell_with[@]}" | median)
SHELL_WITHOUT=$(printf '%s\n' "${shell_without[@]}" | median)
LOAD_SHELL=$(awk -v a="$SHELL_WITH" -v b="$SHELL_WITHOUT" 'BEGIN { printf "%.2f", (a - b) / 1000 }')

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "n/a" || b == "n/a") print "n/a"; else printf "%.2f", a / b }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "n/a") print "n/a"; else print (r + 0 <= t + 0 ? "yes" : "no") }'; }

echo "Machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg); SQLite $(sqlite3 --version | cut -d' ' -f1) (Debian's, as python's sqlite3 module links it); $($PYTHON --version); libmdzvfs.so $(stat -c %s "$LIB") bytes (release)"
echo
echo "Document: $MB MiB store ($STORE_BYTES bytes, $ROWS rows of about 1 KiB of words), bundle $DOC_BYTES bytes (deflated; digest segments of $SEGMENT bytes, each inflated and checked whole when a page in it is read). Point queries: $QUERIES random ids a pass, median per query; the extension's default segment cache is 8 MiB; 'whole' opens with \`segment_cache=$WHOLE_MIB\` (MiB). Medians of 3 rounds for point queries, $RUNS for scans, $((4 * RUNS + 1)) for loads."
echo
echo "| case | extracted store (python) | extension, default cache | extension / extracted | extension, whole store cached | whole / extracted | target |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
r_repeated=$(ratio "${REPEATED[ext]}" "${REPEATED[plain]}")
r_hot=$(ratio "${HOT[ext]}" "${HOT[plain]}")
echo "| point query repeated (one id, warm process, warm page cache), us | ${REPEATED[plain]} | ${REPEATED[ext]} | $r_repeated | ${REPEATED[whole]} | $(ratio "${REPEATED[whole]}" "${REPEATED[plain]}") | <= 2x: $(verdict "$r_repeated" 2) |"
echo "| point queries again ($QUERIES random ids read once before, warm process), us | ${HOT[plain]} | ${HOT[ext]} | $r_hot | ${HOT[whole]} | $(ratio "${HOT[whole]}" "${HOT[plain]}") | <= 2x: $(verdict "$r_hot" 2) |"
echo "| point query, first pass (page cache warm), us | ${FIRST[plain]} | ${FIRST[ext]} | $(ratio "${FIRST[ext]}" "${FIRST[plain]}") | ${FIRST[whole]} | $(ratio "${FIRST[whole]}" "${FIRST[plain]}") | |"
echo "| point query on a second connection (fresh, the first still open; the ids the first read), us | ${SECOND[plain]} | ${SECOND[ext]} | $(ratio "${SECOND[ext]}" "${SECOND[plain]}") | ${SECOND[whole]} | $(ratio "${SECOND[whole]}" "${SECOND[plain]}") | |"
if [[ $DROP == 1 ]]; then
    echo "| point query, first pass, page cache dropped, us | ${COLD[plain]} | ${COLD[ext]} | $(ratio "${COLD[ext]}" "${COLD[plain]}") | ${COLD[whole]} | $(ratio "${COLD[whole]}" "${COLD[plain]}") | |"
fi
echo
r_scan=$(ratio "${SCAN[ext]}" "${SCAN[ours]}")
echo "| full scan (a whole fresh process, page cache warm), ms | python, extracted store | python + extension | \`docconvert query\` (library, in place) | extension / library | target |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
echo "| \`SELECT count(*), sum(length(body)) FROM item\` | ${SCAN[plain]} | ${SCAN[ext]} | ${SCAN[ours]} | $r_scan | as fast as the library (<= 1.1x): $(verdict "$r_scan" 1.1) |"
echo
echo "| load | median, ms | target |"
echo "| --- | ---: | --- |"
echo "| python: \`load_extension\` in a fresh process | $LOAD_PY | <= 5 ms: $(verdict "$(ratio "$LOAD_PY" 5)" 1) |"
echo "| sqlite3 shell: \`.load\` (run with it less run without) | $LOAD_SHELL | |"
