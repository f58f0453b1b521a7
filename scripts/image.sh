#!/usr/bin/env bash
# Builds the OCI image of `docconvert` that Samples/fleet/indexed-job.yaml runs: `FROM scratch` holding the release
# binary built the way it ships (`--static-swift-stdlib`, stripped), the system libraries it loads (found with `ldd`
# and copied from this machine: libarchive and what it links, SQLite, ISA-L, zlib, libstdc++, libc and the loader),
# their Debian copyright files, and busybox-static for the Job's `/bin/sh -c "mkdir -p … && exec docconvert …"`.
# Nothing is fetched from a registry. The image is tagged `docconvert:VERSION` (VERSION: `docconvert --version`)
# and kept in a container storage of its own under .build-image/oci/, so that it never collides with other podman
# users of the machine; `scripts/image.sh podman …` reaches it.
#
#   scripts/image.sh                          build the binary (release, into .build-image; about 5 minutes on 2
#                                             cores the first time) and the image; print its size, contents and how
#                                             to push it
#   scripts/image.sh --oci-archive FILE       also write the image to FILE (`podman save --format oci-archive`), to
#                                             load or push from another machine
#   scripts/image.sh --push-help [REGISTRY]   print how to push the image built last (default registry.example.com)
#   scripts/image.sh podman ARGS…             podman on the image's storage, with this machine's workarounds (below):
#                                             `scripts/image.sh podman push docconvert:0.1.0 registry.example.com/docconvert:0.1.0`
#   scripts/image.sh --check [TOOL…]          check, without building, that every tool a build needs is installed
#                                             (and each TOOL: scripts/image-test.sh names the ones it adds)
#   scripts/image.sh --clean                  remove the image's storage and build context (not the Swift build)
#   scripts/image.sh --help
#
# Environment (optional):
#   DOCCONVERT_IMAGE_BINARY=path   a release docconvert already built (`swift build -c release --product docconvert
#                                  --static-swift-stdlib`): used instead of building one (CI, a release)
#   IMAGE_ENGINE=podman|buildah    the tool that builds (default: podman when installed, else buildah)
#
# Needs root (podman and buildah run as root here); podman with runc (apt-get install podman runc: podman itself
# brings crun, which fails here, see below), or buildah; busybox-static (scripts/setup.sh installs it), ldd and strip;
# and the Swift toolchain unless DOCCONVERT_IMAGE_BINARY is set. They are all checked before anything is built: one
# missing stops the run at once, with one line naming every tool missing and the apt-get command that installs them.
# Exit 0 when the image is built; 64 bad options; 66 DOCCONVERT_IMAGE_BINARY is not there; 69 a tool is missing (or
# not root); 1 the build failed.
#
# Workarounds, all in the configuration files written by `engine_environment` below:
#   - storage driver vfs: it needs nothing from the kernel or the file system (overlay needs overlay mounts on a
#     file system that supports them, which a CI runner inside a container often lacks); it copies the image's one
#     layer for every container, about half a second here.
#   - runtime runc, not crun (Debian's default, the one podman installs): crun fails with "setrlimit RLIMIT_NOFILE:
#     Operation not permitted", then "cgroups in hybrid mode not supported".
#   - explicit ulimits: podman's default limits are above what may be set here, and runc fails with "error setting
#     rlimit type 7 (NOFILE; 6, NPROC): operation not permitted"; nofile is the shell's hard limit, nproc at most
#     32768 (65536 was refused though the shell's hard limit is higher).
#   - cgroup manager cgroupfs (no systemd here), events logger none (no journald), and podman's temporary folder
#     and network folder inside the build folder, so that runs do not share /run/libpod.
#   - podman still creates /run/containers/networks, /var/lib/containers/cache (its blob-info cache) and the
#     libpod_parent cgroups whatever it is told: those that were not there before are removed on exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scratch="$root/.build-image"
oci="$scratch/oci"
log() { echo "[image] $*" >&2; }
die() { echo "[image] $1" >&2; exit "${2:-1}"; }

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# The configuration files every podman or buildah call of this script reads (CONTAINERS_CONF,
# CONTAINERS_STORAGE_CONF): the private storage and the workarounds above.
engine_environment() {
    local nofile nproc
    nofile=$(ulimit -Hn)
    [[ $nofile == unlimited ]] && nofile=1048576
    nproc=$(ulimit -Hu)
    [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    mkdir -p "$oci/conf" "$oci/tmp" "$oci/networks"
    cat > "$oci/conf/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
tmp_dir = "$oci/tmp"
[network]
network_config_dir = "$oci/networks"
EOF
    cat > "$oci/conf/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$oci/storage"
runroot = "$oci/run"
EOF
    export CONTAINERS_CONF="$oci/conf/containers.conf" CONTAINERS_STORAGE_CONF="$oci/conf/storage.conf"
    # What podman creates outside the build folder anyway, removed on exit when it was not there before.
    local candidates=(/run/containers /var/lib/containers /sys/fs/cgroup/libpod_parent) path
    for path in /sys/fs/cgroup/*/; do candidates+=("${path}libpod_parent"); done
    created_outside=()
    for path in "${candidates[@]}"; do
        [[ -e $path ]] || created_outside+=("$path")
    done
    trap remove_outside EXIT
}

remove_outside() {
    local path
    for path in "${created_outside[@]}"; do
        [[ -e $path ]] || continue
        if [[ $path == /sys/fs/cgroup/* ]]; then
            # Cgroups go with rmdir, innermost first; one still holding a process stays (podman's, still running).
            find "$path" -depth -type d -exec rmdir {} + 2>/dev/null || true
        else
            rm -rf "$path"
        fi
    done
}

require_root() {
    [[ $(id -u) == 0 ]] || die "run scripts/image.sh as root: the image's storage is root's" 69
}

# The tool that builds: IMAGE_ENGINE, else podman when installed, else buildah when installed, else podman (which the
# check of the tools then reports missing).
engine() {
    if [[ -n ${IMAGE_ENGINE:-} ]]; then
        [[ $IMAGE_ENGINE == podman || $IMAGE_ENGINE == buildah ]] || die "IMAGE_ENGINE must be podman or buildah" 64
        echo "$IMAGE_ENGINE"
    elif ! command -v podman >/dev/null && command -v buildah >/dev/null; then
        echo buildah
    else
        echo podman
    fi
}

# Exits 69 with one line naming every tool of the arguments that is missing and the apt-get command that installs
# them, so that a fresh machine learns all it lacks at once, not one tool per failed run. `busybox` means a static
# /bin/busybox (the image has no libraries for a dynamic one), `swift` the Swift toolchain (not a Debian package).
require_tools() {
    local tool missing="" packages="" notes=""
    for tool in "$@"; do
        case $tool in
            busybox) [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 && continue ;;
            *) command -v "$tool" >/dev/null && continue ;;
        esac
        missing+="${missing:+, }$tool"
        case $tool in
            busybox) packages+=" busybox-static" ;;
            ldd) packages+=" libc-bin" ;;
            strip) packages+=" binutils" ;;
            runc)
                packages+=" runc"
                notes+="; podman runs this script's containers with runc, not the crun it installs" ;;
            swift) notes+="; swift: install the Swift toolchain (swift.org/install), or set DOCCONVERT_IMAGE_BINARY" ;;
            *) packages+=" $tool" ;;
        esac
    done
    [[ -z $missing ]] && return
    die "missing: $missing${packages:+; install with: apt-get install$packages}$notes" 69
}

# Every tool a build with this engine needs, and the tools of the arguments. Arguments: the engine, tools.
require_build_tools() {
    local engine=$1 tools=("$1" ldd strip busybox)
    shift
    # Every podman command starts by finding the runtime its configuration names (runc, above) and stops when it is
    # not there; buildah needs one only for a RUN instruction, and the Containerfile has none.
    [[ $engine == podman ]] && tools+=(runc)
    [[ -n ${DOCCONVERT_IMAGE_BINARY:-} ]] || tools+=(swift)
    require_tools "${tools[@]}" "$@"
}

# The release binary: DOCCONVERT_IMAGE_BINARY, or built here the way it ships. Prints its path.
release_binary() {
    if [[ -n ${DOCCONVERT_IMAGE_BINARY:-} ]]; then
        [[ -x $DOCCONVERT_IMAGE_BINARY ]] || die "DOCCONVERT_IMAGE_BINARY=$DOCCONVERT_IMAGE_BINARY is not an executable" 66
        realpath "$DOCCONVERT_IMAGE_BINARY"
        return
    fi
    log "building docconvert (release, --static-swift-stdlib, into .build-image)"
    swift build -c release --product docconvert --static-swift-stdlib --scratch-path "$scratch" >&2
    echo "$(swift build -c release --scratch-path "$scratch" --show-bin-path)/docconvert"
}

# The root file system of the image, in $oci/context/rootfs. Arguments: the binary.
make_rootfs() {
    local binary=$1 rootfs="$oci/context/rootfs" library name package tool
    rm -rf "$oci/context"
    mkdir -p "$rootfs/usr/local/bin" "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/usr/share/doc"
    chmod 1777 "$rootfs/tmp"
    install -m 755 "$binary" "$rootfs/usr/local/bin/docconvert"
    # Symbols only help a debugger; the unstripped binary stays in the build folder (same build ID).
    strip "$rootfs/usr/local/bin/docconvert"
    # The libraries the loader resolves, at the paths ldd shows (copies, not links), and the loader itself.
    # A library ldd cannot find makes the image unusable: stop.
    if ldd "$binary" | grep -q "not found"; then
        die "docconvert needs libraries this machine lacks: $(ldd "$binary" | grep "not found" | tr -s ' \t\n' ' ')"
    fi
    local packages=()
    for library in $(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
        mkdir -p "$rootfs$(dirname "$library")"
        cp -L "$library" "$rootfs$library"
        # dpkg knows a file by the path its package installed it at, /lib/… or /usr/lib/… (merged /usr).
        package=$( { dpkg -S "$library" || dpkg -S "$(realpath "$library")" || dpkg -S "/usr$library"; } 2>/dev/null \
            | head -1 | cut -d: -f1) || true   # a library no package owns still goes in, without its copyright
        [[ -n $package ]] && packages+=("$package")
    done
    # busybox-static (checked before the build): sh and mkdir for the pod's command, and a few tools for `kubectl exec`.
    cp /bin/busybox "$rootfs/bin/busybox"
    for tool in sh mkdir ls cat env rm mv cp du df ps; do ln -s busybox "$rootfs/bin/$tool"; done
    packages+=(busybox-static)
    # Licences of what is copied (glibc, libstdc++, libarchive, busybox, …), as Debian ships them.
    for package in $(printf '%s\n' "${packages[@]}" | sort -u); do
        if [[ -f /usr/share/doc/$package/copyright ]]; then
            mkdir -p "$rootfs/usr/share/doc/$package"
            cp "/usr/share/doc/$package/copyright" "$rootfs/usr/share/doc/$package/"
        fi
    done
    # Names for root and nobody, for tools that look them up; the Job runs as root.
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$rootfs/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$rootfs/etc/group"
}

containerfile() {
    local version=$1
    cat <<EOF
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/bin
LABEL org.opencontainers.image.title="docconvert" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.description="Converts legacy SQLite stores into ManagedDocument bundles" \\
      org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["/usr/local/bin/docconvert"]
EOF
}

push_help() {
    local registry=${1:-registry.example.com} archive=${2:-FILE} version
    version=$(cat "$oci/version" 2>/dev/null) || die "no image built yet: run scripts/image.sh" 66
    cat <<EOF
The image docconvert:$version is in this script's own storage ($oci/storage). To push it:
  scripts/image.sh podman push docconvert:$version $registry/docconvert:$version
  (log in first if the registry asks: scripts/image.sh podman login $registry)
Or from its OCI archive (scripts/image.sh --oci-archive FILE), on any machine:
  podman load -i $archive && podman push docconvert:$version $registry/docconvert:$version
  skopeo copy oci-archive:$archive docker://$registry/docconvert:$version
Then set the \`image:\` of Samples/fleet/indexed-job.yaml to $registry/docconvert:$version.
EOF
}

build() {
    local archive=$1 tool binary version started size packed
    tool=$(engine)
    require_root
    require_build_tools "$tool"
    started=$(date +%s)
    binary=$(release_binary)
    version=$("$binary" --version)
    [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$binary --version printed '$version', not a version"
    engine_environment
    make_rootfs "$binary"
    containerfile "$version" > "$oci/context/Containerfile"
    log "building docconvert:$version with $tool (FROM scratch, nothing pulled)"
    if [[ $tool == podman ]]; then
        podman build --quiet --tag "docconvert:$version" --file "$oci/context/Containerfile" "$oci/context" >/dev/null
    else
        buildah build --quiet --tag "docconvert:$version" --file "$oci/context/Containerfile" "$oci/context" >/dev/null
    fi
    echo "$version" > "$oci/version"
    # Images of earlier builds, left untagged by this one (only tidies the private storage; a failure leaves them).
    if [[ $tool == podman ]]; then podman image prune --force >/dev/null || true; else buildah rmi --prune >/dev/null || true; fi
    # The image is its one layer: its size as stored, and as pushed (gzip).
    size=$(tar -C "$oci/context/rootfs" -cf - . | wc -c)
    packed=$(tar -C "$oci/context/rootfs" -cf - . | gzip -6 | wc -c)
    log "docconvert:$version: $((size / 1000000)) MB ($((packed / 1000000)) MB compressed, as pushed), built in $(( $(date +%s) - started )) s:"
    (cd "$oci/context/rootfs" && find . -type f -printf '%s %p\n' | sort -rn \
        | awk '{ printf "[image]   %6.1f MB  %s\n", $1 / 1000000, substr($2, 2) }' | grep -v '/usr/share/doc/' >&2)
    log "  plus $(find "$oci/context/rootfs/usr/share/doc" -type f | wc -l) copyright files, /etc/passwd, /etc/group, /tmp, and busybox links in /bin"
    if [[ -n $archive ]]; then
        rm -f "$archive"
        if [[ $tool == podman ]]; then
            podman save --quiet --format oci-archive --output "$archive" "docconvert:$version"
        else
            buildah push --quiet "docconvert:$version" "oci-archive:$archive:docconvert:$version" >/dev/null
        fi
        log "wrote $archive ($(( $(stat -c %s "$archive") / 1000000 )) MB)"
    fi
    push_help "" "$archive" >&2
}

case ${1:-} in
    ""|--oci-archive)
        archive=""
        if [[ ${1:-} == --oci-archive ]]; then
            [[ $# == 2 && -n $2 ]] || die "usage: scripts/image.sh --oci-archive FILE" 64
            mkdir -p "$(dirname "$2")"
            archive=$(realpath "$2")
        fi
        build "$archive"
        ;;
    --push-help) push_help "${2:-}" ;;
    --check)
        shift
        tool=$(engine)
        require_build_tools "$tool" "$@"
        log "every tool a build with $tool needs is installed${1:+ (and: $*)}"
        ;;
    podman)
        shift
        require_root
        require_tools podman runc
        engine_environment
        status=0
        podman "$@" || status=$?
        exit "$status"
        ;;
    --clean)
        require_root
        rm -rf "$oci"   # vfs layers are plain folders: nothing is mounted once no container runs
        log "removed $oci"
        ;;
    -h|--help) usage ;;
    *) usage >&2; exit 64 ;;
esac
