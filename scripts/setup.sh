#!/usr/bin/env bash
# Installs what a fresh Debian machine with the Swift toolchain lacks to build and test this package:
# libarchive (headers and library), zlib and ISA-L headers, and the zip tools the interoperability tests run.
set -euo pipefail

packages=(libarchive-dev zlib1g-dev libisal-dev libsqlite3-dev libarchive-tools p7zip-full unzip zip sqlite3 file python3 strace time)
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
echo "setup: ready (libarchive $(pkg-config --modversion libarchive), $(swift --version 2>&1 | head -1))"
