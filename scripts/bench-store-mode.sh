#!/usr/bin/env bash
# Store mode only: `docconvert convert --compression store` beside `sqlite3 .backup` alone (issue #3's floor), on the
# same generated store with its -wal, alternating run by run with the page cache dropped before each, so that the
# disk's noise falls on both alike. Prints a Markdown table of medians and the per-pair ratios.
#
#   scripts/bench-store-mode.sh
#
# Environment (all optional):
#   BENCH_MB=512             size of the store's main file in MiB
#   BENCH_WAL_MB=64          size of its uncheckpointed -wal in MiB
#   BENCH_RUNS=7             pairs of runs
#   BENCH_DIR=./bench-work   work folder (relative to the repository root; git-ignored by default)
#
# docconvert is built as scripts/bench-convert.sh builds it (release, --static-swift-stdlib, .build-convbench-static).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
MB=${BENCH_MB:-512}
WAL_MB=${BENCH_WAL_MB:-64}
RUNS=${BENCH_RUNS:-7}
DIR=${BENCH_DIR:-./bench-work}
for value in "$MB" "$WAL_MB" "$RUNS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_MB, BENCH_WAL_MB and BENCH_RUNS must be positive integers" >&2; exit 64; }
done
for tool in python3 sqlite3 swift; do
    command -v "$tool" >/dev/null || { echo "missing: $tool (scripts/setup.sh installs it)" >&2; exit 69; }
done
log() { echo "[bench] $*" >&2; }

SCRATCH="$root/.build-convbench-static"
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
log "building docconvert (release, static Swift standard library, in $SCRATCH)"
swift build -c release --product docconvert --static-swift-stdlib --scratch-path "$SCRATCH" >&2
DOCCONVERT="$(swift build -c release --static-swift-stdlib --scratch-path "$SCRATCH" --show-bin-path)/docconvert"
swift build -c release --package-path Benchmarks --product convert-benchmark >&2
GENERATOR="$(swift build -c release --package-path Benchmarks --show-bin-path)/convert-benchmark"

WORK="$root/${DIR#./}/store-mode"
rm -rf "$WORK"
mkdir -p "$WORK/source"
trap 'rm -rf "$WORK"' EXIT
SRC="$WORK/source/Journal.sqlite"
log "$("$GENERATOR" generate "$SRC" "$MB" "$WAL_MB")"
DROP=0
if sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then DROP=1; fi

RESULTS="$WORK/results.tsv"
: >"$RESULTS"
for round in $(seq 1 "$RUNS"); do
    for id in ours backup; do
        rm -rf "$WORK/run"
        mkdir -p "$WORK/run"
        cp "$SRC" "$SRC-wal" "$WORK/run/"
        [[ -f $SRC-shm ]] && cp "$SRC-shm" "$WORK/run/"
        sync
        [[ $DROP == 1 ]] && echo 3 >/proc/sys/vm/drop_caches
        started=$(date +%s.%N)
        if [[ $id == ours ]]; then
            "$DOCCONVERT" convert "$WORK/run/Journal.sqlite" --output "$WORK/run/out.mdz" --legacy keep \
                --compression store >/dev/null
        else
            sqlite3 "$WORK/run/Journal.sqlite" ".backup '$WORK/run/out.sqlite'"
        fi
        ended=$(date +%s.%N)
        seconds=$(python3 -c "print(f'{$ended - $started:.3f}')")
        log "round $round/$RUNS  $id  ${seconds}s"
        printf '%s\t%s\t%s\n' "$round" "$id" "$seconds" >>"$RESULTS"
    done
done

echo "# Store-mode benchmark"
echo
echo "Command: \`BENCH_MB=$MB BENCH_WAL_MB=$WAL_MB BENCH_RUNS=$RUNS scripts/bench-store-mode.sh\` (docconvert at $revision, static build)"
echo
echo "- Date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $(nproc) cores; store $(stat -c %s "$SRC") bytes + -wal $(stat -c %s "$SRC-wal") bytes"
echo "- Pairs of runs, ours then \`.backup\`, each on a fresh copy; page cache dropped before every run: $([[ $DROP == 1 ]] && echo yes || echo no)."
echo
python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().split("\n") if line]
times = {"ours": {}, "backup": {}}
for round_, id_, seconds in rows:
    times[id_][int(round_)] = float(seconds)
ours, backup = times["ours"], times["backup"]
ratios = [backup[r] / ours[r] for r in sorted(ours)]
print("| case | median s | speed ÷ .backup alone |")
print("|---|---:|---:|")
print(f"| docconvert convert --compression store --legacy keep | {statistics.median(ours.values()):.2f} | {statistics.median(backup.values()) / statistics.median(ours.values()):.2f}× |")
print(f"| sqlite3 .backup alone | {statistics.median(backup.values()):.2f} | — |")
print()
print(f"Per pair, .backup's time ÷ ours: {', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}.")
print(f"Target of issue #3 (at least 0.85× the speed of .backup alone): {'met' if statistics.median(ratios) >= 0.85 else 'not met'} by the median pair.")
print()
print("Raw (s): ours " + ", ".join(f"{ours[r]:.2f}" for r in sorted(ours)) + "; .backup " + ", ".join(f"{backup[r]:.2f}" for r in sorted(backup)))
PY
