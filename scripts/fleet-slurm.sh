#!/usr/bin/env bash
# Runs the fleet path on a real Slurm cluster, as the README tells a user to: starts munge and a one-node cluster in
# a temporary folder, makes a tree of legacy stores of every kind (generated stores, WAL stores whose rows are only in
# the -wal, the project's sample stores: Core Data with external data, a hot journal, a UIManagedDocument package;
# the corpus stores and packages when ../shared/corpus is there; things that are not stores; a corrupt store), submits
# Samples/fleet/batch.slurm unchanged (configured only through --export and the variables it documents) as a job
# array, merges the shard reports with Samples/fleet/merge-reports.sh, and checks the tree against its manifest:
# every store converted exactly once with the same rows (digests table by table), every item reported once, report
# files never items, things that are not stores untouched, the merged totals equal to the tree.
#
#   scripts/fleet-slurm.sh                      # all scenarios over 2,000 generated stores (about 12 minutes here)
#   FLEET_STORES=120 scripts/fleet-slurm.sh     # the short tree CI uses (about 3 minutes)
#
# Scenarios, each on a fresh copy of the tree:
#   array      an array of FLEET_TASKS tasks; then the same array resubmitted: everything skipped, reports keep what
#              the first run converted (two attempts each)
#   failures   one task cancelled with scancel and one docconvert killed with SIGKILL mid-run; the merger must say
#              the tree is not finished; those two tasks resubmitted alone (--array=A,B): the tree complete, nothing
#              converted twice, the killed run's items in its shard's report as an attempt marked killed (every
#              store converted by exactly one attempt, or named in progress by the killed one)
#   plan       Samples/fleet/plan.slurm walks the tree once, then the array converts from the plan
#              (--dependency=afterok): the tree complete, every task took its items from the plan
#   twice      two arrays over the same tree at once (a retried job beside the original): each item converted once,
#              both runs in every shard's report
#   readonly   a subtree mounted read-only: its stores reported failed and left as they were, the rest converted
#   kubernetes Samples/fleet/indexed-job.yaml checked against the Kubernetes Job schema (kubernetes-validate, from
#              PyPI), then the exact command and environment it gives a pod run for every completion index, with the
#              tree mounted at the pod's mount path in a private mount namespace
#
# Environment (all optional):
#   FLEET_STORES=2000      generated stores (plus the samples' and corpus stores)
#   FLEET_TASKS=6          tasks in the array (= SHARDS); each gets one CPU, so two run at once on two cores
#   FLEET_SCENARIOS="array failures twice readonly kubernetes"
#   FLEET_DOCCONVERT=path  the docconvert binary (default: built here, debug)
#   FLEET_KEEP=1           keep the work folder
# Needs root (munged, slurmd, bind mounts). Exit 0 when every check holds; 1 with the failed checks on stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
STORES=${FLEET_STORES:-2000}
TASKS=${FLEET_TASKS:-6}
SCENARIOS=${FLEET_SCENARIOS:-"array failures twice readonly kubernetes plan"}
[[ $STORES =~ ^[1-9][0-9]*$ && $TASKS =~ ^[1-9][0-9]*$ ]] || { echo "FLEET_STORES and FLEET_TASKS must be positive numbers" >&2; exit 64; }
[[ $(id -u) == 0 ]] || { echo "fleet-slurm.sh runs Slurm's daemons and bind mounts: run it as root" >&2; exit 77; }
source scripts/fleet/cluster.sh
log() { echo "[fleet] $*" >&2; }
failures=0
fail() { echo "[fleet] FAILED: $*" >&2; failures=$((failures + 1)); }
started=$(date +%s)

cluster_install
if [[ -n ${FLEET_DOCCONVERT:-} ]]; then
    BIN=$(realpath "$FLEET_DOCCONVERT")
else
    log "building docconvert (debug)"
    swift build --product docconvert >&2
    BIN="$(swift build --show-bin-path)/docconvert"
fi
[[ -x $BIN ]] || { echo "no docconvert at $BIN" >&2; exit 66; }
# The binary on the PATH the tasks inherit (--export=ALL), as a user's installed one would be.
mkdir -p "$root/.build-fleet/bin"
ln -sf "$BIN" "$root/.build-fleet/bin/docconvert"
export PATH="$root/.build-fleet/bin:$PATH"

WORK=$(mktemp -d /tmp/fleet-slurm.XXXXXX)
MOUNTS=()
cleanup() {
    local status=$?
    cluster_stop
    for mount in "${MOUNTS[@]}"; do umount "$mount" 2>/dev/null || true; done
    if [[ ${FLEET_KEEP:-0} == 1 || $status != 0 ]]; then log "work folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
cluster_start "$WORK"

corpus="$root/../shared/corpus"
[[ -d $corpus ]] || { log "no corpus at $corpus: the tree has generated and sample stores only"; corpus=""; }
log "making a tree of $STORES generated stores, the samples${corpus:+ and the corpus}"
python3 scripts/fleet/tree.py make "$WORK/pristine" --stores "$STORES" --samples Samples/stores \
    ${corpus:+--corpus "$corpus"} > "$WORK/manifest.json"
ITEMS=$(jq '.items | length' "$WORK/manifest.json")
STORE_COUNT=$(jq '[.items[] | select(.outcome == "converted")] | length' "$WORK/manifest.json")
log "tree: $ITEMS items, $STORE_COUNT stores ($(du -sh "$WORK/pristine" | cut -f1))"

# A fresh copy of the tree for a scenario; prints its path.
fresh_tree() {
    local tree="$WORK/$1/tree"
    mkdir -p "$WORK/$1/logs"
    cp -a "$WORK/pristine" "$tree"
    # The manifest's paths are relative; its root is the pristine tree.
    echo "$tree"
}

# Submits the sample as a user would, from a logs folder outside the tree. Arguments: scenario, tree, sbatch options.
submit() {
    local scenario=$1 tree=$2
    shift 2
    (cd "$WORK/$scenario/logs" && cluster_submit --cpus-per-task=1 "$@" \
        --export="ALL,ROOT=$tree,SHARDS=$TASKS,JOBS=1" "$root/Samples/fleet/batch.slurm")
}

# Merges the reports; the merger's exit status is checked against what the scenario expects.
merge() {
    local tree=$1 output=$2 expected_status=$3 status=0
    Samples/fleet/merge-reports.sh "$tree/.docconvert-reports" "$TASKS" > "$output" 2> "$output.err" || status=$?
    [[ $status == "$expected_status" ]] || fail "merge-reports.sh exited $status, expected $expected_status: $(cat "$output.err")"
}

# The merged report of a finished tree: every shard, none interrupted, only the corrupt store failed, none busy.
check_complete() {
    local scenario=$1 tree=$2 merged=$3
    shift 3
    jq -e '.missingShards == [] and (.summary.interrupted | not) and (.duplicates == [])
           and ((.summary.outcomes.busy // 0) == 0)' "$merged" >/dev/null \
        || fail "$scenario: the merged report is not complete: $(jq -c '{missingShards, interrupted: .summary.interrupted, duplicates: (.duplicates | length), outcomes: .summary.outcomes}' "$merged")"
    python3 scripts/fleet/tree.py check "$tree" "$WORK/manifest.json" "$merged" "$@" \
        || fail "$scenario: the tree does not match its manifest"
    # No report is an item, wherever it is: the walk must not have listed them.
    if jq -e '[.items[] | select(.source | test("\\.docconvert-reports/"))] | length > 0' "$merged" >/dev/null; then
        fail "$scenario: report files were walked as items"
    fi
}

# Converted entries over every attempt of every shard report: equal to the stores when no attempt died unreported.
converted_in_attempts() {
    jq -s '[.[].attempts[].summary.outcomes.converted] | add' "$1"/.docconvert-reports/shard-*.json
}

scenario_array() {
    local tree job start elapsed
    tree=$(fresh_tree array)
    start=$(date +%s%N)
    job=$(submit array "$tree" --array="0-$((TASKS - 1))")
    log "array: job $job, $TASKS tasks over $STORE_COUNT stores"
    cluster_wait "$job"
    elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
    merge "$tree" "$WORK/array/merged.json" 1   # 1: the corrupt store failed
    check_complete array "$tree" "$WORK/array/merged.json" --converted "$STORE_COUNT"
    [[ $(converted_in_attempts "$tree") == "$STORE_COUNT" ]] || fail "array: attempts converted $(converted_in_attempts "$tree") items, expected $STORE_COUNT"
    log "array: $STORE_COUNT stores in $((elapsed / 1000)).$(printf %03d $((elapsed % 1000))) s with $TASKS tasks"
    job=$(submit array "$tree" --array="0-$((TASKS - 1))")
    cluster_wait "$job"
    merge "$tree" "$WORK/array/merged-again.json" 1
    check_complete "array (resubmitted)" "$tree" "$WORK/array/merged-again.json" --converted "$STORE_COUNT"
    jq -e --argjson tasks "$TASKS" '[.reports[].attempts] == [range(0; $tasks) | 2]' "$WORK/array/merged-again.json" >/dev/null \
        || fail "array: each shard report should hold two attempts: $(jq -c '[.reports[].attempts]' "$WORK/array/merged-again.json")"
    [[ $(converted_in_attempts "$tree") == "$STORE_COUNT" ]] || fail "array (resubmitted): something was converted again"
    check_merger "$tree/.docconvert-reports"
}

# The merger on report sets that are wrong in the ways a fleet makes them wrong, built from a real run's reports.
check_merger() {
    local reports=$1 bad="$WORK/array/bad" status
    merger_status() { status=0; Samples/fleet/merge-reports.sh "$bad" "$@" > "$bad.out" 2> "$bad.err" || status=$?; }
    # A task rerun without the array's size: a report of shard 0/1 beside shards of N.
    rm -rf "$bad" && cp -a "$reports" "$bad"
    jq -c '.shard = {index: 0, count: 1, origin: "SLURM_ARRAY_TASK_ID"}' "$reports/shard-1.json" > "$bad/stray.json"
    merger_status
    [[ $status == 65 ]] && jq -e '.error and (.items | not)' "$bad.out" >/dev/null && grep -q "disagree on the number of shards" "$bad.err" \
        || fail "merger: shard counts that disagree gave exit $status: $(cat "$bad.err")"
    # A count other than the one given.
    rm -rf "$bad" && cp -a "$reports" "$bad"
    merger_status $((TASKS + 1))
    [[ $status == 65 ]] || fail "merger: a wrong expected count gave exit $status"
    # A shard's report missing.
    rm "$bad/shard-0.json"
    merger_status
    [[ $status == 1 ]] && grep -q "no report from shard(s) 0 of $TASKS" "$bad.err" \
        || fail "merger: a missing shard gave exit $status: $(cat "$bad.err")"
    # One shard's items in a second report (an array once submitted as 0-N-1, once as 1-N), never converted there.
    rm -rf "$bad" && cp -a "$reports" "$bad"
    jq -c '.items |= map(if .outcome == "converted" then .outcome = "skipped-already-done" else . end)' \
        "$reports/shard-2.json" > "$bad/shard-2-again.json"
    merger_status
    [[ $status == 1 ]] && jq -e --slurpfile one "$reports/shard-2.json" \
        '(.duplicates | length) == ($one[0].items | length) and .summary.items == (.items | length)' \
        "$bad.out" >/dev/null && grep -q "in two reports" "$bad.err" \
        || fail "merger: duplicated items were not reported (exit $status): $(cat "$bad.err")"
    jq -e --slurpfile good "$WORK/array/merged-again.json" '.summary.outcomes == $good[0].summary.outcomes' "$bad.out" >/dev/null \
        || fail "merger: a duplicate changed the totals: $(jq -c .summary.outcomes "$bad.out")"
    # The same item converted in two reports.
    cp "$reports/shard-2.json" "$bad/shard-2-again.json"
    merger_status
    [[ $status == 65 ]] && grep -q "converted twice" "$bad.err" || fail "merger: an item converted twice gave exit $status"
    rm -rf "$bad" "$bad.out" "$bad.err"
}

scenario_failures() {
    local tree job running cancelled killed pid status
    tree=$(fresh_tree failures)
    job=$(submit failures "$tree" --array="0-$((TASKS - 1))")
    log "failures: job $job; cancelling one task and killing another's docconvert once they have converted something"
    # The first running task that has converted something is cancelled (SIGTERM: it finishes its items and writes
    # an interrupted report); the next one's docconvert is killed with SIGKILL (no report at all).
    cancelled=""
    killed=""
    for _ in $(seq 600); do
        for running in $(squeue -h -j "$job" -t R -o %K 2>/dev/null); do
            [[ $running == "$cancelled" ]] && continue
            grep -qs '^converted' "$WORK/failures/logs/docconvert-${job}_${running}.log" || continue
            if [[ -z $cancelled ]]; then
                scancel "${job}_${running}"
                cancelled=$running
                log "failures: cancelled task $running"
            elif [[ -z $killed ]]; then
                pid=$(pgrep -f -- "--report $tree/.docconvert-reports/shard-$((running % TASKS)).json" | head -1 || true)
                [[ -n $pid ]] || continue
                kill -KILL "$pid"
                killed=$running
                log "failures: killed docconvert $pid of task $running with SIGKILL"
            fi
        done
        [[ -n $cancelled && -n $killed ]] && break
        squeue -h -j "$job" | grep -q . || break
        sleep 0.2
    done
    cluster_wait "$job"
    [[ -n $cancelled && -n $killed ]] || { fail "failures: the array finished before a task could be cancelled and one killed (make the tree larger)"; return; }
    status=0
    Samples/fleet/merge-reports.sh "$tree/.docconvert-reports" "$TASKS" > "$WORK/failures/partial.json" 2> "$WORK/failures/partial.err" || status=$?
    [[ $status == 1 ]] || fail "failures: the merger exited $status before the resubmission, expected 1 (not finished)"
    grep -q "shard(s) $((killed % TASKS))\b\|interrupted" "$WORK/failures/partial.err" \
        || fail "failures: the merger did not name the missing or interrupted shard: $(cat "$WORK/failures/partial.err")"
    log "failures: the merger says: $(tr '\n' ' ' < "$WORK/failures/partial.err")"
    job=$(submit failures "$tree" --array="$cancelled,$killed")
    log "failures: resubmitted tasks $cancelled and $killed alone as job $job"
    cluster_wait "$job"
    merge "$tree" "$WORK/failures/merged.json" 1
    check_complete failures "$tree" "$WORK/failures/merged.json"
    jq -e --argjson tasks "$TASKS" '.shardCount == $tasks' "$WORK/failures/merged.json" >/dev/null \
        || fail "failures: a resubmitted task did not keep the array's shard count"
    # The killed run's history was salvaged by the resubmitted task: an attempt marked killed in its shard's report,
    # and every store converted by exactly one attempt or named in progress by the killed one (its conversion may
    # have completed just before the kill; the rerun then found it done).
    local report="$tree/.docconvert-reports/shard-$((killed % TASKS)).json" accounted
    jq -e '[.attempts[] | select(.killed == true)] | length == 1' "$report" >/dev/null \
        || fail "failures: the killed run is not in its shard's report: $(jq -c '[.attempts[] | {killed, summary: .summary.outcomes}]' "$report")"
    accounted=$(jq -s --slurpfile merged "$WORK/failures/merged.json" '
        ([.[].attempts[].summary.outcomes.converted] | add)
        + ([.[].attempts[].inProgress // [] | .[]] as $started
           | [$merged[0].items[] | select(.outcome == "skipped-already-done" and (.source | IN($started[])))] | length)' \
        "$tree"/.docconvert-reports/shard-*.json)
    [[ $accounted == "$STORE_COUNT" ]] \
        || fail "failures: attempts account for $accounted conversions, expected $STORE_COUNT (killed run's items lost?)"
    log "failures: the killed run's attempt: $(jq -c '.attempts[] | select(.killed == true) | {converted: .summary.outcomes.converted, inProgress: (.inProgress // [] | length)}' "$report")"
}

scenario_plan() {
    local tree plan job plan_job
    tree=$(fresh_tree plan)
    plan="$WORK/plan/tree.plan"
    plan_job=$(cd "$WORK/plan/logs" && cluster_submit --export="ALL,ROOT=$tree,PLAN=$plan" "$root/Samples/fleet/plan.slurm")
    job=$(cd "$WORK/plan/logs" && cluster_submit --cpus-per-task=1 --array="0-$((TASKS - 1))" --dependency="afterok:$plan_job" \
        --export="ALL,ROOT=$tree,SHARDS=$TASKS,JOBS=1,PLAN=$plan" "$root/Samples/fleet/batch.slurm")
    log "plan: plan job $plan_job, then array $job (afterok)"
    cluster_wait "$plan_job" "$job"
    [[ -s $plan ]] || { fail "plan: no plan was written: $(cat "$WORK/plan/logs"/docconvert-plan-*.log)"; return; }
    [[ $(head -1 "$plan" | jq '.items') == "$ITEMS" ]] || fail "plan: the plan holds $(head -1 "$plan" | jq '.items') items, the tree $ITEMS"
    merge "$tree" "$WORK/plan/merged.json" 1
    check_complete plan "$tree" "$WORK/plan/merged.json" --converted "$STORE_COUNT"
    [[ $(grep -l "taking the items from the plan" "$WORK/plan/logs"/docconvert-"$job"_*.log | wc -l) == "$TASKS" ]] \
        || fail "plan: not every task took its items from the plan"
}

scenario_twice() {
    local tree first second
    tree=$(fresh_tree twice)
    first=$(submit twice "$tree" --array="0-$((TASKS - 1))")
    second=$(submit twice "$tree" --array="0-$((TASKS - 1))")
    log "twice: jobs $first and $second over the same tree at once"
    cluster_wait "$first" "$second"
    merge "$tree" "$WORK/twice/merged.json" 1
    check_complete twice "$tree" "$WORK/twice/merged.json" --converted "$STORE_COUNT"
    [[ $(converted_in_attempts "$tree") == "$STORE_COUNT" ]] \
        || fail "twice: the two arrays converted $(converted_in_attempts "$tree") items in all, expected $STORE_COUNT (each once)"
    jq -e --argjson tasks "$TASKS" '[.reports[].attempts] == [range(0; $tasks) | 2]' "$WORK/twice/merged.json" >/dev/null \
        || fail "twice: each shard report should hold both arrays' runs: $(jq -c '[.reports[].attempts]' "$WORK/twice/merged.json")"
}

scenario_readonly() {
    local tree subtree job
    tree=$(fresh_tree readonly)
    subtree="home/user07"
    [[ -d $tree/$subtree ]] || { fail "readonly: the tree has no $subtree (FLEET_STORES too small)"; return; }
    find "$tree/$subtree" -type f | sort | xargs sha256sum > "$WORK/readonly/before.txt"
    mount --bind "$tree/$subtree" "$tree/$subtree"
    MOUNTS+=("$tree/$subtree")
    mount -o remount,ro,bind "$tree/$subtree"
    job=$(submit readonly "$tree" --array="0-$((TASKS - 1))")
    log "readonly: job $job with $subtree mounted read-only"
    cluster_wait "$job"
    merge "$tree" "$WORK/readonly/merged.json" 1
    check_complete readonly "$tree" "$WORK/readonly/merged.json" --failed-under "$subtree/"
    find "$tree/$subtree" -type f | sort | xargs sha256sum | cmp -s - "$WORK/readonly/before.txt" \
        || fail "readonly: files in the read-only subtree changed"
    jq -e --arg prefix "$subtree/" '[.items[] | select(.source | startswith($prefix)) | select(.outcome == "failed")
        | .error.message | test("read-only|cannot create")] | all' "$WORK/readonly/merged.json" >/dev/null \
        || fail "readonly: the failures do not say the folder cannot be written"
    umount "$tree/$subtree"
}

scenario_kubernetes() {
    local tree venv yaml completions mount_path index status
    tree=$(fresh_tree kubernetes)
    yaml="$root/Samples/fleet/indexed-job.yaml"
    venv="$root/.build-fleet/venv"
    if [[ ! -x $venv/bin/kubernetes-validate ]]; then
        log "kubernetes: installing kubernetes-validate from PyPI into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q kubernetes-validate >&2
    fi
    "$venv/bin/kubernetes-validate" --strict "$yaml" >&2 || fail "kubernetes: $yaml does not validate against the Job schema"
    # What the Job gives each pod: its command and args, its environment, the volume's mount path, the completions.
    "$venv/bin/python" - "$yaml" > "$WORK/kubernetes/pod.json" <<'EOF'
import json, sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
container = job["spec"]["template"]["spec"]["containers"][0]
print(json.dumps({"command": container["command"] + container.get("args", []),
                  "env": {e["name"]: e["value"] for e in container.get("env", [])},
                  "mountPath": container["volumeMounts"][0]["mountPath"],
                  "completions": job["spec"]["completions"], "parallelism": job["spec"]["parallelism"]}))
EOF
    completions=$(jq '.completions' "$WORK/kubernetes/pod.json")
    mount_path=$(jq -r '.mountPath' "$WORK/kubernetes/pod.json")
    jq -e '.env.DOCCONVERT_SHARD_COUNT == (.completions | tostring)' "$WORK/kubernetes/pod.json" >/dev/null \
        || fail "kubernetes: DOCCONVERT_SHARD_COUNT is not the Job's completions"
    local created=0
    [[ -e $mount_path ]] || { mkdir -p "$mount_path"; created=1; }
    log "kubernetes: running the pod's command for indexes 0-$((completions - 1)), the tree at $mount_path"
    for index in $(seq 0 $((completions - 1))); do
        status=0
        # A private mount namespace: the tree is at the pod's mount path only for this command.
        jq -r '.command[]' "$WORK/kubernetes/pod.json" > "$WORK/kubernetes/command.txt"
        unshare --mount --propagation private bash -c '
            mount --bind "$1" "$2" || exit 70
            shift 2
            mapfile -t command < "$1"; shift
            exec env "$@" "${command[@]}"' _ "$tree" "$mount_path" "$WORK/kubernetes/command.txt" \
            "PATH=$PATH" "JOB_COMPLETION_INDEX=$index" \
            $(jq -r '.env | to_entries[] | "\(.key)=\(.value)"' "$WORK/kubernetes/pod.json") \
            > "$WORK/kubernetes/pod-$index.log" 2>&1 || status=$?
        [[ $status == 0 || $status == 65 ]] || fail "kubernetes: pod $index exited $status: $(tail -3 "$WORK/kubernetes/pod-$index.log")"
    done
    ((created)) && rmdir "$mount_path"
    status=0
    Samples/fleet/merge-reports.sh "$tree/.docconvert-reports" "$completions" > "$WORK/kubernetes/merged.json" 2> "$WORK/kubernetes/merged.err" || status=$?
    [[ $status == 1 ]] || fail "kubernetes: merge-reports.sh exited $status: $(cat "$WORK/kubernetes/merged.err")"
    # The reports name the pod's root (the mount path); the check reads the tree where it really is.
    check_complete kubernetes "$tree" "$WORK/kubernetes/merged.json" --converted "$STORE_COUNT"
}

for scenario in $SCENARIOS; do
    case $scenario in
        array|failures|twice|readonly|kubernetes|plan) "scenario_$scenario" ;;
        *) echo "unknown scenario '$scenario'" >&2; exit 64 ;;
    esac
done

elapsed=$(( $(date +%s) - started ))
if ((failures > 0)); then
    log "$failures check(s) failed in ${elapsed}s"
    exit 1
fi
log "all checks passed (${SCENARIOS// /, }) in ${elapsed}s"
