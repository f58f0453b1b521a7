# Shared by the bench-*.sh scripts (sourced, not run): the log line, the work folder removed on exit, and dropping
# the page cache between runs for cold-cache timings.
#
#   bench_work_folder NAME   sets WORK to "$DIR/NAME" (made empty), and removes it on exit unless KEEP=1
#   bench_page_cache         sets DROP=1 when the page cache can be dropped (root, BENCH_DROP_CACHES not 0)
#   drop_caches              drops it (when DROP=1)
#
# The caller sets DIR (the benchmark folder) and KEEP before calling them.

log() { echo "[bench] $*" >&2; }

bench_work_folder() {
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    WORK="$DIR/$1"  # everything the benchmark writes, removed at the end unless BENCH_KEEP=1
    rm -rf "$WORK"
    mkdir -p "$WORK"
    trap bench_cleanup EXIT
}

bench_cleanup() {
    if [[ $KEEP == 1 ]]; then
        log "kept $WORK (BENCH_KEEP=1)"
    else
        rm -rf "$WORK"
        rmdir "$DIR" 2>/dev/null || true
    fi
}

bench_page_cache() {
    DROP=0
    if [[ ${BENCH_DROP_CACHES:-1} != 0 ]] && (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
        DROP=1
    fi
}

drop_caches() {
    if [[ $DROP == 1 ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
}
