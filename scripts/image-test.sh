#!/usr/bin/env bash
# Runs the fleet's container image as Kubernetes would run Samples/fleet/indexed-job.yaml: builds it with
# scripts/image.sh (once; also as an OCI archive), tags it with the Job's `image:` name, makes a small tree of legacy
# stores (scripts/fleet/tree.py: plain stores, WAL stores whose rows are only in the -wal, the sample stores: Core Data
# with external data, a hot journal, a UIManagedDocument package; and files that are not stores), and runs the Job's
# container for every completion index with exactly its command, args and environment, JOB_COMPLETION_INDEX set, the
# tree mounted at the volume's mount path, its memory limit and no network. Checks:
#   - index 0 alone converts its share and only it: its report (MOUNT/.docconvert-reports/shard-0.json) says shard 0
#     of `completions` from JOB_COMPLETION_INDEX, lists the items `docconvert batch --dry-run --shard 0/N` lists on
#     the host, all converted or not stores, none failed; the tree holds exactly that many bundles;
#   - after every index: `docconvert merge-reports` exits 0, scripts/fleet/tree.py finds every store converted once
#     with the same rows and the other files untouched, and every bundle passes `docconvert verify` (host binary);
#   - the image reports the version it is tagged with, and the OCI archive names it.
#
#   scripts/image-test.sh      # about 7 minutes with the release build (about 5 of them), 1 once it is built
#
# Where this machine cannot run containers (not root, no podman or no runc, or podman cannot start one: the probe, a
# container of busybox alone, fails) it prints "skipped: <reason>" and exits 0. Where it can, every other tool the run
# needs is checked before anything is built (`scripts/image.sh --check jq python3`: strip, ldd, busybox-static, the
# Swift toolchain unless DOCCONVERT_IMAGE_BINARY is set, jq and python3): exit 69 naming those missing and the apt-get
# command that installs them; PyYAML is found or installed then too. Exit 1 with the failed checks on stderr.
#
# Environment (all optional):
#   DOCCONVERT_IMAGE_BINARY=path   the release docconvert (default: built into .build-image, as scripts/image.sh does)
#   IMAGE_TEST_STORES=25           generated stores in the tree (25 include each sample store once)
#   IMAGE_TEST_KEEP=1              keep the work folder
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
STORES=${IMAGE_TEST_STORES:-25}
[[ $STORES =~ ^[1-9][0-9]*$ ]] || { echo "IMAGE_TEST_STORES must be a positive number" >&2; exit 64; }
yaml="$root/Samples/fleet/indexed-job.yaml"
log() { echo "[image-test] $*" >&2; }
skip() { echo "[image-test] skipped: $*"; exit 0; }
failures=0
fail() { echo "[image-test] FAILED: $*" >&2; failures=$((failures + 1)); }
started=$(date +%s)

# Can this machine run a container? A probe image of busybox alone, in the same private storage.
[[ $(id -u) == 0 ]] || skip "not root (podman runs the containers as root here)"
command -v podman >/dev/null || skip "podman is not installed (apt-get install podman runc)"
# scripts/image.sh runs podman with runc, not with the crun podman installs (crun fails on machines like the CI's).
command -v runc >/dev/null || skip "runc is not installed (apt-get install runc: podman runs containers with it here)"
[[ -x /bin/busybox ]] || skip "no /bin/busybox for the probe container (scripts/setup.sh installs busybox-static)"
probe="$root/.build-image/oci/probe"
rm -rf "$probe" && mkdir -p "$probe/rootfs/bin"
cp /bin/busybox "$probe/rootfs/bin/busybox"
printf 'FROM scratch\nCOPY rootfs/ /\nENTRYPOINT ["/bin/busybox"]\n' > "$probe/Containerfile"
if ! scripts/image.sh podman build --quiet --tag docconvert-probe "$probe" > "$probe/log" 2>&1 \
    || ! scripts/image.sh podman run --rm --network none docconvert-probe true >> "$probe/log" 2>&1; then
    reason=$(grep -v '^$' "$probe/log" | tail -1)
    scripts/image.sh podman rmi docconvert-probe > /dev/null 2>&1 || true   # only tidies the private storage
    rm -rf "$probe"
    skip "podman cannot run a container here: $reason"
fi
scripts/image.sh podman rmi docconvert-probe > /dev/null 2>&1 || true   # only tidies the private storage
rm -rf "$probe"

# Every other tool of the run, before the release build (about 5 minutes): a missing one stops it here, not after.
scripts/image.sh --check jq python3 || exit 69
# PyYAML, to read what the Job gives each pod from the YAML (the venv scripts/fleet-slurm.sh makes has it).
python=python3
if ! python3 -c 'import yaml' 2>/dev/null; then
    venv="$root/.build-fleet/venv"
    if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import yaml' 2>/dev/null; then
        log "installing kubernetes-validate (and PyYAML) from PyPI into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q kubernetes-validate >&2
    fi
    python="$venv/bin/python"
fi

# The release binary, built once: the image holds it, and the host runs it to plan, merge and verify.
if [[ -n ${DOCCONVERT_IMAGE_BINARY:-} ]]; then
    BIN=$(realpath "$DOCCONVERT_IMAGE_BINARY")
else
    log "building docconvert (release, --static-swift-stdlib, into .build-image)"
    swift build -c release --product docconvert --static-swift-stdlib --scratch-path .build-image >&2
    BIN="$(swift build -c release --scratch-path .build-image --show-bin-path)/docconvert"
fi
[[ -x $BIN ]] || { echo "no docconvert at $BIN" >&2; exit 66; }
VERSION=$("$BIN" --version)

WORK=$(mktemp -d /tmp/image-test.XXXXXX)
cleanup() {
    local status=$?
    if [[ ${IMAGE_TEST_KEEP:-0} == 1 || $status != 0 ]]; then log "work folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

log "building the image"
DOCCONVERT_IMAGE_BINARY=$BIN scripts/image.sh --oci-archive "$WORK/docconvert.oci.tar" > "$WORK/image.log" 2>&1 \
    || { cat "$WORK/image.log" >&2; echo "[image-test] scripts/image.sh failed" >&2; exit 1; }
grep '^\[image\] docconvert:' "$WORK/image.log" >&2
[[ $(tar -xOf "$WORK/docconvert.oci.tar" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]') \
    == "localhost/docconvert:$VERSION" ]] || fail "the OCI archive does not name localhost/docconvert:$VERSION"
rm "$WORK/docconvert.oci.tar"
[[ $(scripts/image.sh podman run --rm --network none "docconvert:$VERSION" --version 2>&1) == "$VERSION" ]] \
    || fail "the image's docconvert does not report $VERSION"

# What the Job gives each pod, read from the YAML.
"$python" - "$yaml" > "$WORK/pod.json" <<'EOF'
import json, sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
container = job["spec"]["template"]["spec"]["containers"][0]
print(json.dumps({"image": container["image"], "command": container["command"], "args": container.get("args", []),
                  "env": {e["name"]: e["value"] for e in container.get("env", [])},
                  "mountPath": container["volumeMounts"][0]["mountPath"],
                  "memory": container.get("resources", {}).get("limits", {}).get("memory"),
                  "completions": job["spec"]["completions"]}))
EOF
IMAGE=$(jq -r .image "$WORK/pod.json")
COMPLETIONS=$(jq .completions "$WORK/pod.json")
MOUNT=$(jq -r .mountPath "$WORK/pod.json")
[[ $IMAGE == */docconvert:"$VERSION" ]] || fail "the Job runs $IMAGE, the image built is docconvert:$VERSION"
# Kubernetes' binary suffixes (Mi, Gi) are podman's (m, g: powers of 1024).
MEMORY=$(jq -r '.memory // "" | sub("Mi$"; "m") | sub("Gi$"; "g")' "$WORK/pod.json")
run_options=(--rm --network none --pull never --volume "$WORK/tree:$MOUNT" --entrypoint "$(jq -c .command "$WORK/pod.json")")
[[ -n $MEMORY ]] && run_options+=(--memory "$MEMORY")
while IFS= read -r variable; do run_options+=(--env "$variable"); done \
    < <(jq -r '.env | to_entries[] | "\(.key)=\(.value)"' "$WORK/pod.json")
mapfile -t args < <(jq -r '.args[]' "$WORK/pod.json")
# The Job's image name, so that the pod runs what the YAML names.
scripts/image.sh podman tag "docconvert:$VERSION" "$IMAGE"

log "making a tree of $STORES generated stores and the samples"
python3 scripts/fleet/tree.py make "$WORK/tree" --stores "$STORES" --samples Samples/stores --no-corrupt > "$WORK/manifest.json"
STORE_COUNT=$(jq '[.items[] | select(.outcome == "converted")] | length' "$WORK/manifest.json")
ITEMS=$(jq '.items | length' "$WORK/manifest.json")

# One pod: the Job's container for one completion index. Its output goes to pod-INDEX.log.
run_pod() {
    local index=$1 status=0 start
    start=$(date +%s%N)
    scripts/image.sh podman run "${run_options[@]}" --env "JOB_COMPLETION_INDEX=$index" "$IMAGE" "${args[@]}" \
        > "$WORK/pod-$index.log" 2>&1 || status=$?
    [[ $status == 0 ]] || fail "pod $index exited $status: $(tail -3 "$WORK/pod-$index.log")"
    log "pod $index of $COMPLETIONS: exit $status in $(( ($(date +%s%N) - start) / 1000000 )) ms"
}

# Index 0 first, alone: its share, nothing else.
"$BIN" batch "$WORK/tree" --dry-run --shard "0/$COMPLETIONS" --json 2>/dev/null \
    | jq '[.items[].source] | sort' > "$WORK/share-0.json"
run_pod 0
report="$WORK/tree/.docconvert-reports/shard-0.json"
if [[ ! -f $report ]]; then
    fail "pod 0 wrote no report at $MOUNT/.docconvert-reports/shard-0.json"
else
    jq -e --argjson count "$COMPLETIONS" '.shard == {index: 0, count: $count, origin: "JOB_COMPLETION_INDEX"}' \
        "$report" >/dev/null || fail "pod 0's report is not shard 0/$COMPLETIONS from JOB_COMPLETION_INDEX: $(jq -c .shard "$report")"
    jq -e --slurpfile share "$WORK/share-0.json" '[.items[].source] | sort == $share[0]' "$report" >/dev/null \
        || fail "pod 0 took other items than shard 0/$COMPLETIONS on the host: $(jq -c '[.items[].source]' "$report")"
    jq -e '[.items[].outcome] | all(. == "converted" or . == "not-a-store")' "$report" >/dev/null \
        || fail "pod 0 did not convert every item of its share: $(jq -c .summary.outcomes "$report")"
    bundles=$(find "$WORK/tree" -name '*.mdz' | wc -l)
    converted=$(jq '[.items[] | select(.outcome == "converted")] | length' "$report")
    [[ $bundles == "$converted" ]] || fail "pod 0 converted $converted items, but the tree holds $bundles bundles"
    log "pod 0: $converted of the $STORE_COUNT stores, its share; nothing else converted"
fi

for index in $(seq 1 $((COMPLETIONS - 1))); do run_pod "$index"; done

status=0
"$BIN" merge-reports "$WORK/tree/.docconvert-reports" "$COMPLETIONS" --json > "$WORK/merged.json" 2> "$WORK/merged.err" || status=$?
[[ $status == 0 ]] || fail "merge-reports exited $status (0: every shard reported, nothing failed): $(cat "$WORK/merged.err")"
python3 scripts/fleet/tree.py check "$WORK/tree" "$WORK/manifest.json" "$WORK/merged.json" --converted "$STORE_COUNT" \
    || fail "the tree does not match its manifest"
verified=0
while IFS= read -r -d '' bundle; do
    if "$BIN" verify "$bundle" > "$WORK/verify.log" 2>&1; then
        verified=$((verified + 1))
    else
        fail "docconvert verify $bundle: $(tail -1 "$WORK/verify.log")"
    fi
done < <(find "$WORK/tree" -name '*.mdz' -print0)
[[ $verified == "$STORE_COUNT" ]] || fail "$verified bundles verify, expected $STORE_COUNT"
scripts/image.sh podman rmi "$IMAGE" > /dev/null   # the tag only; docconvert:VERSION stays

elapsed=$(( $(date +%s) - started ))
if ((failures > 0)); then
    log "$failures check(s) failed in ${elapsed}s"
    exit 1
fi
log "passed in ${elapsed}s: $COMPLETIONS pods of $IMAGE converted the $STORE_COUNT stores of $ITEMS items, each in its shard; every bundle verifies"
