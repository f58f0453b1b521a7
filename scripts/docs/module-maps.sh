#!/usr/bin/env bash
# Prints, one per line, the module maps of the C modules this package's Swift modules import (its own C targets and
# its dependencies'), for a compiler run outside SwiftPM over the modules `swift build` made in BIN_PATH: the symbol
# graph (scripts/docs/symbol-graph.sh) and the snippets' type-check (scripts/docs/snippets.sh).
#
#   scripts/docs/module-maps.sh "$(swift build --show-bin-path)"
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: scripts/docs/module-maps.sh BIN_PATH}
ls Sources/CArchive/module.modulemap "$bin"/*.build/module.modulemap 2>/dev/null || true
find .build/checkouts -name module.modulemap -not -path "*/Tests/*" -not -path "*/SQLiteCustom/*" \
     -not -path "*/GRDBSQLCipher/*" -not -path "*/Support/*"
