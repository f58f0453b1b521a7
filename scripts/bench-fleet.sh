#!/usr/bin/env bash
# Converts a large tree of small legacy stores with the Slurm sample (Samples/fleet/batch.slurm as a job array sized
# to the cores, on a one-node cluster started like scripts/fleet-slurm.sh's) and, on a copy of the same tree in the
# same run, with one `docconvert batch` process; merges the array's reports with Samples/fleet/merge-reports.sh;
# prints a Markdown table of medians. The last array's tree is checked against its manifest (every store converted
# once, same rows).
#
#   scripts/bench-fleet.sh
#
# Environment (all optional):
#   BENCH_STORES=20000   generated stores (plus copies of the sample stores among them)
#   BENCH_RUNS=3         rounds; cases are interleaved within a round; the table shows medians
#   BENCH_TASKS=nproc    tasks in the array (one CPU each, one conversion at a time each)
#   BENCH_JOBS=nproc     --jobs of the single process
#   BENCH_DIR=/tmp       where the work folder goes (it needs about 60 KiB per store, three times)
# Needs root. Release build of docconvert.
set -euo pipefail
invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
STORES=${BENCH_STORES:-20000}
RUNS=${BENCH_RUNS:-3}
TASKS=${BENCH_TASKS:-$(nproc)}
JOBS=${BENCH_JOBS:-$(nproc)}
[[ $(id -u) == 0 ]] || { echo "bench-fleet.sh runs Slurm's daemons: run it as root" >&2; exit 77; }
for value in "$STORES" "$RUNS" "$TASKS" "$JOBS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_STORES, BENCH_RUNS, BENCH_TASKS and BENCH_JOBS must be positive numbers" >&2; exit 64; }
done
source scripts/fleet/cluster.sh
log() { echo "[bench] $*" >&2; }
cluster_install
command -v /usr/bin/time >/dev/null || { echo "missing: /usr/bin/time (apt-get install time)" >&2; exit 69; }

log "building docconvert (release)"
swift build -c release --product docconvert >&2
BIN="$(swift build -c release --show-bin-path)/docconvert"

WORK=$(mktemp -d "${BENCH_DIR:-/tmp}/bench-fleet.XXXXXX")
cleanup() { cluster_stop; rm -rf "$WORK"; }
trap cleanup EXIT
cluster_start "$WORK"
# The tasks run docconvert through DOCCONVERT (a variable the sample documents) under /usr/bin/time, for peak RSS.
cat > "$WORK/docconvert-timed" <<EOF
#!/bin/sh
exec /usr/bin/time -f '%e %M' -o "$WORK/time-\${SLURM_ARRAY_JOB_ID}_\${SLURM_ARRAY_TASK_ID}.txt" "$BIN" "\$@"
EOF
chmod +x "$WORK/docconvert-timed"

log "making a tree of $STORES stores"
python3 scripts/fleet/tree.py make "$WORK/pristine" --stores "$STORES" --samples Samples/stores > "$WORK/manifest.json"
STORE_COUNT=$(jq '[.items[] | select(.outcome == "converted")] | length' "$WORK/manifest.json")
SIZE=$(du -sm "$WORK/pristine" | cut -f1)
log "tree: $STORE_COUNT stores, $SIZE MiB"

now() { date +%s%N; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A results
for round in $(seq "$RUNS"); do
    # The Slurm array.
    rm -rf "$WORK/tree" && cp -a "$WORK/pristine" "$WORK/tree" && sync
    mkdir -p "$WORK/logs"
    start=$(now)
    job=$(cd "$WORK/logs" && cluster_submit --array="0-$((TASKS - 1))" --cpus-per-task=1 \
        --export="ALL,ROOT=$WORK/tree,SHARDS=$TASKS,JOBS=1,DOCCONVERT=$WORK/docconvert-timed" "$root/Samples/fleet/batch.slurm")
    while squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.1; done
    wall=$(( ($(now) - start) / 1000000 ))
    results[array]+="$wall "
    rates=$(jq -r '.attempts[-1].summary | (.outcomes.converted / .duration)' "$WORK/tree/.docconvert-reports"/shard-*.json | median)
    results[task_rate]+="$rates "
    rss=$(cat "$WORK"/time-"${job}"_*.txt | awk '{ print $2 }' | sort -n | tail -1)
    results[array_rss]+="$rss "
    start=$(now)
    Samples/fleet/merge-reports.sh "$WORK/tree/.docconvert-reports" "$TASKS" > "$WORK/merged.json" 2>/dev/null || true
    results[merge]+="$(( ($(now) - start) / 1000000 )) "
    log "round $round: array of $TASKS tasks ${wall} ms (median task $(printf '%.0f' "$rates") stores/s, peak RSS ${rss} KiB)"

    # One process.
    rm -rf "$WORK/single" && cp -a "$WORK/pristine" "$WORK/single" && sync
    start=$(now)
    /usr/bin/time -f '%e %M' -o "$WORK/time-single.txt" "$BIN" batch "$WORK/single" --jobs "$JOBS" --quiet \
        --report "$WORK/single-report.json" > /dev/null || true
    wall=$(( ($(now) - start) / 1000000 ))
    results[single]+="$wall "
    results[single_rss]+="$(awk '{ print $2 }' "$WORK/time-single.txt") "
    log "round $round: one process ${wall} ms"
done

log "checking the last array's tree against the manifest"
python3 scripts/fleet/tree.py check "$WORK/tree" "$WORK/manifest.json" "$WORK/merged.json" --converted "$STORE_COUNT"

array=$(tr ' ' '\n' <<< "${results[array]}" | grep . | median)
single=$(tr ' ' '\n' <<< "${results[single]}" | grep . | median)
task_rate=$(tr ' ' '\n' <<< "${results[task_rate]}" | grep . | median)
merge=$(tr ' ' '\n' <<< "${results[merge]}" | grep . | median)
array_rss=$(tr ' ' '\n' <<< "${results[array_rss]}" | grep . | median)
single_rss=$(tr ' ' '\n' <<< "${results[single_rss]}" | grep . | median)
echo
echo "Command: \`$invocation\` with BENCH_STORES=$STORES BENCH_RUNS=$RUNS BENCH_TASKS=$TASKS BENCH_JOBS=$JOBS"
echo "($STORE_COUNT stores, $SIZE MiB; $(nproc) cores; Slurm $(sinfo -V | awk '{print $2}'), one node; medians of $RUNS rounds)"
echo
echo "| case | wall s | stores/s in all | stores/s per task | peak RSS MiB | vs one process |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
awk -v stores="$STORE_COUNT" -v array="$array" -v single="$single" -v rate="$task_rate" -v tasks="$TASKS" \
    -v jobs="$JOBS" -v ars="$array_rss" -v srs="$single_rss" 'BEGIN {
    printf "| Slurm array, %d tasks x 1 CPU (Samples/fleet/batch.slurm) | %.2f | %.0f | %.0f | %.1f | %.2fx |\n", tasks, array / 1000, stores / (array / 1000), rate, ars / 1024, single / array
    printf "| one docconvert batch --jobs %d | %.2f | %.0f | - | %.1f | 1.00x |\n", jobs, single / 1000, stores / (single / 1000), srs / 1024
}'
echo
echo "Merging the $TASKS shard reports (Samples/fleet/merge-reports.sh, jq): $(awk -v m="$merge" 'BEGIN { printf "%.2f", m / 1000 }') s."
