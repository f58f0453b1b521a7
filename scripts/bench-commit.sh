#!/usr/bin/env bash
# One-row commits through a writable document (its store served from the bundle through the overlay, FORMAT.md
# 16.2) beside the same commits on a plain SQLite file (rollback journal, synchronous = FULL, and EXTRA: the
# durability the document gives, its journal's unlink flushed before the commit returns), in alternating runs, and
# the flushes (fsync + fdatasync) each makes per commit. Prints a Markdown table of medians; the target is ours at
# most 1.15x plain SQLite at EXTRA.
#
#   scripts/bench-commit.sh          (scripts/bench-document.sh runs it too, unless BENCH_COMMITS=0)
#
# Environment (all optional):
#   BENCH_COMMIT_MB=4        size of the saved document's store in MiB
#   BENCH_COMMIT_COUNT=200   commits per run (one INSERT of one short row each, its own transaction)
#   BENCH_RUNS=5             runs per case, alternating (ours, full, extra; then extra, full, ours; ...); medians
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored by default)
#   BENCH_KEEP=1             keep the work folder afterwards
#   BENCH_STATIC_STDLIB=1    build the benchmark with --static-swift-stdlib (as scripts/bench-document.sh)
#
# Cases, each on a fresh copy made before its run (not timed):
#   ours    document-benchmark commits: Document.open for writing with default options, COUNT commits through
#           document.writer.write, timed in-process (the open and the close outside the span)
#   full    document-benchmark commits-file: the same commits through GRDB on the document's store extracted to a
#           plain file, journal_mode = DELETE, synchronous = FULL (SQLite's own commit; its journal's unlink is not
#           flushed, so a power cut can take the last commit back)
#   extra   the same with synchronous = EXTRA (the folder flushed after the journal's unlink: the same durability as
#           ours)
# Flushes: each case is run once more under `strace -f -c -e trace=fsync,fdatasync` with COUNT commits and once with
# one; (flushes(COUNT) - flushes(1)) / (COUNT - 1) is the flushes of one commit, the open and close left out.
set -euo pipefail

invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

MB=${BENCH_COMMIT_MB:-4}
COUNT=${BENCH_COMMIT_COUNT:-200}
RUNS=${BENCH_RUNS:-5}
DIR=${BENCH_DIR:-./bench-work}
KEEP=${BENCH_KEEP:-0}
STATIC=${BENCH_STATIC_STDLIB:-0}
for value in "$MB" "$COUNT" "$RUNS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_COMMIT_MB, BENCH_COMMIT_COUNT and BENCH_RUNS must be positive integers" >&2; exit 64; }
done
(( COUNT >= 2 )) || { echo "BENCH_COMMIT_COUNT must be at least 2" >&2; exit 64; }
for tool in unzip strace swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 69; }
done

source "$root/scripts/bench-common.sh"

build_flags=()
if [[ $STATIC == 1 ]]; then build_flags=(--static-swift-stdlib --scratch-path Benchmarks/.build-static); fi
log "building the benchmark (release${build_flags[*]:+, static Swift standard library})"
swift build -c release --package-path Benchmarks "${build_flags[@]}" >&2
BIN="$(swift build -c release --package-path Benchmarks "${build_flags[@]}" --show-bin-path)/document-benchmark"
[[ -x $BIN ]] || { echo "no benchmark binary at $BIN" >&2; exit 70; }

bench_work_folder commit-run
BUNDLE="$WORK/document.mdz"
log "making a ${MB} MiB document at $BUNDLE"
"$BIN" make-document "$BUNDLE" "$MB" "$WORK/wc-make" >&2
unzip -q "$BUNDLE" StoreContent/persistentStore -d "$WORK/src"
STORE="$WORK/src/StoreContent/persistentStore"

# Each case: a fresh copy, then the benchmark with N commits (its one output line in $WORK/cmd.out).
prepare_ours() { rm -rf "$WORK/wc" "$WORK/run.mdz"; cp "$BUNDLE" "$WORK/run.mdz"; }
command_ours() { "$@" "$BIN" commits "$WORK/run.mdz" "$WORK/wc" "$N"; }
prepare_full() { rm -f "$WORK/run.sqlite" "$WORK/run.sqlite-journal"; cp "$STORE" "$WORK/run.sqlite"; }
command_full() { "$@" "$BIN" commits-file "$WORK/run.sqlite" "$N" FULL; }
prepare_extra() { prepare_full; }
command_extra() { "$@" "$BIN" commits-file "$WORK/run.sqlite" "$N" EXTRA; }

declare -A MS LINE
N=$COUNT
for ((round = 1; round <= RUNS; round++)); do
    order=(ours full extra); (( round % 2 == 0 )) && order=(extra full ours)
    for id in "${order[@]}"; do
        "prepare_$id"
        "command_$id" env >"$WORK/cmd.out" 2>"$WORK/cmd.err" || { cat "$WORK/cmd.out" "$WORK/cmd.err" >&2; exit 1; }
        ms=$(awk '{ print $2; exit }' "$WORK/cmd.out")
        MS[$id]+="${MS[$id]:+ }$ms"
        LINE[$id]=$(head -n 1 "$WORK/cmd.out")
        log "round $round/$RUNS  $(printf '%-5s' "$id") ${ms} ms per commit"
    done
done

# split ID N: "fsync fdatasync" of one run of ID with N commits.
split_flushes() {
    local id=$1
    N=$2
    "prepare_$id"
    "command_$id" strace -f -c -e trace=fsync,fdatasync -o "$WORK/strace.txt" >/dev/null 2>"$WORK/cmd.err" \
        || { cat "$WORK/cmd.err" >&2; exit 1; }
    awk '$NF == "fsync" { f = $4 } $NF == "fdatasync" { d = $4 } END { print f + 0, d + 0 }' "$WORK/strace.txt"
}
declare -A PER
for id in ours full extra; do
    read -r many_f many_d < <(split_flushes "$id" "$COUNT")
    read -r one_f one_d < <(split_flushes "$id" 1)
    PER[$id]=$(awk -v a="$many_f" -v b="$one_f" -v c="$many_d" -v d="$one_d" -v n="$COUNT" \
        'BEGIN { printf "%.2f (fsync %.2f + fdatasync %.2f)", (a - b + c - d) / (n - 1), (a - b) / (n - 1), (c - d) / (n - 1) }')
    log "$id: ${PER[$id]} flushes per commit"
done

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ours=$(median <<<"${MS[ours]}")
full=$(median <<<"${MS[full]}")
extra=$(median <<<"${MS[extra]}")
ratio_full=$(awk -v a="$ours" -v b="$full" 'BEGIN { printf "%.2f", a / b }')
ratio=$(awk -v a="$ours" -v b="$extra" 'BEGIN { printf "%.2f", a / b }')
fs=$(df -PT "$WORK" | awk 'NR == 2 { print $2 " on " $1 }')
echo "## One-row commits: ours beside SQLite's own"
echo
echo "Command: \`BENCH_COMMIT_MB=$MB BENCH_COMMIT_COUNT=$COUNT BENCH_RUNS=$RUNS $invocation\` ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), work folder $fs, release build)"
echo
echo "| case | ms per commit, median | runs (ms per commit) | flushes per commit | settings |"
echo "| --- | ---: | --- | --- | --- |"
echo "| ours: writable document (overlay) | $ours | ${MS[ours]} | ${PER[ours]} | $(cut -d" " -f6- <<<"${LINE[ours]}") |"
echo "| plain SQLite file, FULL | $full | ${MS[full]} | ${PER[full]} | $(cut -d" " -f6- <<<"${LINE[full]}") |"
echo "| plain SQLite file, EXTRA (the same durability) | $extra | ${MS[extra]} | ${PER[extra]} | $(cut -d" " -f6- <<<"${LINE[extra]}") |"
echo
echo "Ours / plain at EXTRA: **${ratio}×** (target: at most 1.15×); ours / plain at FULL: ${ratio_full}× (FULL can lose the last commit at a power cut). $COUNT commits of one INSERT each per run, a ${MB} MiB store; runs alternate."
