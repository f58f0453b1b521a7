#!/usr/bin/env bash
# Power cuts on a real power-cut file system: LazyFS (../shared/tools/lazyfs, a FUSE file system that keeps unflushed
# writes in its own cache and drops them at a simulated power cut). For each path, each trial starts a writer on the
# mount, freezes it (SIGSTOP) at a random moment, cuts the power (`lazyfs.sh cut`: every byte not yet flushed is
# gone), kills it (SIGKILL), unmounts and mounts again (a reboot: the cache is LazyFS's memory), and checks:
#
#   app             notes-app DOC journal --rows 400 --save-every 9 --echo, its working copies where the library puts
#                   them by default ($XDG_STATE_HOME/ManagedDocument) on the mount too:
#                   the bundle verifies; it holds every entry of the last "saved N" (read-only); an open with
#                   .recover (notes-app DOC sql --recover) holds every entry of the last "committed N", whole
#   convert-backup  docconvert convert STORE --legacy backup of minimalTime.sqlite with its -wal and -shm
#   convert-delete  the same with --legacy delete
#   convert-large   docconvert convert STORE --legacy delete of a 16 MiB store whose last commits are in its -wal (made
#                   here with python3's sqlite3), so that cuts fall inside the writing of the bundle
#   batch           docconvert batch TREE --legacy delete --report (four sample stores, one with a hot journal,
#                   one with a -wal); then the same command again must finish
#   migrate         docconvert migrate FOLDER (five bundles, two migrations); then the same command again must finish
#
# For the converting paths: a bundle at its name verifies, and a legacy store is never gone while its bundle is not
# whole: either its files are still somewhere under the trial's folder (in place or in docconvert-backup/) with every
# row, or its bundle verifies with every row (row digests through sqlite3 on copies). For migrate: every bundle
# verifies with its rows, and each migration is in it wholly or not at all.
#
#   scripts/power-cut.sh [TRIALS]        TRIALS per path (default 5; TRIALS=N in the environment too)
#
# POWER_CUT_PATHS (default: all five above), POWER_CUT_SEED (default 20261127), BIN (the folder holding docconvert
# and notes-app; default .build/debug: run `swift build` first), LAZYFS_TOOLS (default ../shared/tools, beside this
# package), LAZYFS_CACHE (default .build-lazyfs: LazyFS is built there once, by scripts/setup.sh or by the first
# run, about 35 s). Needs root and /dev/fuse.
#
# Exit status: 0 no violation; 1 a violation (each printed, the trial's folder kept under LAZYFS_CACHE/failed);
# 2 a run without a cut did not pass its own checks (the check is wrong); 77 LazyFS cannot be built or mounted here
# (the reason printed): callers skip.
set -eEuo pipefail
trap 'echo "power-cut: stopped: line $LINENO: $BASH_COMMAND exited with $?" >&2' ERR
cd "$(dirname "$0")/.."
package=$(pwd)
trials=${1:-${TRIALS:-5}}
seed=${POWER_CUT_SEED:-20261127}
paths=${POWER_CUT_PATHS:-app convert-backup convert-delete convert-large batch migrate}
bin=$(cd "${BIN:-.build/debug}" 2>/dev/null && pwd) || bin=""
tools=${LAZYFS_TOOLS:-$package/../shared/tools}
cache=${LAZYFS_CACHE:-$package/.build-lazyfs}
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "power-cut: TRIALS must be a positive integer" >&2; exit 64; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "power-cut: POWER_CUT_SEED must be a non-negative integer" >&2; exit 64; }
for path in $paths; do
    case $path in app|convert-backup|convert-delete|convert-large|batch|migrate) ;;
    *) echo "power-cut: unknown path $path (app, convert-backup, convert-delete, convert-large, batch, migrate)" >&2
       exit 64 ;;
    esac
done
skip() { echo "power-cut: skipped: $*" >&2; exit 77; }
[ -n "$bin" ] && [ -x "$bin/docconvert" ] && [ -x "$bin/notes-app" ] \
    || { echo "power-cut: no docconvert and notes-app in ${BIN:-.build/debug}; run swift build first" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || skip "LazyFS needs root (FUSE with allow_other)"
[ -c /dev/fuse ] || skip "no /dev/fuse"
[ -x "$tools/lazyfs.sh" ] && [ -d "$tools/lazyfs" ] || skip "no LazyFS at $tools (lazyfs.sh and lazyfs/)"
command -v sqlite3 >/dev/null || { echo "power-cut: sqlite3 is missing (scripts/setup.sh installs it)" >&2; exit 2; }

# LazyFS is built once into $cache/build (lazyfs.sh builds into BASE/build when it finds no binary there); each run
# mounts its own BASE, whose build/ links to it.
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
if [ ! -x "$cache/build/lazyfs/build/lazyfs" ]; then
    echo "power-cut: building LazyFS into $cache/build (once)" >&2
    started=$SECONDS
    "$tools/lazyfs.sh" mount "$cache" >/dev/null 2>"$cache/setup.err" \
        || skip "LazyFS could not be built or mounted: $(tail -n 3 "$cache/setup.err" | tr '\n' ' ')"
    "$tools/lazyfs.sh" umount "$cache"
    echo "power-cut: LazyFS built in $((SECONDS - started)) s" >&2
fi
mkdir -p "$cache/runs"
base=$(mktemp -d "$cache/runs/run.XXXXXX")
ln -s "$cache/build" "$base/build"
mnt=$base/mnt
work=$base/work          # off the mount: fixtures, outputs, copies being checked
mkdir -p "$work/tmp" "$base/root"
export TMPDIR=$work/tmp  # the checks' own temporary files; writers get one on the mount

lfs_pid() { cat "$base/lazyfs.pid" 2>/dev/null || true; }
unmount() {
    local pid
    pid=$(lfs_pid)
    "$tools/lazyfs.sh" umount "$base" >/dev/null 2>&1 || true
    if mount | grep -q " $mnt "; then umount -l "$mnt" 2>/dev/null || true; fi  # > a LazyFS that died
    if [ -n "$pid" ]; then
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    fi
}
mountfs() {
    "$tools/lazyfs.sh" mount "$base" >/dev/null 2>"$work/mount.err" \
        || { unmount; "$tools/lazyfs.sh" mount "$base" >/dev/null 2>"$work/mount.err"; } \
        || skip "LazyFS did not mount: $(tr '\n' ' ' <"$work/mount.err")"
}
cleanup() {
    unmount
    rm -rf "$base"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A first mount here: a skip, not a failure, when FUSE cannot mount on this machine.
mountfs
unmount

RANDOM=$seed
random_between() {  # LOW HIGH: an integer in [LOW, HIGH]
    echo $(( $1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1) ))
}
now_ms() { date +%s%3N; }

# The rows of a SQLite file's user tables, as one digest: every table's rows (quoted by sqlite3, so blobs count by
# their bytes) sorted and hashed. A copy is read (with the sidecars beside it), so a hot journal is rolled back and a
# -wal read as SQLite would for its app; the files looked at are never changed. Tables named in $2 (a regex) are
# left out. Prints "unreadable" when SQLite cannot read it.
rows_digest() {
    local source=$1 leave_out=${2:-^(managed_document_.*)$} copy
    copy=$(mktemp -d "$work/tmp/digest.XXXXXX")
    local name
    name=$(basename "$source")
    cp "$source" "$copy/$name"
    for suffix in -wal -shm -journal; do
        if [ -f "$source$suffix" ]; then cp "$source$suffix" "$copy/$name$suffix"; fi
    done
    {
        local tables
        tables=$(sqlite3 "$copy/$name" \
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name" 2>/dev/null) \
            || { echo unreadable; rm -rf "$copy"; return; }
        for table in $tables; do
            if [[ $table =~ $leave_out ]]; then continue; fi
            printf '%s %s\n' "$table" \
                "$(sqlite3 -quote "$copy/$name" "SELECT * FROM \"$table\"" 2>&1 | LC_ALL=C sort | sha256sum | cut -c1-16)"
        done
    } | sha256sum | cut -c1-16
    rm -rf "$copy"
}

# The rows of a bundle's store (extracted off the mount), or "unreadable".
bundle_digest() {
    local out
    out=$(mktemp -d "$work/tmp/extract.XXXXXX")
    if "$bin/docconvert" extract "$1" --output "$out/store.sqlite" >/dev/null 2>&1; then
        rows_digest "$out/store.sqlite" "${2:-^(managed_document_.*)$}"
    else
        echo unreadable
    fi
    rm -rf "$out"
}

verifies() { "$bin/docconvert" verify "$1" >/dev/null 2>&1; }

# Runs a writer on the mount in the background: its output goes to $work/out; sets $writer.
start_writer() {
    ( cd "$mnt" && exec env TMPDIR="$mnt/t/tmp" XDG_STATE_HOME="$mnt/t/state" "$@" ) >"$work/out" 2>&1 &
    writer=$!
}

# Freezes the writer after MS milliseconds; sets $frozen (1: it was still running, 0: it had finished).
freeze_after() {
    local ms=$1 state
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    frozen=0
    if kill -STOP "$writer" 2>/dev/null; then
        for _ in $(seq 200); do
            state=$(awk '{ print $3 }' "/proc/$writer/stat" 2>/dev/null || echo gone)
            if [ "$state" = T ]; then frozen=1; break; fi
            if [ "$state" = Z ] || [ "$state" = gone ]; then break; fi
            sleep 0.01
        done
    fi
}

# Freezes the writer 0-20 ms after it printed "committed TARGET" (a save starts then, with --save-every 9).
freeze_in_save() {
    local target=$1
    until grep -q "^committed $target\$" "$work/out"; do
        kill -0 "$writer" 2>/dev/null || break
        sleep 0.005
    done
    local ms
    ms=$(random_between 0 20)
    moment="$ms ms after committed $target"
    freeze_after "$ms"
}

# The power cut: every unflushed byte dropped, the frozen writer killed, then a reboot (unmount, mount). LazyFS itself
# sometimes dies during a trial (a segmentation fault in its write path, seen on migrate's sparse working copies): its
# cache, every unflushed byte, is gone with it, which is a power cut at that moment; the trial is counted as such
# ($lazyfs_died), the writer killed and the checks run as after any cut.
power_cut() {
    lazyfs_died=0
    local pid
    pid=$(lfs_pid)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        lazyfs_died=1
    elif ! timeout 60 "$tools/lazyfs.sh" cut "$base"; then
        if kill -0 "$pid" 2>/dev/null; then echo "power-cut: LazyFS did not clear its cache" >&2; exit 2; fi
        lazyfs_died=1
    fi
    died_note=$(tail -n 1 "$base/lazyfs.log" 2>/dev/null | cut -c1-160 || true)
    kill -KILL "$writer" 2>/dev/null || true
    writer_status=0
    wait "$writer" 2>/dev/null || writer_status=$?
    unmount
    mountfs
}

# A run to its end, without a cut, then a reboot: how long the writer takes, and the checks' own check.
run_whole() {
    local started
    started=$(now_ms)
    start_writer "$@"
    wait "$writer" || { echo "power-cut: the writer failed without a cut: $(tail -n 3 "$work/out")" >&2; exit 2; }
    duration=$(( $(now_ms) - started ))
    unmount
    mountfs
}

# Fresh backing folder for a trial: unmounted, $base/root/t filled by FILL (a function), mounted.
fresh_trial() {
    unmount
    rm -rf "$base/root/t"
    mkdir -p "$base/root/t/tmp"
    "$@"
    mountfs
}

violations_here=()
violation() { violations_here+=("$*"); }

# Keeps a failed trial's backing folder (after the cut) and the writer's output.
keep_failed() {
    local name=$1 kept=$cache/failed/$1
    rm -rf "$kept"
    mkdir -p "$kept"
    cp -a "$base/root/t" "$kept/root"
    cp "$work/out" "$kept/writer-output"
    echo "$kept"
}

# --- app ------------------------------------------------------------------------------------------------------------

app_seed_rows=1500

app_fixture() {
    if [ ! -f "$work/app-seed/Journal.mdz" ]; then
        mkdir -p "$work/app-seed/tmp"
        # > 1,500 entries: a store over 1 MiB, so saves are incremental (restart segments reused, FORMAT.md 16.2).
        TMPDIR="$work/app-seed/tmp" XDG_STATE_HOME="$work/app-seed/state" "$bin/notes-app" "$work/app-seed/Journal.mdz" journal --rows "$app_seed_rows" \
            >/dev/null
    fi
}
app_fill() { cp "$work/app-seed/Journal.mdz" "$base/root/t/Journal.mdz"; }
app_writer() { start_writer "$bin/notes-app" "$mnt/t/Journal.mdz" journal --rows 400 --save-every 9 --echo; }
app_check() {
    local doc=$mnt/t/Journal.mdz committed saved line inBundle recovered
    committed=$(grep -o '^committed [0-9]*' "$work/out" | tail -n 1 | cut -d' ' -f2)
    saved=$(grep -o '^saved [0-9]*' "$work/out" | tail -n 1 | cut -d' ' -f2)
    committed=${committed:-$app_seed_rows}
    saved=${saved:-$app_seed_rows}
    app_inside=0
    line=$(grep -E '^(committed|saved) ' "$work/out" | tail -n 1 || true)
    if [[ $line == committed* ]] && (( committed % 9 == 0 )); then app_inside=1; fi
    verifies "$doc" || violation "the bundle does not verify: $("$bin/docconvert" verify "$doc" 2>&1 | tail -n 1)"
    # > Read-only, from the bundle: the entries of every acknowledged save, a whole prefix.
    line=$("$bin/docconvert" query "$doc" \
        "SELECT max(id) || ' ' || count(*) || ' ' || sum(text = 'entry ' || id) FROM entry" 2>&1 | tail -n 1 || true)
    read -r inBundle count named <<<"$line" || true
    if ! [[ ${inBundle:-} =~ ^[0-9]+$ ]]; then
        violation "the bundle cannot be read: $line"
    else
        (( count == inBundle && named == inBundle )) || violation "the bundle's entries are not a whole prefix: $line"
        (( inBundle >= saved )) || violation "the bundle holds $inBundle entries, the last save acknowledged $saved"
    fi
    # > The writer kept its working copies in the default folder, on the mount (made durably at its open, before
    # > its first commit), never under TMPDIR.
    if (( committed > app_seed_rows )) && [ ! -d "$mnt/t/state/ManagedDocument" ]; then
        violation "no default working-copies folder ($mnt/t/state/ManagedDocument) after $committed acknowledged commits"
    fi
    if compgen -G "$mnt/t/tmp/ManagedDocument-*" >/dev/null; then
        violation "working copies under TMPDIR ($mnt/t/tmp), not in the default folder"
    fi
    # > With .recover, through the app, with the working copies where the writer had them (the default folder).
    line=$(cd "$mnt" && TMPDIR="$mnt/t/tmp" XDG_STATE_HOME="$mnt/t/state" "$bin/notes-app" "$doc" sql --recover \
        "?SELECT max(id) || ' ' || count(*) || ' ' || sum(text = 'entry ' || id) FROM entry" "?PRAGMA integrity_check" 2>&1 \
        || true)
    line=$(tr -d '"' <<<"$line")  # > notes-app prints a text value as Swift describes it, quoted
    read -r recovered count named <<<"$(awk '/^step 1$/ { print previous } { previous = $0 }' <<<"$line")" || true
    if ! [[ ${recovered:-} =~ ^[0-9]+$ ]] || [ "$(awk '/^step 2$/ { print previous } { previous = $0 }' <<<"$line")" != ok ]; then
        violation "the document does not open with .recover, or is damaged: $(tr '\n' ' ' <<<"$line" | cut -c1-400)"
    else
        (( count == recovered && named == recovered )) || violation "recovered entries are not a whole prefix: $line"
        (( recovered >= committed )) || violation "recovered $recovered entries, the last commit acknowledged was $committed"
        (( recovered <= committed + 1 )) || violation "recovered $recovered entries, more than one past the last acknowledged ($committed)"
    fi
    app_note="committed $committed, saved $saved, bundle ${inBundle:-?}, recovered ${recovered:-?}"
}

# --- convert --------------------------------------------------------------------------------------------------------

# Checks a legacy store SOURCE (its path under $mnt/t as the writer had it) and its bundle BUNDLE against EXPECTED.
check_legacy() {
    local source=$1 bundle=$2 expected=$3 name found=0 candidate digest
    name=$(basename "$source")
    if [ -e "$bundle" ]; then
        if ! verifies "$bundle"; then
            violation "$bundle is there and does not verify: $("$bin/docconvert" verify "$bundle" 2>&1 | tail -n 1)"
        elif [ "$(bundle_digest "$bundle")" != "$expected" ]; then
            violation "$bundle verifies but lacks rows of $name"
        else
            found=1
        fi
    fi
    # > The source, in place or moved to a backup folder, whole with its sidecars.
    while IFS= read -r candidate; do
        [ -n "$candidate" ] || continue
        digest=$(rows_digest "$candidate")
        if [ "$digest" = "$expected" ]; then found=1; fi
    done < <(find "$mnt/t" -path "$mnt/t/tmp" -prune -o -type f -name "$name" -print)
    (( found )) || violation "$name: gone, and no whole bundle of it ($(find "$mnt/t" -name "${name%.*}*" | sed "s|$mnt/t/||" | tr '\n' ' '))"
}

convert_fill() { cp "$package/Samples/stores/minimalTime.sqlite"* "$base/root/t/"; }
convert_writer() {
    start_writer "$bin/docconvert" convert "$mnt/t/minimalTime.sqlite" --legacy "$1"
}
convert_check() {
    check_legacy "$mnt/t/minimalTime.sqlite" "$mnt/t/minimalTime.mdz" "$(expected_of minimalTime.sqlite)"
}

# A 16 MiB store in WAL mode, its last 2,000 rows only in its -wal: copied while the connection that wrote them is
# open (closing it would checkpoint them into the store and remove the -wal).
large_fixture() {
    mkdir -p "$work/large"
    python3 - "$work/large" <<'PY'
import os, shutil, sqlite3, sys
folder = sys.argv[1]
db = sqlite3.connect(os.path.join(folder, "making.sqlite"), isolation_level=None)
db.execute("PRAGMA journal_mode = WAL")
db.execute("CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body BLOB NOT NULL)")
db.execute("BEGIN")
for i in range(6000):
    db.execute("INSERT INTO item VALUES (?, ?, randomblob(2000) || zeroblob(?))", (i, "item %d" % i, i % 700))
db.execute("COMMIT")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
db.execute("PRAGMA wal_autocheckpoint = 0")
db.execute("BEGIN")
for i in range(6000, 8000):
    db.execute("INSERT INTO item VALUES (?, ?, randomblob(1000))", (i, "item %d" % i))
db.execute("UPDATE item SET name = name || ' changed' WHERE id % 7 = 0")
db.execute("COMMIT")
for suffix in ("", "-wal"):
    shutil.copyfile(os.path.join(folder, "making.sqlite" + suffix), os.path.join(folder, "Large.sqlite" + suffix))
db.close()
os.remove(os.path.join(folder, "making.sqlite"))
PY
    expected_digests[Large.sqlite]=$(rows_digest "$work/large/Large.sqlite")
}
large_fill() { cp "$work/large/Large.sqlite" "$work/large/Large.sqlite-wal" "$base/root/t/"; }
large_writer() { start_writer "$bin/docconvert" convert "$mnt/t/Large.sqlite" --legacy delete; }
large_check() { check_legacy "$mnt/t/Large.sqlite" "$mnt/t/Large.mdz" "$(expected_of Large.sqlite)"; }

declare -A expected_digests
expected_of() { echo "${expected_digests[$1]}"; }
legacy_samples=(Diary.sqlite Ledger.sqlite minimalTime.sqlite TasteB.sqlite)
for sample in "${legacy_samples[@]}"; do
    expected_digests[$sample]=$(rows_digest "$package/Samples/stores/$sample")
    [ "${expected_digests[$sample]}" != unreadable ] || { echo "power-cut: cannot read Samples/stores/$sample" >&2; exit 2; }
done

# --- batch ----------------------------------------------------------------------------------------------------------

batch_fill() {
    local tree=$base/root/t/tree
    mkdir -p "$tree/a" "$tree/b/c" "$tree/d" "$tree/e"
    cp "$package/Samples/stores/Diary.sqlite" "$tree/a/"
    cp -R "$package/Samples/stores/.Diary_SUPPORT" "$tree/a/"
    cp "$package/Samples/stores/Ledger.sqlite"* "$tree/b/c/"
    cp "$package/Samples/stores/minimalTime.sqlite"* "$tree/d/"
    cp "$package/Samples/stores/TasteB.sqlite" "$tree/e/"
}
batch_sources=(a/Diary.sqlite b/c/Ledger.sqlite d/minimalTime.sqlite e/TasteB.sqlite)
batch_command() {
    echo "$bin/docconvert" batch "$mnt/t/tree" --legacy delete --jobs 2 --quiet --report "$mnt/t/report.json"
}
batch_writer() { start_writer $(batch_command); }
batch_check() {
    local item
    for item in "${batch_sources[@]}"; do
        check_legacy "$mnt/t/tree/$item" "$mnt/t/tree/${item%.sqlite}.mdz" "$(expected_of "$(basename "$item")")"
    done
    # > The next run finishes, and then every store is a whole bundle.
    if ! (cd "$mnt" && TMPDIR="$mnt/t/tmp" XDG_STATE_HOME="$mnt/t/state" $(batch_command) >"$work/rerun" 2>&1); then
        violation "the next batch run fails: $(tail -n 2 "$work/rerun" | tr '\n' ' ')"
        return
    fi
    for item in "${batch_sources[@]}"; do
        local bundle=$mnt/t/tree/${item%.sqlite}.mdz
        verifies "$bundle" && [ "$(bundle_digest "$bundle")" = "$(expected_of "$(basename "$item")")" ] \
            || violation "after the next run, $item has no whole bundle"
    done
}

# --- migrate --------------------------------------------------------------------------------------------------------

migrate_fixture() {
    [ -d "$work/migrate-seed" ] && return
    mkdir -p "$work/migrate-seed/docs/inner" "$work/migrations"
    local sample
    for sample in Diary TasteB; do
        cp "$package/Samples/stores/$sample.sqlite" "$work/migrate-seed/docs/"
        "$bin/docconvert" convert "$work/migrate-seed/docs/$sample.sqlite" --legacy delete >/dev/null
    done
    cp "$package/Samples/stores/minimalTime.sqlite"* "$package/Samples/stores/Ledger.sqlite"* "$work/migrate-seed/docs/inner/"
    for sample in minimalTime Ledger; do
        "$bin/docconvert" convert "$work/migrate-seed/docs/inner/$sample.sqlite" --legacy delete >/dev/null
    done
    cp "$work/app-seed/Journal.mdz" "$work/migrate-seed/docs/inner/"
    cat >"$work/migrations/V1__add_log.sql" <<'SQL'
CREATE TABLE migration_log(id INTEGER PRIMARY KEY, body TEXT NOT NULL);
WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 3000)
INSERT INTO migration_log(id, body) SELECT i, hex(randomblob(200)) FROM r;
SQL
    cat >"$work/migrations/V2__more_log.sql" <<'SQL'
INSERT INTO migration_log(id, body) SELECT id + 3000, 'v2 ' || body FROM migration_log WHERE id <= 1000;
SQL
    rm -rf "$work/migrate-seed/docs/docconvert-backup" "$work/migrate-seed/docs/inner/docconvert-backup"
    local bundle
    while IFS= read -r bundle; do
        expected_digests[migrate:${bundle#"$work/migrate-seed/docs/"}]=$(bundle_digest "$bundle" '^(managed_document_.*|migration_log)$')
    done < <(find "$work/migrate-seed/docs" -name '*.mdz')
}
migrate_fill() { cp -R "$work/migrate-seed/docs" "$base/root/t/docs"; }
migrate_command() { echo "$bin/docconvert" migrate "$mnt/t/docs" --migrations "$work/migrations"; }
migrate_writer() { start_writer $(migrate_command); }
# CHECK_RERUN: whether each bundle must hold both migrations (after a run to its end).
migrate_bundles_check() {
    local must_be_done=$1 key bundle log
    for key in "${!expected_digests[@]}"; do
        [[ $key == migrate:* ]] || continue
        bundle=$mnt/t/docs/${key#migrate:}
        if ! verifies "$bundle"; then
            violation "${key#migrate:} does not verify: $("$bin/docconvert" verify "$bundle" 2>&1 | tail -n 1)"
            continue
        fi
        [ "$(bundle_digest "$bundle" '^(managed_document_.*|migration_log)$')" = "${expected_digests[$key]}" ] \
            || violation "${key#migrate:} lost rows of its own tables"
        log=$("$bin/docconvert" query "$bundle" \
            "SELECT (SELECT count(*) FROM migration_log) || ' ' || (SELECT count(*) FROM managed_document_migrations)" \
            2>&1 | tail -n 1 || true)
        case $log in
        "4000 2") ;;
        *"no such table: migration_log"*)
            if (( must_be_done )); then violation "${key#migrate:} was not migrated by a whole run"; fi ;;
        *) violation "${key#migrate:} holds part of its migrations: $log" ;;
        esac
    done
}
migrate_check() {
    migrate_bundles_check 0
    if ! (cd "$mnt" && TMPDIR="$mnt/t/tmp" XDG_STATE_HOME="$mnt/t/state" $(migrate_command) >"$work/rerun" 2>&1); then
        violation "the next migrate run fails: $(tail -n 2 "$work/rerun" | tr '\n' ' ')"
        return
    fi
    migrate_bundles_check 1
}

# --- the trials -----------------------------------------------------------------------------------------------------

# > Fixtures only for the paths that use them (the app's seed document is in migrate's folder too).
if [[ " $paths " == *" app "* || " $paths " == *" migrate "* ]]; then app_fixture; fi
if [[ " $paths " == *" migrate "* ]]; then migrate_fixture; fi
if [[ " $paths " == *" convert-large "* ]]; then large_fixture; fi
declare -A row_trials row_inside row_violations row_seconds row_died
total_violations=0
echo "power-cut: $trials trials per path (seed $seed), LazyFS at $mnt, binaries from $bin" >&2
for path in $paths; do
    started=$SECONDS
    case $path in
    app) fill=app_fill; run=(app_writer); check=app_check ;;
    convert-backup) fill=convert_fill; run=(convert_writer backup); check=convert_check ;;
    convert-delete) fill=convert_fill; run=(convert_writer delete); check=convert_check ;;
    convert-large) fill=large_fill; run=(large_writer); check=large_check ;;
    batch) fill=batch_fill; run=(batch_writer); check=batch_check ;;
    migrate) fill=migrate_fill; run=(migrate_writer); check=migrate_check ;;
    esac
    # > One run to its end first: how long the writer takes (the cuts fall inside that time), and the checks pass.
    fresh_trial "$fill"
    start_ms=$(now_ms)
    "${run[@]}"
    wait "$writer" || { echo "power-cut: $path: the writer failed without a cut: $(tail -n 3 "$work/out")" >&2; exit 2; }
    duration=$(( $(now_ms) - start_ms ))
    unmount; mountfs
    violations_here=()
    $check
    if [ ${#violations_here[@]} -gt 0 ]; then
        printf 'power-cut: %s: the run without a cut fails the checks: %s\n' "$path" "${violations_here[*]}" >&2
        exit 2
    fi
    echo "power-cut: $path: a whole run takes $duration ms" >&2
    inside=0; found=0; died=0
    for trial in $(seq 1 "$trials"); do
        fresh_trial "$fill"
        "${run[@]}"
        if [ "$path" = app ] && (( trial % 2 == 0 )); then
            # > Every other trial aims at a save: frozen just after a random save began.
            target=$(( (app_seed_rows / 9 + $(random_between 1 44)) * 9 ))
            freeze_in_save "$target"
        else
            delay=$(random_between $((duration / 20)) $((duration * 19 / 20)))
            moment="$delay ms"
            freeze_after "$delay"
        fi
        power_cut
        died=$((died + lazyfs_died))
        # > A writer that finished before its freeze ran faster than the first run (that one shared the machine
        # > with more): later cuts fall inside the shorter time.
        if [ "$path" != app ] && (( ! frozen && writer_status == 0 && delay < duration )); then duration=$delay; fi
        if (( lazyfs_died )); then moment="$moment; LazyFS had died after: $died_note"; fi
        violations_here=()
        app_inside=0; app_note=""
        $check
        if [ "$path" = app ]; then
            inside=$((inside + app_inside))
        else
            inside=$((inside + frozen))
        fi
        if [ ${#violations_here[@]} -gt 0 ]; then
            found=$((found + 1))
            kept=$(keep_failed "$path-$trial")
            for v in "${violations_here[@]}"; do
                echo "power-cut: VIOLATION $path trial $trial (seed $seed, frozen after $moment${app_note:+; $app_note}): $v" >&2
            done
            echo "power-cut:   kept in $kept" >&2
        else
            echo "power-cut: $path trial $trial: frozen after $moment$( (( frozen )) || echo " (it had finished: exit $writer_status$( (( writer_status == 0 )) || echo ", $(tail -n 1 "$work/out" | cut -c1-200)"))")${app_note:+: $app_note}: ok" >&2
        fi
    done
    row_trials[$path]=$trials; row_inside[$path]=$inside; row_violations[$path]=$found; row_died[$path]=$died
    row_seconds[$path]=$((SECONDS - started))
    total_violations=$((total_violations + found))
done

printf '\n%-16s %7s %12s %11s %13s %8s\n' path trials "cut inside" violations "LazyFS died" seconds
for path in $paths; do
    printf '%-16s %7d %12d %11d %13d %8d\n' "$path" "${row_trials[$path]}" "${row_inside[$path]}" \
        "${row_violations[$path]}" "${row_died[$path]}" "${row_seconds[$path]}"
done
echo "(cut inside: app, the cut fell inside a save; the others, the command was still running."
echo " LazyFS died: it crashed during the trial, which drops its cache like a cut; checked as one)"
(( total_violations == 0 )) || exit 1
