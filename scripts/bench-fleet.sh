#!/usr/bin/env bash
# The fleet at scale on a one-node Slurm cluster (started like scripts/fleet-slurm.sh's): a home-folder tree of at
# least 200,000 items (small legacy stores among many small files that are not stores), converted three ways on fresh
# copies in the same run, interleaved in each round:
#   walk   Samples/fleet/batch.slurm as an array of BENCH_TASKS tasks, each walking the whole tree (the old way)
#   plan   Samples/fleet/plan.slurm walks once, then the same array converts from the plan (--dependency=afterok);
#          the wall time includes the plan job
#   single one `docconvert batch --jobs BENCH_JOBS` process
# then merges the plan array's reports with `docconvert merge-reports` (streaming) and with the jq merger it replaced
# (Samples/fleet/merge-reports.sh of git 1daa82e, kept here as the peer), and counts each task's metadata system calls
# (openat, stat family, getdents64, readlink, access: what a shared file system's metadata server answers) with
# `strace -c -f` on one shard run outside Slurm, walking and with the plan, and the plan job's own. Prints Markdown
# tables of medians, and checks the last plan array's tree against its manifest (every store converted once, same
# rows; every other file untouched).
#
#   scripts/bench-fleet.sh
#
# Environment (all optional):
#   BENCH_STORES=20000   generated stores (plus copies of the sample stores among them)
#   BENCH_OTHERS=180000  small files that are not stores
#   BENCH_RUNS=2         rounds; the table shows medians
#   BENCH_TASKS=2        tasks in each array (one CPU each, one conversion at a time each)
#   BENCH_JOBS=nproc     --jobs of the single process
#   BENCH_DIR=/tmp       where the work folder goes (about 1 GiB for the default tree, four times)
#   BENCH_TREE=folder    a tree made earlier by `tree.py make folder/pristine … > folder/manifest.json` with the same
#                        counts (making the default tree takes about 20 minutes here), used read-only
# Needs root, strace, /usr/bin/time. Release build of docconvert.
set -euo pipefail
invocation="$0${*:+ $*}"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
STORES=${BENCH_STORES:-20000}
OTHERS=${BENCH_OTHERS:-180000}
RUNS=${BENCH_RUNS:-2}
TASKS=${BENCH_TASKS:-2}
JOBS=${BENCH_JOBS:-$(nproc)}
[[ $(id -u) == 0 ]] || { echo "bench-fleet.sh runs Slurm's daemons: run it as root" >&2; exit 77; }
for value in "$STORES" "$RUNS" "$TASKS" "$JOBS"; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_STORES, BENCH_RUNS, BENCH_TASKS and BENCH_JOBS must be positive numbers" >&2; exit 64; }
done
[[ $OTHERS =~ ^[0-9]+$ ]] || { echo "BENCH_OTHERS must be a number" >&2; exit 64; }
source scripts/fleet/cluster.sh
log() { echo "[bench] $*" >&2; }
cluster_install
for tool in /usr/bin/time strace; do command -v "$tool" >/dev/null || { echo "missing: $tool (scripts/setup.sh installs it)" >&2; exit 69; }; done

log "building docconvert (release)"
swift build -c release --product docconvert >&2
BIN="$(swift build -c release --show-bin-path)/docconvert"

WORK=$(mktemp -d "${BENCH_DIR:-/tmp}/bench-fleet.XXXXXX")
cleanup() { cluster_stop; rm -rf "$WORK"; }
trap cleanup EXIT
cluster_start "$WORK"
# Tasks run docconvert through DOCCONVERT (a variable the samples document) under /usr/bin/time, for peak RSS.
cat > "$WORK/docconvert-timed" <<EOF
#!/bin/sh
exec /usr/bin/time -f '%e %M' -o "$WORK/time-\${SLURM_JOB_ID}.txt" "$BIN" "\$@"
EOF
chmod +x "$WORK/docconvert-timed"
git show 1daa82e:Samples/fleet/merge-reports.sh > "$WORK/merge-reports-jq.sh"
chmod +x "$WORK/merge-reports-jq.sh"

if [[ -n ${BENCH_TREE:-} ]]; then
    PRISTINE=$BENCH_TREE/pristine MANIFEST=$BENCH_TREE/manifest.json
    [[ -d $PRISTINE && -s $MANIFEST ]] || { echo "BENCH_TREE=$BENCH_TREE holds no pristine/ and manifest.json" >&2; exit 66; }
else
    PRISTINE=$WORK/pristine MANIFEST=$WORK/manifest.json
    log "making a tree of $STORES stores and $OTHERS other files"
    python3 scripts/fleet/tree.py make "$PRISTINE" --stores "$STORES" --others "$OTHERS" --samples Samples/stores > "$MANIFEST"
fi
ITEMS=$(jq '.items | length' "$MANIFEST")
STORE_COUNT=$(jq '[.items[] | select(.outcome == "converted")] | length' "$MANIFEST")
SIZE=$(du -sm "$PRISTINE" | cut -f1)
log "tree: $ITEMS items, $STORE_COUNT stores, $SIZE MiB"

now() { date +%s%N; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
fresh() { rm -rf "$WORK/$1" && mkdir "$WORK/$1" && cp -a "$PRISTINE/." "$WORK/$1" && sync; }
declare -A results
record() { results[$1]+="$2 "; }
# /usr/bin/time's last line is "seconds KiB" (a line before it says when the command exited non-zero).
field() { tail -1 "$2" | awk -v n="$1" '{ print $n }'; }
peak_rss() { local file; for file in "$@"; do field 2 "$file"; done | sort -n | tail -1; }
array_wait() { while squeue -h -j "$1" 2>/dev/null | grep -q .; do sleep 0.1; done; }

for round in $(seq "$RUNS"); do
    # walk: every task walks the whole tree.
    fresh tree-walk
    mkdir -p "$WORK/logs-walk"
    rm -f "$WORK"/time-*.txt
    start=$(now)
    job=$(cd "$WORK/logs-walk" && cluster_submit --array="0-$((TASKS - 1))" --cpus-per-task=1 \
        --export="ALL,ROOT=$WORK/tree-walk,SHARDS=$TASKS,JOBS=1,DOCCONVERT=$WORK/docconvert-timed" "$root/Samples/fleet/batch.slurm")
    array_wait "$job"
    wall=$(( ($(now) - start) / 1000000 ))
    record walk "$wall"
    record walk_rss "$(peak_rss "$WORK"/time-*.txt)"
    log "round $round: walk array ${wall} ms"

    # plan: one walk, then the array from the plan.
    fresh tree-plan
    mkdir -p "$WORK/logs-plan"
    rm -f "$WORK"/time-*.txt
    plan="$WORK/plan-$round.plan"
    start=$(now)
    plan_job=$(cd "$WORK/logs-plan" && cluster_submit --cpus-per-task=1 \
        --export="ALL,ROOT=$WORK/tree-plan,PLAN=$plan,DOCCONVERT=$WORK/docconvert-timed" "$root/Samples/fleet/plan.slurm")
    job=$(cd "$WORK/logs-plan" && cluster_submit --array="0-$((TASKS - 1))" --cpus-per-task=1 --dependency="afterok:$plan_job" \
        --export="ALL,ROOT=$WORK/tree-plan,SHARDS=$TASKS,JOBS=1,PLAN=$plan,DOCCONVERT=$WORK/docconvert-timed" "$root/Samples/fleet/batch.slurm")
    array_wait "$plan_job"
    plan_done=$(now)
    array_wait "$job"
    wall=$(( ($(now) - start) / 1000000 ))
    record plan "$wall"
    record plan_only "$(( (plan_done - start) / 1000000 ))"
    record plan_rss "$(field 2 "$WORK/time-$plan_job.txt")"
    record plan_task_rss "$(peak_rss $(find "$WORK" -maxdepth 1 -name 'time-*.txt' ! -name "time-$plan_job.txt"))"
    log "round $round: plan job $(( (plan_done - start) / 1000000 )) ms, plan + array ${wall} ms"

    # single: one process.
    fresh tree-single
    start=$(now)
    /usr/bin/time -f '%e %M' -o "$WORK/time-single.txt" "$BIN" batch "$WORK/tree-single" --jobs "$JOBS" --quiet \
        --report "$WORK/single-report.json" > /dev/null || true
    wall=$(( ($(now) - start) / 1000000 ))
    record single "$wall"
    record single_rss "$(field 2 "$WORK/time-single.txt")"
    log "round $round: one process ${wall} ms"

    # The merges of the plan array's reports.
    reports="$WORK/tree-plan/.docconvert-reports"
    start=$(now)
    /usr/bin/time -f '%e %M' -o "$WORK/time-merge.txt" "$BIN" merge-reports "$reports" "$TASKS" --output "$WORK/merged.json" > /dev/null 2>&1 || true
    record merge "$(( ($(now) - start) / 1000000 ))"
    record merge_rss "$(field 2 "$WORK/time-merge.txt")"
    start=$(now)
    /usr/bin/time -f '%e %M' -o "$WORK/time-jq.txt" "$WORK/merge-reports-jq.sh" "$reports" "$TASKS" > "$WORK/merged-jq.json" 2>/dev/null || true
    record jq "$(( ($(now) - start) / 1000000 ))"
    record jq_rss "$(field 2 "$WORK/time-jq.txt")"
    log "round $round: merge-reports $(field 1 "$WORK/time-merge.txt") s $(field 2 "$WORK/time-merge.txt") KiB, jq $(field 1 "$WORK/time-jq.txt") s $(field 2 "$WORK/time-jq.txt") KiB"
done

log "checking the last plan array's tree against the manifest"
python3 scripts/fleet/tree.py check "$WORK/tree-plan" "$MANIFEST" "$WORK/merged.json" --converted "$STORE_COUNT"
cmp <(jq -S '.items' "$WORK/merged.json") <(jq -S '.items' "$WORK/merged-jq.json") \
    || { echo "merge-reports and the jq merger disagree on the items" >&2; exit 1; }

# Metadata system calls of one task (shard 0), walking and with the plan, and of the plan job: outside Slurm, on
# fresh copies, counting only those calls (seccomp-bpf keeps the others at full speed).
calls=openat,open,newfstatat,fstatat64,statx,stat,lstat,getdents64,readlink,readlinkat,access,faccessat,faccessat2
count_calls() {
    local out=$1
    shift
    strace -f -c --seccomp-bpf -e trace="$calls" -o "$out" "$@" > /dev/null 2>&1 || true
}
# strace -c's rows: "% time, seconds, usecs/call, calls, [errors,] syscall"; the last row is the total.
sum_calls() { awk '$NF == "total" { print $4 }' "$1"; }
fresh tree-walk
count_calls "$WORK/strace-walk.txt" "$BIN" batch "$WORK/tree-walk" --shard "0/$TASKS" --jobs 1 --quiet --report "$WORK/strace-walk.json"
fresh tree-plan
count_calls "$WORK/strace-planjob.txt" "$BIN" batch "$WORK/tree-plan" --plan-only "$WORK/strace.plan" --quiet
count_calls "$WORK/strace-plan.txt" "$BIN" batch "$WORK/tree-plan" --plan "$WORK/strace.plan" --shard "0/$TASKS" --jobs 1 --quiet --report "$WORK/strace-plan.json"
walk_calls=$(sum_calls "$WORK/strace-walk.txt")
plan_calls=$(sum_calls "$WORK/strace-plan.txt")
planjob_calls=$(sum_calls "$WORK/strace-planjob.txt")
share=$(jq '.summary.items' "$WORK/strace-plan.json")
share_stores=$(jq '[.items[] | select(.kind != "file" and .kind != "folder" and .kind != "symlink" and .kind != "bundle")] | length' "$WORK/strace-plan.json")

m() { tr ' ' '\n' <<< "${results[$1]}" | grep . | median; }
echo
echo "Command: \`$invocation\` with BENCH_STORES=$STORES BENCH_OTHERS=$OTHERS BENCH_RUNS=$RUNS BENCH_TASKS=$TASKS BENCH_JOBS=$JOBS"
echo "($ITEMS items: $STORE_COUNT stores; $SIZE MiB; $(nproc) cores; Slurm $(sinfo -V | awk '{print $2}'), one node; medians of $RUNS rounds)"
echo
echo "| case | wall s | stores/s | peak RSS MiB (any task) | vs one process |"
echo "| --- | ---: | ---: | ---: | ---: |"
awk -v stores="$STORE_COUNT" -v walk="$(m walk)" -v plan="$(m plan)" -v only="$(m plan_only)" -v single="$(m single)" \
    -v tasks="$TASKS" -v jobs="$JOBS" -v wrss="$(m walk_rss)" -v prss="$(m plan_task_rss)" -v pjrss="$(m plan_rss)" -v srss="$(m single_rss)" 'BEGIN {
    printf "| array of %d tasks x 1 CPU, each walking the tree | %.2f | %.0f | %.1f | %.2fx |\n", tasks, walk / 1000, stores / (walk / 1000), wrss / 1024, single / walk
    printf "| plan job (one walk), then the array from the plan | %.2f | %.0f | %.1f | %.2fx |\n", plan / 1000, stores / (plan / 1000), prss / 1024, single / plan
    printf "| - the plan job alone | %.2f | - | %.1f | - |\n", only / 1000, pjrss / 1024
    printf "| - the array from the plan alone | %.2f | %.0f | - | %.2fx |\n", (plan - only) / 1000, stores / ((plan - only) / 1000), single / (plan - only)
    printf "| one docconvert batch --jobs %d | %.2f | %.0f | %.1f | 1.00x |\n", jobs, single / 1000, stores / (single / 1000), srss / 1024
}'
echo
echo "| merge of the plan array's $TASKS reports ($ITEMS items) | wall s | peak RSS MiB |"
echo "| --- | ---: | ---: |"
awk -v a="$(m merge)" -v ar="$(m merge_rss)" -v b="$(m jq)" -v br="$(m jq_rss)" 'BEGIN {
    printf "| docconvert merge-reports (streaming) | %.2f | %.1f |\n", a / 1000, ar / 1024
    printf "| the jq merger it replaced (merge-reports.sh of 1daa82e) | %.2f | %.1f |\n", b / 1000, br / 1024
}'
echo
echo "Metadata system calls ($calls), strace -c -f, shard 0 of $TASKS ($share items, $share_stores of them stores):"
echo
echo "| who | calls | per item of the tree | per item of its share |"
echo "| --- | ---: | ---: | ---: |"
awk -v items="$ITEMS" -v share="$share" -v walk="$walk_calls" -v plan="$plan_calls" -v job="$planjob_calls" 'BEGIN {
    printf "| a task walking the tree | %d | %.2f | %.2f |\n", walk, walk / items, walk / share
    printf "| a task converting from the plan | %d | %.2f | %.2f |\n", plan, plan / items, plan / share
    printf "| the plan job (once) | %d | %.2f | - |\n", job, job / items
}'
echo
echo "Per call, task walking / task from the plan / plan job:"
for file in walk plan planjob; do
    echo "- $file: $(awk '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" && $NF != "syscall" { printf "%s %d, ", $NF, $4 }' "$WORK/strace-$file.txt")"
done
