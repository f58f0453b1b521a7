#!/usr/bin/env bash
# Merges the shard reports of `docconvert batch` into one report on stdout.
#
#   Samples/fleet/merge-reports.sh REPORTS_FOLDER [EXPECTED_SHARDS] > report.json
#
# A thin wrapper, kept for the job scripts that call it: the merge is `docconvert merge-reports REPORTS_FOLDER
# [EXPECTED_SHARDS] --json` (streaming, memory flat in the number of items; its --help gives the rules). Exit status:
# 0 every shard reported, nothing failed, busy, interrupted or killed; 1 the tree is not finished (a shard is missing,
# was interrupted or killed, or items failed or were busy: rerun those shards); 65 the reports disagree (their shard
# counts differ, EXPECTED_SHARDS differs, or an item was converted twice): stdout holds {"error": …} instead of a
# report, a person must look; 66 no report in the folder; 69 docconvert is missing. Messages go to stderr.
set -euo pipefail
DOCCONVERT=${DOCCONVERT:-docconvert}
command -v "$DOCCONVERT" >/dev/null \
    || { echo "merge-reports.sh needs docconvert on PATH (or DOCCONVERT=/path/to/docconvert)" >&2; exit 69; }
(( $# >= 1 && $# <= 2 )) || { echo "usage: merge-reports.sh REPORTS_FOLDER [EXPECTED_SHARDS]" >&2; exit 64; }
exec "$DOCCONVERT" merge-reports "$@" --json
