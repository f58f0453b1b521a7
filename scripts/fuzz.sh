#!/usr/bin/env bash
# Builds the libFuzzer targets in Fuzz/ (AddressSanitizer on) and runs one, or all, over its seed corpus.
#
#   scripts/fuzz.sh TARGET SECONDS     TARGET: bundle, metadata, inflate, legacy, document, fleet, or all (each in turn)
#   scripts/fuzz.sh TARGET 0           only replays the seed corpus (what CI does first)
#   FUZZ_BUILD=smoke scripts/fuzz.sh all 15
#                                      CI's smoke run: the same targets built without the optimizer (-Onone, and -O0
#                                      for C: BoringSSL's 360 files), in .build-fuzz/smoke. The cold build took 215 s
#                                      instead of 328-472 s here; inputs whose work is in libarchive, zlib and ISA-L
#                                      (built by Debian) run at about the same rate, the metadata decoder's at a fifth
#                                      (docs/RELIABILITY.md). Long runs use the default, optimized build.
#
# New inputs go to .build-fuzz/corpus/TARGET (kept between runs, never committed); a crash, leak, timeout or
# out-of-memory input goes to .build-fuzz/artifacts/TARGET and the script exits non-zero. The last line per target
# is `fuzz TARGET: N runs in S s, C coverage points, F findings`. Fuzz/make-seeds.sh remakes the committed seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh bundle|metadata|inflate|legacy|document|fleet|all SECONDS}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
targets=(bundle metadata inflate legacy document fleet)
[ "$target" = all ] || targets=("$target")
for name in "${targets[@]}"; do
    [ -d "Fuzz/Corpus/$name" ] || { echo "fuzz: no target '$name' (bundle, metadata, inflate, legacy, document, fleet, all)" >&2; exit 64; }
done

work=$PWD/.build-fuzz
build=$work/build
flags=()
case "${FUZZ_BUILD:-}" in
    "") ;;
    smoke) build=$work/smoke; flags=(-Xcc -O0 -Xswiftc -Onone) ;;
    *) echo "fuzz: FUZZ_BUILD is smoke or unset, not '$FUZZ_BUILD'" >&2; exit 64 ;;
esac
mkdir -p "$work"
# > ld.gold fails on these links (an internal error while it reports one); lld links them.
toolset=$work/toolset.json
printf '{ "schemaVersion": "1.0", "linker": { "path": "%s" } }\n' "$(dirname "$(command -v swiftc)")/ld.lld" > "$toolset"
echo "fuzz: building ${targets[*]} with -sanitize=fuzzer,address (the first build takes a few minutes)"
for name in "${targets[@]}"; do
    # > A build that fails must not leave the previous binary to be run as if it were this source's.
    rm -f "$build/release/fuzz-$name"
    for attempt in 1 2; do
        swift build --package-path Fuzz --scratch-path "$build" -c release -Xswiftc -sanitize=fuzzer,address \
            -Xswiftc -enable-testing "${flags[@]}" --toolset "$toolset" --product "fuzz-$name" > "$work/build.log" \
            2>&1 || true
        grep -E "error|warning: unre|Compiling fuzz|Build of" "$work/build.log" || true
        # > SwiftPM keeps the build plan of the main package (a path dependency here) when one of its source files
        # > moved, and then misses the old path: the plan is made again, once.
        grep -q "because of missing inputs" "$work/build.log" || break
        echo "fuzz: a source file of the package moved since the last build; planning the build again" >&2
        rm -f "$build/release.yaml" "$build/build.db" "$build/x86_64-unknown-linux-gnu/release/description.json"
    done
    [ -x "$build/release/fuzz-$name" ] || { echo "fuzz: fuzz-$name did not build" >&2; exit 1; }
done

status=0
for name in "${targets[@]}"; do
    mkdir -p "$work/corpus/$name" "$work/artifacts/$name"
    log=$work/$name.log
    args=(-rss_limit_mb=2048 -timeout=20 -print_final_stats=1 "-artifact_prefix=$work/artifacts/$name/")
    if [ "$seconds" = 0 ]; then args+=(-runs=0); else args+=("-max_total_time=$seconds"); fi
    started=$SECONDS
    set +e
    SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/Fuzz/lsan.supp "$build/release/fuzz-$name" "${args[@]}" \
        "$work/corpus/$name" "Fuzz/Corpus/$name" > "$log" 2>&1
    code=$?
    set -e
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    took=$((SECONDS - started))
    coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
    # > A slow unit (over 10 s) is noted, not a finding: on a shared machine it measures the load. Timeouts (20 s),
    # > crashes, leaks and out-of-memory inputs are findings.
    findings=$(find "$work/artifacts/$name" -type f ! -name 'slow-unit-*' | wc -l)
    echo "fuzz $name: $runs runs in ${took} s, $coverage coverage points, $findings findings"
    if [ "$code" -ne 0 ] || [ "$findings" -ne 0 ]; then
        status=1
        grep -E "ERROR|Fatal error|SUMMARY|Test unit written" "$log" | head -5 >&2
        echo "fuzz $name: see $log and $work/artifacts/$name" >&2
    fi
done
exit $status
