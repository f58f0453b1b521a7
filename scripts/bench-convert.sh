#!/usr/bin/env bash
# Converts one large legacy store (a Core Data-like SQLite store whose last transactions live only in its -wal) with
# `docconvert convert` and with the by-hand pipelines a user would otherwise write, on the same store in the same run,
# and prints a Markdown table of medians.
#
#   scripts/bench-convert.sh
#
# Environment (all optional):
#   BENCH_MB=512             size of the store's main file in MiB
#   BENCH_WAL_MB=64          size of its uncheckpointed -wal in MiB
#   BENCH_RUNS=3             timed runs per case; the table shows medians
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored by default)
#   BENCH_KEEP=1             keep the generated store and the work folder afterwards
#   BENCH_DROP_CACHES=0      do not drop the page cache before each run (by default it is dropped when
#                            `echo 3 > /proc/sys/vm/drop_caches` works silently, and left warm otherwise)
#   BENCH_STATIC_STDLIB=0    build docconvert with the Swift runtime and Foundation as shared libraries (by default
#                            it is built with --static-swift-stdlib, the way it ships: self-contained, about 5 MiB
#                            less resident memory)
#
# Cases (every run of every case starts from a fresh copy of the store, its -wal and its -shm, made before the
# timing starts: the by-hand pipelines open the source with SQLite, which checkpoints the -wal into it on close):
#   ours         docconvert convert SRC --output B --legacy keep                  (the default: deflate level 2, ISA-L)
#   ours-d6      the same with --level 6 (zlib's level 6, the level of zip -6)
#   ours-store   the same with --compression store
#   shell-6      sqlite3 SRC ".backup TMP" && zip -q -6 -j B TMP && rm TMP        peer A, deflate
#   shell-0      the same with zip -0                                             peer A, store
#   python-6     python3: sqlite3 backup, zipfile ZIP_DEFLATED 6, fsync, os.replace, fsync of the folder   peer B
#   python-0     the same with ZIP_STORED
#   backup       sqlite3 SRC ".backup OUT" alone: consolidation only, the floor
# After the first round every output is checked: ours with `docconvert verify`, and every output's store must hold
# what SQLite reads from the source with its -wal (row count, largest key, a sum over a column the -wal's
# transactions update, Core Data's key counter); the run stops there if one does not.
#
# Timing: `/usr/bin/time -f '%e %M %U %S'` (wall seconds, peak RSS in KiB, user and system CPU seconds) around each
# command. Runs are interleaved round by round (every case once, then again) so that drift on a shared machine
# spreads over all cases. Progress goes to stderr; the report (Markdown) goes to stdout.
#
# docconvert is built in its own scratch folder (.build-convbench), so a benchmark never races a build or a test run
# in the default .build; the store generator is the Benchmarks package's convert-benchmark.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

MB=${BENCH_MB:-512}
WAL_MB=${BENCH_WAL_MB:-64}
RUNS=${BENCH_RUNS:-3}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
for value in "$MB" "$WAL_MB" "$RUNS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB, BENCH_WAL_MB and BENCH_RUNS must be positive integers" >&2; exit 64; }
done
for tool in python3 zip unzip sqlite3 /usr/bin/time swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool (scripts/setup.sh installs it)" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"

echo "# Conversion benchmark"
echo
echo "Command: \`BENCH_MB=$MB BENCH_WAL_MB=$WAL_MB BENCH_RUNS=$RUNS BENCH_DIR=${BENCH_DIR:-./bench-work} BENCH_KEEP=$KEEP BENCH_DROP_CACHES=${BENCH_DROP_CACHES:-1} BENCH_STATIC_STDLIB=${BENCH_STATIC_STDLIB:-1} $invocation\` (run in \`$root\`)"
echo

# --- build ------------------------------------------------------------------------------------------------------
STATIC=${BENCH_STATIC_STDLIB:-1}
SCRATCH="$root/.build-convbench"
static_flags=()
if [[ $STATIC == 1 ]]; then SCRATCH="$root/.build-convbench-static"; static_flags=(--static-swift-stdlib); fi
# The revision built, taken before the build (the report comes out minutes later).
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain -- Sources Package.swift 2>/dev/null) ]] && revision+=" with uncommitted changes in Sources/"
log "building docconvert (release${static_flags[*]:+, static Swift standard library}, in $SCRATCH)"
swift build -c release --product docconvert "${static_flags[@]}" --scratch-path "$SCRATCH" >&2
DOCCONVERT="$(swift build -c release "${static_flags[@]}" --scratch-path "$SCRATCH" --show-bin-path)/docconvert"
log "building convert-benchmark (release)"
swift build -c release --package-path Benchmarks --product convert-benchmark >&2
GENERATOR="$(swift build -c release --package-path Benchmarks --show-bin-path)/convert-benchmark"
for binary in "$DOCCONVERT" "$GENERATOR"; do
    [[ -x $binary ]] || { echo "no binary at $binary" >&2; exit 70; }
done

# --- work folder, cleanup and page cache (scripts/bench-common.sh) ----------------------------------------------
bench_work_folder convert
mkdir -p "$WORK/source"
bench_page_cache

# --- the store ---------------------------------------------------------------------------------------------------
NAME=Journal.sqlite
SRC="$WORK/source/$NAME"
log "generating a ${MB} MiB Core Data-like store with a ${WAL_MB} MiB -wal at $SRC"
gen_start=$(date +%s)
GENERATED=$("$GENERATOR" generate "$SRC" "$MB" "$WAL_MB")
gen_seconds=$(( $(date +%s) - gen_start ))
log "$GENERATED (${gen_seconds}s)"
STORE_BYTES=$(stat -c %s "$SRC")
WAL_BYTES=$(stat -c %s "$SRC-wal")
SRC_BYTES=$(( STORE_BYTES + WAL_BYTES ))

# What every output's store must hold: what SQLite reads from the source with its -wal (on a copy, since reading may
# checkpoint). The same query on the main file alone must differ, or the -wal would hold nothing worth checking.
CHECK_SQL="SELECT count(*), max(Z_PK), total(Z_OPT), (SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 1) FROM ZENTRY"
mkdir -p "$WORK/oracle"
cp "$SRC" "$SRC-wal" "$WORK/oracle/"
EXPECTED=$(sqlite3 "$WORK/oracle/$NAME" "$CHECK_SQL")
rm -f "$WORK/oracle/$NAME-wal" "$WORK/oracle/$NAME-shm"
cp "$SRC" "$WORK/oracle/main-only.sqlite"
MAIN_ONLY=$(sqlite3 "$WORK/oracle/main-only.sqlite" "$CHECK_SQL")
rm -rf "$WORK/oracle"
log "SQLite reads (rows|max Z_PK|sum Z_OPT|Z_MAX): $EXPECTED with the -wal, $MAIN_ONLY from the main file alone"
[[ $EXPECTED != "$MAIN_ONLY" ]] || { echo "the generated -wal holds no transactions" >&2; exit 70; }

# --- peer B: what a careful developer would write in python3 -------------------------------------------------------
cat >"$WORK/by-hand.py" <<'PY'
# python3 by-hand.py SOURCE BUNDLE LEVEL   (LEVEL 0 = ZIP_STORED, 1...9 = ZIP_DEFLATED at that level)
# Consolidates through SQLite's backup API (the -wal's transactions included), zips the copy aside, flushes it,
# renames it into place and flushes the folder.
import os, sqlite3, sys, zipfile
source_path, bundle, level = sys.argv[1], sys.argv[2], int(sys.argv[3])
folder = os.path.dirname(os.path.abspath(bundle))
store = bundle + ".store-tmp"
source = sqlite3.connect(source_path)
target = sqlite3.connect(store)
source.backup(target)
target.close()
source.close()
temporary = bundle + ".tmp"
compression = zipfile.ZIP_DEFLATED if level else zipfile.ZIP_STORED
with zipfile.ZipFile(temporary, "w", compression=compression, compresslevel=level or None) as archive:
    archive.write(store, "StoreContent/persistentStore")
with open(temporary, "rb") as handle:
    os.fsync(handle.fileno())
os.replace(temporary, bundle)
descriptor = os.open(folder, os.O_RDONLY)
os.fsync(descriptor)
os.close(descriptor)
os.remove(store)
PY

# --- cases -------------------------------------------------------------------------------------------------------
# Each case: its row (add_case ID LABEL COMPRESSION PEER OUTPUT-FILE) and its command, the function case_ID
# (scripts/bench-common.sh), run in the run folder's context: $SRC_RUN is the fresh copy of the store, $RUN the run
# folder, $OUT the output file.
cases=()
declare -A LABEL COMPRESSION PEER OUTPUT
add_case() { cases+=("$1"); LABEL[$1]=$2; COMPRESSION[$1]=$3; PEER[$1]=$4; OUTPUT[$1]=$5; }
# Peer A, zip at level $1: consolidate with sqlite3's .backup into the run folder, zip the copy, remove it.
shell_zip() {
    timed bash -c 'sqlite3 "$1" ".backup \"$2/backup.sqlite\"" && zip -q -"$4" -j "$3" "$2/backup.sqlite" && rm "$2/backup.sqlite"' \
        _ "$SRC_RUN" "$RUN" "$OUT" "$1"
}
add_case ours "docconvert convert" "deflate 2 (ISA-L)" shell-6 out.mdz
case_ours() { timed "$DOCCONVERT" convert "$SRC_RUN" --output "$OUT" --legacy keep; }
add_case ours-d6 "docconvert convert --level 6" "deflate 6 (zlib)" shell-6 out.mdz
case_ours-d6() { timed "$DOCCONVERT" convert "$SRC_RUN" --output "$OUT" --legacy keep --level 6; }
add_case ours-store "docconvert convert --compression store" store shell-0 out.mdz
case_ours-store() { timed "$DOCCONVERT" convert "$SRC_RUN" --output "$OUT" --legacy keep --compression store; }
add_case shell-6 "peer A: sqlite3 .backup + zip -6" "deflate 6" "" out.zip
case_shell-6() { shell_zip 6; }
add_case shell-0 "peer A: sqlite3 .backup + zip -0" store "" out.zip
case_shell-0() { shell_zip 0; }
add_case python-6 "peer B: python3 backup + zipfile + fsync + rename" "deflate 6" shell-6 out.zip
case_python-6() { timed python3 "$WORK/by-hand.py" "$SRC_RUN" "$OUT" 6; }
add_case python-0 "peer B: python3 backup + zipfile + fsync + rename" store shell-0 out.zip
case_python-0() { timed python3 "$WORK/by-hand.py" "$SRC_RUN" "$OUT" 0; }
add_case backup "floor: sqlite3 .backup alone" none shell-0 out.sqlite
case_backup() { timed sqlite3 "$SRC_RUN" ".backup \"$OUT\""; }
TIME_FORMAT='%e %M %U %S'

RESULTS="$WORK/results.tsv"
: >"$RESULTS"
declare -A TIMES RSS CPU SIZE UNCHANGED

# fresh_copy RUN: the run folder with a pristine copy of the source (store, -wal, -shm), flushed; not timed.
fresh_copy() {
    rm -rf "$1"
    mkdir -p "$1"
    cp "$SRC" "$SRC-wal" "$SRC-shm" "$1/"
    sync
}

# check_output ID RUN OUT: the output holds every row SQLite reads from the source (first round only; not timed).
check_output() {
    local id=$1 run=$2 out=$3 got store="$2/check.sqlite"
    case $id in
        ours|ours-*)
            "$DOCCONVERT" verify "$out" >"$WORK/verify.log" 2>&1 || { cat "$WORK/verify.log" >&2; echo "$id: docconvert verify failed" >&2; exit 1; }
            "$DOCCONVERT" extract "$out" --output "$store" >/dev/null ;;
        shell-*|python-*)
            [[ $(unzip -Z1 "$out" | wc -l) == 1 ]] || { echo "$id: expected one entry in $out" >&2; exit 1; }
            unzip -p "$out" >"$store" ;;
        backup) cp "$out" "$store" ;;
    esac
    got=$(sqlite3 "$store" "$CHECK_SQL")
    [[ $got == "$EXPECTED" ]] || { echo "$id lost data: its store reads $got, the source $EXPECTED" >&2; exit 1; }
    rm -f "$store"
}

# run ID ROUND: one timed run on a fresh copy.
run() {
    local id=$1 round=$2
    RUN="$WORK/run"
    SRC_RUN="$RUN/$NAME"
    OUT="$RUN/${OUTPUT[$id]}"
    fresh_copy "$RUN"
    run_case "$id" "$round" "$id"
    local seconds=${TIMED[0]} kib=${TIMED[1]} user=${TIMED[2]} system=${TIMED[3]}
    TIMES[$id]+="${TIMES[$id]:+,}$seconds"
    RSS[$id]+="${RSS[$id]:+,}$kib"
    CPU[$id]+="${CPU[$id]:+,}$(awk -v u="$user" -v s="$system" 'BEGIN { printf "%.2f", u + s }')"
    SIZE[$id]=$(stat -c %s "$OUT")
    log "round $round/$RUNS  $(printf '%-10s' "$id") ${seconds}s  ${kib} KiB  cpu ${user}+${system}s"
    if [[ $round == 1 ]]; then
        # Whether the case left the source as it found it (the store and its -wal; a -shm changes with any reader).
        if cmp -s "$SRC" "$SRC_RUN" && [[ -f $SRC_RUN-wal ]] && cmp -s "$SRC-wal" "$SRC_RUN-wal"; then
            UNCHANGED[$id]=yes
        else
            UNCHANGED[$id]=no
        fi
        check_output "$id" "$RUN" "$OUT"
    fi
    rm -rf "$RUN"
}

log "source: $STORE_BYTES + $WAL_BYTES bytes (store + -wal); ${#cases[@]} cases x $RUNS runs (page cache dropped before each run: $([[ $DROP == 1 ]] && echo yes || echo no))"
for ((round = 1; round <= RUNS; round++)); do
    for id in "${cases[@]}"; do run "$id" "$round"; done
done
for id in "${cases[@]}"; do
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "${LABEL[$id]}" "${COMPRESSION[$id]}" "${PEER[$id]}" "${TIMES[$id]}" "${RSS[$id]}" \
        "${CPU[$id]}" "${SIZE[$id]}" "${UNCHANGED[$id]}" >>"$RESULTS"
done

# --- report -----------------------------------------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
fs=$(df -PT "$DIR" | awk 'NR == 2 { print $2 " on " $1 }')
IFS='|' read -r rows max_pk _ _ <<<"$EXPECTED"
IFS='|' read -r main_rows _ _ _ <<<"$MAIN_ONLY"
echo "- Date: $(date -u +%Y-%m-%dT%H:%M:%SZ); host: $(nproc) cores, $cpu; $(uname -sr); work folder: $fs"
echo "- Tools: docconvert at $revision ($([[ $STATIC == 1 ]] && echo "built with --static-swift-stdlib" || echo "Swift runtime and Foundation as shared libraries")); $(swift --version 2>&1 | head -n 1); SQLite $(sqlite3 --version | cut -d' ' -f1); $(zip -v | sed -n 2p | sed 's/^ *This is //; s/ (.*//'); $(python3 --version)"
echo "- Source: a Core Data-like store (Z_METADATA, Z_PRIMARYKEY, an indexed to-one relationship), $STORE_BYTES bytes ($(( STORE_BYTES >> 20 )) MiB) + a $WAL_BYTES-byte ($(( WAL_BYTES >> 20 )) MiB) uncheckpointed -wal; $rows rows, of which $(( rows - main_rows )) (and updates to older rows) exist only in the -wal. Rows alternate Zipf-word text and random blobs of 64-1536 bytes. Generated in ${gen_seconds}s by \`convert-benchmark generate\`."
echo "- $RUNS runs per case, interleaved round by round, each on a fresh copy of the store, its -wal and -shm; medians shown. Page cache dropped before every run: $([[ $DROP == 1 ]] && echo 'yes (sync; echo 3 > /proc/sys/vm/drop_caches): the source is read cold' || echo 'no (not permitted or BENCH_DROP_CACHES=0): the source is warm in the page cache')."
echo "- Every output was checked after the first round: it holds every row, update and key counter SQLite reads from the source with its -wal; ours also passed \`docconvert verify\`."
echo "- Ours = the whole \`docconvert convert --legacy keep\`: copy of the store and -wal under SQLite's locks with the SHA-256 of every source file, recovery by SQLite, row counts, \`PRAGMA integrity_check\` and the row counts again (beside the packing, on a thread of its own; the bundle takes its name only once they passed), compression on both cores with the SHA-256 of every entry, fsync, a re-read of the whole bundle (inflate, CRC-32, SHA-256), rename and fsync of the folder. A store that needs no recovery (no -wal, no hot journal) is packed in place under a lock instead of copied first; this one has a -wal. Peer A does not fsync; peer B fsyncs the zip and its folder."
echo
python3 - "$RESULTS" "$SRC_BYTES" <<'PY'
import statistics, sys
path, source = sys.argv[1], int(sys.argv[2])
rows = [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]
cases = {}
for id_, label, compression, peer, times, rss, cpu, size, unchanged in rows:
    t = [float(x) for x in times.split(",")]
    cases[id_] = dict(label=label, compression=compression, peer=peer, times=t, time=statistics.median(t),
                      rss=statistics.median(int(x) for x in rss.split(",")) / 1024,
                      cpu=statistics.median(float(x) for x in cpu.split(",")), size=int(size), unchanged=unchanged)
print("| case | compression | median s | MB/s | output MiB | source ÷ output | peak RSS MiB | CPU s (÷ wall) "
      "| source left unchanged | peer A | speed × peer A | size × peer A |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
for id_, c in cases.items():
    peer = cases.get(c["peer"])
    if peer:
        speed, size, peer_name = f'{peer["time"] / c["time"]:.2f}×', f'{c["size"] / peer["size"]:.3f}×', peer["label"].removeprefix("peer A: ")
    else:
        speed = size = peer_name = "—"
    print(f'| {c["label"]} | {c["compression"]} | {c["time"]:.2f} | {source / 1e6 / c["time"]:.1f} | '
          f'{c["size"] / 2**20:.1f} | {source / c["size"]:.2f} | {c["rss"]:.1f} | {c["cpu"]:.1f} ({c["cpu"] / c["time"]:.2f}) | '
          f'{c["unchanged"]} | {peer_name} | {speed} | {size} |')
print()
print("MB/s = source bytes (store + -wal, 10^6 bytes) ÷ median wall time. speed × peer A = the peer's median time ÷ "
      "this case's (above 1: faster); size × peer A = output size ÷ the peer's. CPU s = user + system, median; "
      "÷ wall shows how many cores it kept busy. Source ÷ output is above 1 even when storing: the consolidated "
      "store is smaller than the store and its -wal together. \"Source left unchanged\": the store and its -wal "
      "were byte-identical after the first run (opening a store with SQLite checkpoints its -wal into it and "
      "deletes it on close).")

def check(text, met):
    print(f'- {text}: **{"met" if met else "not met"}**')

print()
print("Targets of issue #3:")
print()
ours, ours_store = cases["ours"], cases["ours-store"]
for peer_id in ("shell-6", "python-6"):
    peer = cases[peer_id]
    speed = peer["time"] / ours["time"]
    check(f'deflate: at least 2× the speed of {peer["label"]} — {speed:.2f}×', speed >= 2)
    ratio = ours["size"] / peer["size"]
    check(f'deflate: bundle at most 1.05× the size of the bundle of {peer["label"]} — {ratio:.3f}×', ratio <= 1.05)
worst = max(ours["rss"], ours_store["rss"], cases["ours-d6"]["rss"])
check(f'peak RSS under 32 MiB — at most {worst:.1f} MiB', worst < 32)
floor = cases["backup"]["time"] / ours_store["time"]
check(f'store mode: at least 0.85× the speed of sqlite3 .backup alone — {floor:.2f}×', floor >= 0.85)
print()
print("Raw wall times (s), in run order:")
print()
for id_, c in cases.items():
    print(f'- {id_} ({c["label"]}, {c["compression"]}): {", ".join(f"{x:.2f}" for x in c["times"])}')
PY
