#!/usr/bin/env bash
# Merges the shard reports of `docconvert batch` into one report on stdout.
#
#   Samples/fleet/merge-reports.sh REPORTS_FOLDER [EXPECTED_SHARDS] > report.json
#
# Reads every report in REPORTS_FOLDER (the *.json files that start with {"docconvertBatchReport":, and any
# shard-*.json). Each report says which shard K of N it is, so the merger knows N without being told and names the
# shards that have no report; EXPECTED_SHARDS, when given, must equal N. Every item belongs to exactly one shard;
# an item found in two reports (two report files for one shard, e.g. an array submitted as 0-15 and later as 1-16)
# is listed under "duplicates": its converted entry is kept, else the entry of the report that finished last.
#
# Exit status: 0 every shard reported, nothing failed, busy or interrupted; 1 the tree is not finished (a shard is
# missing or was interrupted, or items failed or were busy: rerun those shards); 65 the reports disagree (their
# shard counts differ, EXPECTED_SHARDS differs, or an item was converted twice): nothing is printed, a person must
# look; 66 no report in the folder; 69 jq is missing. Messages go to stderr.
set -euo pipefail
folder=${1:?usage: merge-reports.sh REPORTS_FOLDER [EXPECTED_SHARDS]}
expected=${2:-}
command -v jq >/dev/null || { echo "merge-reports.sh needs jq (apt-get install jq)" >&2; exit 69; }
[[ -d $folder ]] || { echo "$folder is not a folder" >&2; exit 66; }
[[ -z $expected || $expected =~ ^[1-9][0-9]*$ ]] || { echo "EXPECTED_SHARDS must be a positive number (got '$expected')" >&2; exit 64; }

signature='{"docconvertBatchReport":'
reports=()
shopt -s nullglob
for file in "$folder"/*.json; do
    if [[ $(head -c ${#signature} "$file") == "$signature" || $(basename "$file") == shard-*.json ]]; then
        reports+=("$file")
    fi
done
(( ${#reports[@]} > 0 )) || { echo "no batch report in $folder" >&2; exit 66; }

# Written outside the folder: a file in it could be walked by a worker still running.
merged=$(mktemp "${TMPDIR:-/tmp}/merge-reports.XXXXXX")
trap 'rm -f "$merged"' EXIT
jq -n --arg expected "$expected" '
  [inputs | . + {file: (input_filename | split("/") | last)}] as $reports
  | ($reports | map(.shard.count) | unique) as $counts
  | ($reports | map(.items[] as $item | $item + {report: .file, reportFinishedAt: .finishedAt})
     | group_by(.source)) as $groups
  | {docconvertBatchReport: 2, merged: true,
     root: ($reports | max_by(.finishedAt) | .root),
     shardCount: (if ($counts | length) == 1 then $counts[0] else null end),
     shardCounts: $counts,
     shards: ($reports | map(.shard.index) | unique),
     reports: ($reports | map({file, shard: "\(.shard.index)/\(.shard.count)", origin: .shard.origin,
                              attempts: ((.attempts // [1]) | length), finishedAt, interrupted: .summary.interrupted})),
     startedAt: ($reports | map(.startedAt) | min), finishedAt: ($reports | map(.finishedAt) | max),
     items: ($groups | map(
       (map(select(.outcome == "converted")) | first) // max_by(.reportFinishedAt)
       | del(.report, .reportFinishedAt))),
     duplicates: ($groups | map(select(length > 1)
       | {source: .[0].source, reports: map(.report), outcomes: map(.outcome)})),
     convertedTwice: ($groups | map(select(map(select(.outcome == "converted")) | length > 1) | .[0].source)),
     interrupted: ($reports | map(.summary.interrupted) | any)}
  | .missingShards = (if .shardCount then [range(0; .shardCount)] - .shards else [] end)
  | .summary = {items: (.items | length),
                outcomes: (.items | group_by(.outcome) | map({key: .[0].outcome, value: length}) | from_entries),
                bytesIn: (.items | map(.bytesIn) | add // 0), bytesOut: (.items | map(.bytesOut) | add // 0),
                interrupted: .interrupted}
  | del(.interrupted)' "${reports[@]}" > "$merged"

if [[ $(jq '.shardCounts | length' "$merged") != 1 ]]; then
    echo "the reports disagree on the number of shards:" >&2
    jq -r '.reports[] | "  \(.file): shard \(.shard) (from \(.origin))"' "$merged" >&2
    echo "a task rerun alone must be given the original array's size (--shard-count); remove the stray reports and rerun" >&2
    exit 65
fi
count=$(jq '.shardCount' "$merged")
if [[ -n $expected && $count != "$expected" ]]; then
    echo "the reports are shards of $count, not of $expected" >&2
    exit 65
fi
if [[ $(jq '.convertedTwice | length' "$merged") != 0 ]]; then
    echo "items converted twice (two workers outside the document locks?):" >&2
    jq -r '.convertedTwice[] | "  \(.)"' "$merged" >&2
    exit 65
fi
status=0
missing=$(jq -r '.missingShards | map(tostring) | join(", ")' "$merged")
if [[ -n $missing ]]; then
    echo "no report from shard(s) $missing of $count: run them (e.g. sbatch --array=$missing …)" >&2
    status=1
fi
if [[ $(jq '.duplicates | length' "$merged") != 0 ]]; then
    echo "$(jq '.duplicates | length' "$merged") item(s) are in two reports (see .duplicates); the converted or latest entry is kept" >&2
fi
jq -e '.summary.interrupted | not' "$merged" >/dev/null || { echo "a shard was interrupted: run it again" >&2; status=1; }
jq -e '(.summary.outcomes.failed // 0) + (.summary.outcomes.busy // 0) == 0' "$merged" >/dev/null \
    || { echo "some items failed or were busy: see .items[] | select(.outcome == \"failed\" or .outcome == \"busy\")" >&2; status=1; }
cat "$merged"
exit $status
