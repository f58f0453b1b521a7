#!/usr/bin/env bash
# Runs the whole test suite under a sanitizer, in a build folder of its own (.build-thread, .build-address).
#
#   scripts/sanitize.sh thread      ThreadSanitizer: data races (parallel deflate and inflate, CPU turns, batch,
#                                   document locks and state)
#   scripts/sanitize.sh address     AddressSanitizer: memory errors (the C shim, libarchive callbacks, buffers)
#
# Extra arguments go to `swift test` (for example --filter DocumentTrustTests). The long soak of the readers
# beside saves is shortened (DOCUMENT_SOAK_SECONDS, default 15 here). The last line says whether a report was found.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh thread|address [swift test arguments]}
shift
case "$kind" in thread|address) ;; *) echo "sanitize: 'thread' or 'address', not '$kind'" >&2; exit 64 ;; esac
log=.build-$kind.log
export DOCUMENT_SOAK_SECONDS=${DOCUMENT_SOAK_SECONDS:-15}
# > Tests that measure a child's peak memory skip that one check: the sanitizer's shadow memory and quarantine are
# > not the program's.
export MANAGED_DOCUMENT_SANITIZER=$kind
export SWIFT_BACKTRACE=enable=no
# > Foundation leaks the error it makes for a property list it refuses (Fuzz/lsan.supp); not ours to fix.
export LSAN_OPTIONS="suppressions=$PWD/Fuzz/lsan.supp"
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1"
set +e
swift test --sanitize="$kind" --scratch-path ".build-$kind" "$@" > "$log" 2>&1
status=$?
set -e
grep -E "Test run with|Executed .* tests" "$log" | tail -2
reports=$(grep -c -E "^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer))" "$log" || true)
echo "sanitize $kind: exit $status, $reports sanitizer reports (full output: $log)"
[ "$status" -eq 0 ] && [ "$reports" -eq 0 ]
