#!/usr/bin/env bash
# Runs the whole test suite under a sanitizer, in a build folder of its own (.build-thread, .build-address).
#
#   scripts/sanitize.sh thread      ThreadSanitizer: data races (parallel deflate and inflate, CPU turns, batch,
#                                   document locks and state)
#   scripts/sanitize.sh address     AddressSanitizer: memory errors (the C shim, libarchive callbacks, buffers)
#
# Extra arguments go to `swift test` (for example --filter DocumentTrustTests). The long soak of the readers
# beside saves runs DOCUMENT_SOAK_SECONDS (60 here; 20 in a plain run: with 15, a sanitized run of many suites made
# no save in it).
# The last line says whether a report was found.
#
# Every process writes its reports to a file of its own in .build-KIND.reports/ (log_path): the test process and the
# programs the tests start (docconvert, the sample apps), whose stderr the tests read and would otherwise keep to
# themselves. A ThreadSanitizer report does not change a program's exit status (exitcode=0), so a test that checks
# one still checks the program; the reports are counted here.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh thread|address [swift test arguments]}
shift
case "$kind" in thread|address) ;; *) echo "sanitize: 'thread' or 'address', not '$kind'" >&2; exit 64 ;; esac
log=.build-$kind.log
export DOCUMENT_SOAK_SECONDS=${DOCUMENT_SOAK_SECONDS:-60}
# > Tests that measure a child's peak memory skip that one check: the sanitizer's shadow memory and quarantine are
# > not the program's.
export MANAGED_DOCUMENT_SANITIZER=$kind
export SWIFT_BACKTRACE=enable=no
# > Foundation leaks the error it makes for a property list it refuses (Fuzz/lsan.supp); not ours to fix.
export LSAN_OPTIONS="suppressions=$PWD/Fuzz/lsan.supp"
reports_dir=$PWD/.build-$kind.reports
rm -rf "$reports_dir"
mkdir -p "$reports_dir"
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 exitcode=0 log_path=$reports_dir/report"
export ASAN_OPTIONS="log_path=$reports_dir/report"
set +e
swift test --sanitize="$kind" --scratch-path ".build-$kind" "$@" > "$log" 2>&1
status=$?
set -e
grep -E "Test run with|Executed .* tests" "$log" | tail -2
pattern="^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer))"
reports=$(cat "$log" "$reports_dir"/report.* 2>/dev/null | grep -c -E "$pattern" || true)
processes=$( (grep -l -E "$pattern" "$reports_dir"/report.* 2>/dev/null || true) | wc -l)
echo "sanitize $kind: exit $status, $reports sanitizer reports from $processes processes (full output: $log, $reports_dir/)"
[ "$status" -eq 0 ] && [ "$reports" -eq 0 ]
