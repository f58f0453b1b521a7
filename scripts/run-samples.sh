#!/usr/bin/env bash
# The main job on the samples: converts every legacy sample store into a bundle, inspects and verifies them, then
# runs the three sample apps (taste-app, diary-app, time-app), which convert and migrate their own legacy stores.
# Works on a copy in ./samples-run (the committed samples are never changed).
set -euo pipefail
cd "$(dirname "$0")/.."
# Release builds with the Swift runtime linked in, the way docconvert ships (README, "The command line").
# The toolchain's static FoundationEssentials calls mktemp(3) (never on this package's data), and glibc makes the
# linker warn about it at every static link: that one line is dropped, so that whatever else is printed is news.
release_build() {
    swift build -c release --static-swift-stdlib --product "$1" 2>&1 \
        | { grep -v "warning: the use of \`mktemp' is dangerous" || true; }
}
echo "run-samples: building docconvert and the three sample apps in release (about 5 minutes on 2 cores the first time: 4 min 35 s here for the whole script; seconds after)"
for product in docconvert taste-app diary-app time-app; do
    release_build "$product"
done
docconvert=.build/release/docconvert
work=samples-run
rm -rf "$work"
cp -R Samples/stores "$work"
for source in TasteB.sqlite minimalTime.sqlite Diary.sqlite Recipes.recipedoc Ledger.sqlite; do
    "$docconvert" convert "$work/$source"
done
echo
"$docconvert" inspect "$work/Diary.mdz"
echo
"$docconvert" verify "$work"/*.mdz
echo
echo "The bundles are in $work/; the legacy files were moved to $work/docconvert-backup/."

# The three sample apps, each on its own fresh copy of its legacy store: converted and migrated at the first
# launch; a second launch changes data; a third finds nothing pending (run-once work ran once).
apps="$work/apps"
mkdir -p "$apps"
cp Samples/stores/TasteB.sqlite Samples/stores/Diary.sqlite Samples/stores/minimalTime.sqlite* "$apps/"
cp -R Samples/stores/.Diary_SUPPORT "$apps/"
echo
echo "== taste-app: additive migration, then every restaurant into \"Restaurants\" once"
.build/release/taste-app --folder "$apps"
.build/release/taste-app --folder "$apps" --add "Lucky Peach" --city "New York" | sed -n 1,3p
.build/release/taste-app --folder "$apps"
echo
echo "== diary-app: archived arrays and date strings into templates, days, sections and questions"
TZ=Pacific/Kiritimati .build/release/diary-app --folder "$apps" | sed -n 1,3p
.build/release/diary-app --folder "$apps" | sed -n 1,20p
echo
echo "== time-app: compatibility level 1 gives every event and tag a GUID, once"
.build/release/time-app --folder "$apps"
.build/release/time-app --folder "$apps" --add "Reading" --minutes 45 | sed -n 1,3p
echo
"$docconvert" inspect "$apps/TasteB.mdz" | sed -n '/model/,/store:/p'


# A whole tree at once: the samples twice, nested, plus a file that only pretends to be a store.
batch="$work/batch"
mkdir -p "$batch/alice" "$batch/bob/Library"
cp -R Samples/stores/. "$batch/alice/"
cp -R Samples/stores/. "$batch/bob/Library/"
echo "not a database" > "$batch/bob/notes.sqlite"
echo
echo "== docconvert batch: the plan, the run, and a rerun that finds everything done"
"$docconvert" batch "$batch" --dry-run --verbose
"$docconvert" batch "$batch" --jobs 2 --report "$work/batch-report.json"
"$docconvert" batch "$batch" | tail -10
echo "The report is $work/batch-report.json."
