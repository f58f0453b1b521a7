#!/usr/bin/env bash
# Merges the shard reports of `docconvert batch` into one report on stdout, and exits non-zero when a shard is
# missing, was interrupted, or had failed or busy items.
#
#   Samples/fleet/merge-reports.sh REPORTS_FOLDER [EXPECTED_SHARDS] > report.json
#
# Every item belongs to exactly one shard, so the items concatenate. When workers overlapped (a shard run twice), an
# item may be in two reports, once converted and once skipped-already-done: the converted one is kept.
set -euo pipefail
folder=${1:?usage: merge-reports.sh REPORTS_FOLDER [EXPECTED_SHARDS]}
expected=${2:-}
command -v jq >/dev/null || { echo "merge-reports.sh needs jq (apt-get install jq)" >&2; exit 69; }
shopt -s nullglob
reports=("$folder"/shard-*.json)
(( ${#reports[@]} > 0 )) || { echo "no shard-*.json in $folder" >&2; exit 66; }
jq -s '
  (map(.items[]) | group_by(.source)
     | map(if any(.outcome == "converted") then map(select(.outcome == "converted"))[0] else .[0] end)) as $items
  | {root: .[0].root, shards: map(.shard), startedAt: (map(.startedAt) | min), finishedAt: (map(.finishedAt) | max),
     items: $items,
     summary: {items: ($items | length),
               outcomes: ($items | group_by(.outcome) | map({key: .[0].outcome, value: length}) | from_entries),
               bytesIn: ($items | map(.bytesIn) | add), bytesOut: ($items | map(.bytesOut) | add),
               interrupted: (map(.summary.interrupted) | any)}}' "${reports[@]}" > "$folder/.merged.json"
count=$(jq '.shards | length' "$folder/.merged.json")
status=0
if [[ -n $expected && $count != "$expected" ]]; then
    echo "only $count of $expected shard reports are in $folder" >&2
    status=1
fi
jq -e '.summary.interrupted | not' "$folder/.merged.json" >/dev/null || { echo "a shard was interrupted: run it again" >&2; status=1; }
jq -e '(.summary.outcomes.failed // 0) + (.summary.outcomes.busy // 0) == 0' "$folder/.merged.json" >/dev/null \
    || { echo "some items failed or were busy: see .items[] | select(.outcome == \"failed\" or .outcome == \"busy\")" >&2; status=1; }
cat "$folder/.merged.json"
rm -f "$folder/.merged.json"
exit $status
