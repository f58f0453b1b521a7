#!/usr/bin/env bash
# How `docconvert` starts, beside `sqlite3` in the same run: the CPU time and peak memory of `docconvert --version`,
# the wall time of a point query on a 256 MiB document in a fresh process (against `sqlite3` running the same query
# on the store extracted from it), and the size of the binary. Prints a Markdown table of medians, with the targets
# of issue #45 and whether each is met.
#
#   scripts/bench-startup.sh
#
# Environment (all optional):
#   BENCH_MB=256             size of the document's store in MiB
#   BENCH_RUNS=200           runs of each `--version` case; the table shows medians
#   BENCH_QUERY_RUNS=100     runs of each query case
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored by default)
#   BENCH_KEEP=1             keep the store, the document and the work folder afterwards
#   BENCH_DOCCONVERT=PATH    measure this docconvert binary instead of building one (e.g. one built from an older
#                            commit, to compare with the same script); it also makes the document
#
# The binary is built the way it ships (README, "The command line": the Swift runtime linked in, symbols and debug
# information stripped), in its own scratch folder (.build-startup), so a benchmark never races a build or a test run
# in the default .build:
#   swift build -c release --product docconvert --static-swift-stdlib -Xlinker -s --scratch-path .build-startup
#
# Cases, each a fresh process, interleaved run by run so that drift on a shared machine spreads over both sides:
#   version   docconvert --version                 peer: sqlite3 --version
#   query     docconvert query DOC "SELECT … WHERE id = ?"   peer: sqlite3 STORE "SELECT … WHERE id = ?"
#             (the same statement and key for both in a run; keys spread over the table; the page cache is warm
#             for both: "cold" is the process, not the disk; the output of both is compared once)
#
# Measuring: a python3 helper spawns each command (posix_spawn, standard output to /dev/null) and reads its resource
# usage with os.wait4: CPU = user + system time of the child, wall = time.perf_counter around spawn and wait. Peak
# RSS (ru_maxrss) counts the memory of the process the command was forked from, so it is read from a second run of
# the same command forked by /bin/sh (which exits at once; the helper, a child subreaper, then waits for the
# command): about 1 MiB of the shell's counts in it, as /usr/bin/time's own memory counts in its %M.
# Progress goes to stderr; the report (Markdown) goes to stdout.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

MB=${BENCH_MB:-256}
RUNS=${BENCH_RUNS:-200}
QUERY_RUNS=${BENCH_QUERY_RUNS:-100}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
for value in "$MB" "$RUNS" "$QUERY_RUNS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB, BENCH_RUNS and BENCH_QUERY_RUNS must be positive integers" >&2; exit 64; }
done
for tool in python3 sqlite3 swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool (scripts/setup.sh installs it)" >&2; exit 69; }
done
SQLITE3=$(command -v sqlite3)

source "$root/scripts/bench-common.sh"

echo "# Start-up benchmark"
echo
echo "Command: \`BENCH_MB=$MB BENCH_RUNS=$RUNS BENCH_QUERY_RUNS=$QUERY_RUNS BENCH_DIR=${BENCH_DIR:-./bench-work} BENCH_KEEP=$KEEP${BENCH_DOCCONVERT:+ BENCH_DOCCONVERT=$BENCH_DOCCONVERT} $invocation\` (run in \`$root\`)"
echo

# --- build -------------------------------------------------------------------------------------------------------
if [[ -n ${BENCH_DOCCONVERT:-} ]]; then
    DOCCONVERT=$BENCH_DOCCONVERT
    built="given binary $DOCCONVERT"
else
    SCRATCH="$root/.build-startup"
    revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    [[ -n $(git status --porcelain -- Sources Package.swift 2>/dev/null) ]] && revision+=" with uncommitted changes in Sources/"
    log "building docconvert (release, static Swift standard library, stripped, in $SCRATCH)"
    swift build -c release --product docconvert --static-swift-stdlib -Xlinker -s --scratch-path "$SCRATCH" >&2
    DOCCONVERT="$(swift build -c release --static-swift-stdlib -Xlinker -s --scratch-path "$SCRATCH" --show-bin-path)/docconvert"
    built="built at $revision"
fi
[[ -x $DOCCONVERT ]] || { echo "no binary at $DOCCONVERT" >&2; exit 70; }

# --- work folder and data ----------------------------------------------------------------------------------------
bench_work_folder startup
STORE="$WORK/store.sqlite"
DOC="$WORK/doc.mdz"
EXTRACTED="$WORK/extracted.sqlite"
log "generating a ${MB} MiB store at $STORE"
ROWS=$(python3 - "$STORE" "$MB" <<'PY'
# python3 - STORE MIB: a table with an INTEGER PRIMARY KEY (the rowid) filled to about MIB MiB; prints the row count.
import random, sqlite3, sys
path, mib = sys.argv[1], int(sys.argv[2])
random.seed(45)
db = sqlite3.connect(path)
db.execute("PRAGMA journal_mode = OFF")
db.execute("PRAGMA synchronous = OFF")
db.execute("CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body BLOB NOT NULL)")
rows, size, batch = 0, 0, []
while size < mib * 0.95 * 2**20:  # about 5% of the pages are b-tree overhead and free space
    rows += 1
    body = random.randbytes(200) + bytes(random.randrange(400))  # half random, half zeros: deflates to about half
    batch.append((rows, f"item {rows}", body))
    size += len(body) + 24
    if len(batch) == 10000:
        db.executemany("INSERT INTO item VALUES (?, ?, ?)", batch)
        batch = []
db.executemany("INSERT INTO item VALUES (?, ?, ?)", batch)
db.commit()
db.close()
print(rows)
PY
)
"$DOCCONVERT" create "$DOC" --from "$STORE" >&2
"$DOCCONVERT" extract "$DOC" --output "$EXTRACTED" >&2
STORE_BYTES=$(stat -c %s "$EXTRACTED")
DOC_BYTES=$(stat -c %s "$DOC")
BINARY_BYTES=$(stat -c %s "$DOCCONVERT")
log "store: $ROWS rows, $STORE_BYTES bytes; document: $DOC_BYTES bytes; binary: $BINARY_BYTES bytes"

# Both sides must print the same row (docconvert: a header line, then tab-separated values; sqlite3: `|`-separated).
SQL_TEMPLATE='SELECT id, name, length(body) FROM item WHERE id = %d'
check_sql=$(printf "$SQL_TEMPLATE" $(( ROWS / 2 )))
ours=$("$DOCCONVERT" query "$DOC" "$check_sql" | tail -n +2 | tr '\t' '|')
theirs=$("$SQLITE3" "$EXTRACTED" "$check_sql")
[[ -n $ours && $ours == "$theirs" ]] || { echo "the query printed '$ours', sqlite3 '$theirs'" >&2; exit 1; }

# --- runs --------------------------------------------------------------------------------------------------------
cat >"$WORK/measure.py" <<'PY'
# python3 measure.py RUNS QUERY-RUNS ROWS DOCCONVERT SQLITE3 DOC STORE SQL-TEMPLATE: prints one line per run,
# "case<TAB>cpu seconds<TAB>wall seconds<TAB>peak RSS KiB".
import ctypes, os, sys, time

runs, query_runs, rows = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
docconvert, sqlite3, document, store, template = sys.argv[4:9]
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
to_null = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]

def timed(argv):
    """CPU (user + system) and wall seconds of one run, spawned from this process."""
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=to_null)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        sys.exit(f"{argv} exited with status {status}")
    return usage.ru_utime + usage.ru_stime, wall

def peak_rss(argv):
    """Peak RSS in KiB of one run forked by /bin/sh, which exits at once: the run is then our child to wait for."""
    shell = os.posix_spawn("/bin/sh", ["sh", "-c", '"$@" & exit 0', "sh"] + argv, os.environ, file_actions=to_null)
    os.waitpid(shell, 0)
    _, status, usage = os.wait4(-1, 0)
    if status != 0:
        sys.exit(f"{argv} exited with status {status} (run by sh)")
    return usage.ru_maxrss

def run(case, argv):
    cpu, wall = timed(argv)
    print(f"{case}\t{cpu:.6f}\t{wall:.6f}\t{peak_rss(argv)}", flush=True)

for _ in range(runs):
    run("version", [docconvert, "--version"])
    run("sqlite3-version", [sqlite3, "--version"])
for index in range(query_runs):
    sql = template % (1 + (index * 7919) % rows)  # keys spread over the whole table
    run("query", [docconvert, "query", document, sql])
    run("sqlite3-query", [sqlite3, store, sql])
PY
log "running: $RUNS x --version, $QUERY_RUNS x query, for each side"
python3 "$WORK/measure.py" "$RUNS" "$QUERY_RUNS" "$ROWS" "$DOCCONVERT" "$SQLITE3" "$DOC" "$EXTRACTED" "$SQL_TEMPLATE" \
    >"$WORK/runs.tsv"

# --- report ------------------------------------------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "- Date: $(date -u +%Y-%m-%dT%H:%M:%SZ); host: $(nproc) cores, $cpu; $(uname -sr); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- docconvert: $built; $(ldd "$DOCCONVERT" 2>/dev/null | grep -c '=>') shared libraries loaded (ldd); $(swift --version 2>&1 | head -n 1); peer: $SQLITE3 $("$SQLITE3" --version | cut -d' ' -f1)"
echo "- Document: a table \`item(id INTEGER PRIMARY KEY, name TEXT, body BLOB)\` of $ROWS rows, store $STORE_BYTES bytes ($(( STORE_BYTES >> 20 )) MiB), bundle $DOC_BYTES bytes (\`docconvert create --from\`, default deflate); sqlite3 reads the store \`docconvert extract\` wrote from it."
echo "- Query: \`$SQL_TEMPLATE\`, one key per run (the same for both sides), $QUERY_RUNS runs each; \`--version\`: $RUNS runs each. Medians; the page cache is warm for both sides."
echo
python3 - "$WORK/runs.tsv" "$BINARY_BYTES" <<'PY'
import statistics, sys
path, binary = sys.argv[1], int(sys.argv[2])
runs = {}
for line in open(path):
    case, cpu, wall, rss = line.split("\t")
    runs.setdefault(case, []).append((float(cpu) * 1e3, float(wall) * 1e3, int(rss) / 1024))
med = {case: [statistics.median(run[i] for run in values) for i in range(3)] for case, values in runs.items()}
v, sv, q, sq = med["version"], med["sqlite3-version"], med["query"], med["sqlite3-query"]
rows = [
    ("`docconvert --version`: CPU ms (user + sys)", f"{v[0]:.2f}", f"{sv[0]:.2f}", f"{v[0] / sv[0]:.1f}×", "≤ 2 ms", v[0] <= 2),
    ("`docconvert --version`: peak RSS MiB", f"{v[2]:.1f}", f"{sv[2]:.1f}", f"{v[2] / sv[2]:.1f}×", "≤ 12 MiB", v[2] <= 12),
    ("`docconvert --version`: wall ms", f"{v[1]:.2f}", f"{sv[1]:.2f}", f"{v[1] / sv[1]:.1f}×", "", None),
    ("point query, fresh process: wall ms", f"{q[1]:.2f}", f"{sq[1]:.2f}", f"{q[1] / sq[1]:.1f}×", "≤ 3× sqlite3", q[1] <= 3 * sq[1]),
    ("point query: CPU ms (user + sys)", f"{q[0]:.2f}", f"{sq[0]:.2f}", f"{q[0] / sq[0]:.1f}×", "", None),
    ("point query: peak RSS MiB", f"{q[2]:.1f}", f"{sq[2]:.1f}", f"{q[2] / sq[2]:.1f}×", "", None),
    ("binary size MB (10^6 bytes)", f"{binary / 1e6:.1f}", "", "", "≤ 40 MB", binary <= 40e6),
]
print("| measure | docconvert | sqlite3 | ratio | target | met |")
print("|---|---:|---:|---:|---|---|")
for name, ours, theirs, ratio, target, met in rows:
    print(f"| {name} | {ours} | {theirs} | {ratio} | {target} | {'' if met is None else ('yes' if met else '**no**')} |")
print()
print("Ratio = docconvert ÷ sqlite3. Peak RSS includes about 1 MiB of the /bin/sh the command is forked from. "
      "Quartiles (25th-75th percentile), to show the spread:")
print()
for case, values in runs.items():
    parts = []
    for i, name, unit in ((0, "CPU", "ms"), (1, "wall", "ms"), (2, "RSS", "MiB")):
        q1, _, q3 = statistics.quantiles([run[i] for run in values], n=4)
        parts.append(f"{name} {q1:.2f}-{q3:.2f} {unit}")
    print(f"- {case}: " + ", ".join(parts))
PY
