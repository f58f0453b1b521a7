#!/usr/bin/env bash
# Installs what a fresh Debian machine with the Swift toolchain lacks to build and test this package:
# libarchive (headers and library), zlib and ISA-L headers, the zip tools the interoperability tests run, and
# busybox-static, the shell of the fleet's container image (scripts/image.sh); python3-venv for the SQLite tools' venv.
set -euo pipefail

packages=(libarchive-dev zlib1g-dev libisal-dev libsqlite3-dev libarchive-tools p7zip-full unzip zip sqlite3 file python3 python3-venv strace time busybox-static)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
pkg-config --exists libarchive || { echo "setup: libarchive's pkg-config file is missing" >&2; exit 1; }
pkg-config --exists libisal || { echo "setup: ISA-L's pkg-config file is missing (libisal-dev)" >&2; exit 1; }
# LazyFS, for the power-cut tests (scripts/power-cut.sh): built once into .build-lazyfs/ (about 35 s), where the tests
# find it. Only as root with /dev/fuse and LazyFS beside the package (../shared/tools); the tests skip otherwise.
package=$(cd "$(dirname "$0")/.." && pwd)
lazyfs_tools=${LAZYFS_TOOLS:-$package/../shared/tools}
if [ "$(id -u)" -eq 0 ] && [ -c /dev/fuse ] && [ -x "$lazyfs_tools/lazyfs.sh" ] \
    && [ ! -x "$package/.build-lazyfs/build/lazyfs/build/lazyfs" ]; then
    echo "setup: building LazyFS into .build-lazyfs/"
    if "$lazyfs_tools/lazyfs.sh" mount "$package/.build-lazyfs" >/dev/null 2>"$package/.build-lazyfs.log"; then
        "$lazyfs_tools/lazyfs.sh" umount "$package/.build-lazyfs"
    else
        echo "setup: LazyFS did not build or mount (see .build-lazyfs.log); the power-cut tests will skip" >&2
    fi
fi
# Datasette, sqlite-utils and pandas, pinned, in a venv of Debian's python (scripts/sqlite-tools.sh, about 20 s once):
# the tests that open documents by path with them skip, and say why, when PyPI cannot be reached.
"$package/scripts/sqlite-tools.sh" || echo "setup: the SQLite tools were not installed; their tests will skip" >&2
echo "setup: ready (libarchive $(pkg-config --modversion libarchive), $(swift --version 2>&1 | head -1))"
