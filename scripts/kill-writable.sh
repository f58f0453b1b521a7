#!/usr/bin/env bash
# Kills a writer of a document served from its bundle (FORMAT.md 16.2) with SIGKILL at random moments, hundreds of
# times, while it commits and saves often; after each kill the bundle must verify and be a whole save (old or new),
# and a recovering open must have every committed entry (Tests/DocumentAppTests/Saving/WritableInPlaceTests.swift,
# "SIGKILL at random moments ..."; the test runs a dozen trials by default).
#
#   scripts/kill-writable.sh [TRIALS] [SEED]     default: 300 trials, seed 20261126
#
# SCRATCH (default .build) is the build folder swift test uses. A failure names the trial, the seed and the
# moment of the kill; rerun with the same seed to replay the same moments.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-300}
seed=${2:-20261126}
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "kill-writable: TRIALS must be a positive integer" >&2; exit 64; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "kill-writable: SEED must be a non-negative integer" >&2; exit 64; }
echo "kill-writable: $trials trials, seed $seed" >&2
KILL_WRITABLE_TRIALS=$trials KILL_WRITABLE_SEED=$seed \
    swift test --scratch-path "${SCRATCH:-.build}" --filter "WritableInPlaceTests/killedDuringSaves"
