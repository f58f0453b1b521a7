#!/usr/bin/env bash
# The crash checker checked (docs/RELIABILITY.md, "The checker checked"): plants durability bugs in a copy of the
# sources one at a time, runs the smallest crash-state check that covers each (Tests/ManagedDocumentTests/Saving/
# CrashStateTests.swift), and prints a table: every mutant must be caught, with the violation it was caught by. The
# unchanged sources run first and must pass every check (a checker that fails everything catches nothing).
#
#   scripts/crash-mutants.sh [MUTANT ...]     default: every mutant; --list names them
#
# Environment: MUTANTS_DIR (default .build-mutants) holds the copy and its build folder, kept between runs so that
# each mutant rebuilds only what it changes (about two minutes each; the first build about ten). CRASH_STATES (default
# 40) states are sampled per check, as in CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The mutants: scripts/crash-mutants.py (name, file, the line as it is and as the mutant has it, the check).
mutants_py="$root/scripts/crash-mutants.py"  # read once, at the start
if [[ ${1:-} == --list ]]; then
    python3 "$mutants_py" list | while IFS='|' read -r name file check modes; do echo "$name  ($file; $check${modes:+ $modes})"; done
    exit 0
fi
wanted=("$@")
mapfile -t mutants < <(python3 "$mutants_py" list)

work=${MUTANTS_DIR:-.build-mutants}
mkdir -p "$work"
work=$(cd "$work" && pwd)
copy=$work/src
log=$work/log
echo "crash-mutants: copying the sources to $copy" >&2
# > The tracked files and the ones not yet committed, as they are in the working tree.
# > Copied with their times, over the last run's copy, so that the build folder's products stay valid.
# > The mutants' files as they are now are kept apart (orig/): each mutant starts from them, whatever is edited
# > in the working tree meanwhile.
mkdir -p "$copy" "$work/orig"
git -C "$root" ls-files -z --cached --others --exclude-standard \
    | (cd "$root" && xargs -0 cp -p --parents -t "$copy" 2>/dev/null || true)
python3 "$root/scripts/crash-mutants.py" list | cut -d'|' -f2 | sort -u \
    | (cd "$root" && xargs cp -p --parents -t "$work/orig")

# Puts the copy of FILE back as it is, then plants mutant NAME in it (none when NAME is empty).
apply() {
    local name=$1 file=$2
    cp "$work/orig/$file" "$copy/$file"
    [[ -z $name ]] && return 0
    python3 "$mutants_py" apply "$name" "$copy/$file"
}

# Builds the copy and runs one check; prints "states|violations|first violation|outcome".
run_check() {
    local filter=$1 modes=$2
    if ! (cd "$copy" && swift build --build-tests --scratch-path "$work/build" >"$log" 2>&1); then
        echo "0|0|build failed (see $log)|build failed"
        return
    fi
    (cd "$copy" && CRASH_STATES=${CRASH_STATES:-40} CRASH_JOURNAL_MODES=$modes \
        swift test --skip-build --scratch-path "$work/build" --filter "$filter" >"$log" 2>&1) || true
    python3 - "$log" <<'EOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
states = violations = 0
for m in re.finditer(r"^crash-states: .*?: (\d+) of \d+ states checked, (\d+) violations", text, re.M):
    states += int(m.group(1)); violations += int(m.group(2))
first = ""
m = re.search(r"after \d+: [^\"\]]*?: ([^\"\]]+)", text)
if m: first = m.group(0)[:150].replace("|", "/")
passed = re.search(r"Test run with .* passed", text) is not None
print(f"{states}|{violations}|{first}|{'passed' if passed else 'failed'}")
EOF
}

printf '| mutant | check | states checked | violations | first violation | caught |\n|---|---|---|---|---|---|\n'
status=0
baseline_checks=()
for mutant in "${mutants[@]}"; do
    IFS='|' read -r name file check modes <<<"$mutant"
    ((${#wanted[@]})) && [[ ! " ${wanted[*]} " =~ " $name " ]] && continue
    key="$check|$modes"
    [[ " ${baseline_checks[*]:-} " =~ " $key " ]] || baseline_checks+=("$key")
done
# > The unchanged sources first: every check the mutants use must pass on them.
for key in "${baseline_checks[@]}"; do
    IFS='|' read -r check modes <<<"$key"
    for mutant in "${mutants[@]}"; do IFS='|' read -r _ file _ _ <<<"$mutant"; apply "" "$file"; done
    echo "crash-mutants: baseline: $check ${modes}" >&2
    IFS='|' read -r states violations first outcome <<<"$(run_check "$check" "$modes")"
    verdict="passes (as it must)"
    [[ $outcome == passed && $violations == 0 ]] || { verdict="**fails unmutated**"; status=1; }
    printf '| none (baseline) | `%s` %s | %s | %s | %s | %s |\n' "$check" "$modes" "$states" "$violations" "${first:--}" "$verdict"
done
for mutant in "${mutants[@]}"; do
    IFS='|' read -r name file check modes <<<"$mutant"
    ((${#wanted[@]})) && [[ ! " ${wanted[*]} " =~ " $name " ]] && continue
    echo "crash-mutants: $name" >&2
    if ! message=$(apply "$name" "$file" 2>&1); then
        printf '| %s | - | - | - | %s | **does not apply** |\n' "$name" "$message"
        status=1
        continue
    fi
    IFS='|' read -r states violations first outcome <<<"$(run_check "$check" "$modes")"
    verdict="caught"
    if [[ $outcome == "build failed" ]]; then verdict="**does not build**"; status=1
    elif [[ $outcome == passed || $violations == 0 ]]; then verdict="**missed**"; status=1; fi
    printf '| %s | `%s` %s | %s | %s | %s | %s |\n' "$name" "$check" "$modes" "$states" "$violations" "${first:--}" "$verdict"
    apply "" "$file"
done
exit $status
