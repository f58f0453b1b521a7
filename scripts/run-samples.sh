#!/usr/bin/env bash
# The main job on the samples: converts every legacy sample store into a bundle, then inspects and verifies them.
# Works on a copy in ./samples-run (the committed samples are never changed).
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product docconvert
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
