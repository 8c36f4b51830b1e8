#!/usr/bin/env bash
# Upstream CRIU, built unmodified from its release tarballs for the VM lane's upstream-*
# scenarios: criu and its C amdgpu plugin (plugins/amdgpu), v4.2 and the development branch.
#
# Usage: ci/upstream/build.sh sources
#        ci/upstream/build.sh deps
#        ci/upstream/build.sh build --cache DIR [--chroot ROOT] [--label NAME]
#
#   sources  prints the directory of each tarball (`NAME TARBALL` lines), each one's sha256
#            checked against ci/upstream/sources.sha256; exits 1 with the reason on stderr when a
#            tarball is not found, 3 when one was found with another sha256.
#   deps     prints the Debian packages the build needs (host, or the chroot's root).
#   build    builds each snapshot into DIR/NAME-LABEL/<key>/ unless a build with the same key is
#            there, and prints `NAME OUTDIR` lines; OUTDIR holds `criu`, `plugin/amdgpu_plugin.so`
#            (a directory holding that plugin only, for criu's -L), `version`, `build.log`,
#            `seconds`. The key is the sha256 of the tarball, of this script (the recipe) and of
#            the installed versions of the build's packages, so a new tarball, recipe or library
#            version builds anew, beside the old build (a lane running the old one keeps it).
#            --chroot ROOT builds inside a Debian root (trixie's, for the trixie guest, whose
#            criu must link against that release's libraries), at host speed.
#
# Where the tarballs are: $CRIU_UPSTREAM_SOURCES when set (a directory); otherwise the exact
# file names are looked for beside and above the checkout: in each directory above the
# repository, and in its subdirectories two levels down (a checkout at /srv/ci/main finds
# /srv/ci/sources/upstream/criu-4.2.tar.gz). Nothing of upstream's is ever copied into the
# repository.
set -euo pipefail

UP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$UP_DIR/../.." && pwd -P)
SUMS=$UP_DIR/sources.sha256

# The snapshots: NAME=TARBALL (the tarball unpacks into a directory of its name less .tar.gz).
SNAPSHOTS=(v4.2=criu-4.2.tar.gz dev=criu-dev-2cf8f13.tar.gz)

# What `make criu` and `make amdgpu_plugin` need on Debian (bookworm and trixie).
BUILD_DEPS=(gcc make pkg-config libc6-dev libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
    protobuf-compiler python3-protobuf libnl-3-dev libcap-dev libaio-dev libnet1-dev libbsd-dev
    libgnutls28-dev libdrm-dev uuid-dev libnftables-dev)

die() { printf 'upstream/build.sh: error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '/^# Usage:/,/^set -euo/{/^set/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

want_sum() {
    awk -v f="$1" '$2 == f {print $1}' "$SUMS"
}

# find_tarball FILE: prints the path of FILE with the recorded sha256; returns 1 when there is
# none (a line on stderr says why), 3 when only files of another sha256 were found.
find_tarball() {
    local file=$1 want cands=() c got wrong=
    want=$(want_sum "$file")
    [[ -n $want ]] || die "no sha256 recorded for $file in $SUMS"
    if [[ -n ${CRIU_UPSTREAM_SOURCES:-} ]]; then
        cands=("$CRIU_UPSTREAM_SOURCES/$file")
    else
        local dir=${REPO%/*}
        while [[ -n $dir ]]; do
            cands+=("$dir/$file" "$dir"/*/"$file" "$dir"/*/*/"$file")
            dir=${dir%/*}
        done
    fi
    for c in "${cands[@]}"; do
        [[ -f $c && $c != "$REPO"/* ]] || continue
        got=$(sha256sum "$c" | cut -d' ' -f1)
        if [[ $got == "$want" ]]; then
            printf '%s\n' "$c"
            return 0
        fi
        wrong+=" $c (sha256 $got)"
    done
    if [[ -n $wrong ]]; then
        printf 'upstream/build.sh: %s found with another sha256 than %s:%s\n' "$file" "$want" "$wrong" >&2
        return 3
    fi
    if [[ -n ${CRIU_UPSTREAM_SOURCES:-} ]]; then
        printf 'upstream/build.sh: no %s in CRIU_UPSTREAM_SOURCES=%s\n' "$file" "$CRIU_UPSTREAM_SOURCES" >&2
    else
        printf 'upstream/build.sh: no %s beside or above %s (set CRIU_UPSTREAM_SOURCES to its directory)\n' \
            "$file" "$REPO" >&2
    fi
    return 1
}

cmd_sources() {
    local s rc=0 path
    for s in "${SNAPSHOTS[@]}"; do
        path=$(find_tarball "${s#*=}") || { rc=$?; continue; }
        printf '%s %s\n' "${s%%=*}" "$path"
    done
    return "$rc"
}

# The installed versions of the build's packages (in ROOT when given): part of the build's key.
dep_versions() {
    local root=$1 admin=()
    [[ -z $root ]] || admin=(--admindir="$root/var/lib/dpkg")
    dpkg-query "${admin[@]}" -W -f='${Package}=${Version}\n' "${BUILD_DEPS[@]}" 2>&1 | sort || true
}

# build_one NAME TARBALL CACHE ROOT LABEL: prints NAME OUTDIR.
build_one() {
    local name=$1 tarball=$2 cache=$3 root=$4 label=$5 key out lock
    key=$( {
        sha256sum <"$tarball"
        sha256sum <"${BASH_SOURCE[0]}"
        dep_versions "$root"
    } | sha256sum | cut -c1-16)
    out=$cache/$name-$label/$key
    mkdir -p "$cache/$name-$label"
    exec {lock}>"$out.lock"
    flock -x "$lock"
    if [[ ! -f $out/done ]]; then
        local scratch t0=$SECONDS top log rc=0
        # The build runs where its compiler and libraries are: in ROOT with --chroot.
        scratch=$(mktemp -d "$root/tmp/criu-upstream.XXXXXX")
        log=$scratch/build.log
        tar -xzf "$tarball" -C "$scratch"
        top=$(find "$scratch" -mindepth 1 -maxdepth 1 -type d | head -n 1)
        [[ -f $top/Makefile ]] || die "$tarball does not unpack into a source tree"
        local inside=${top#"$root"} jobs
        jobs=$(nproc)
        local make_cmd="make -C $inside -j$jobs criu && make -C $inside amdgpu_plugin"
        if [[ -n $root ]]; then
            # protoc finds its own include directory (google/protobuf/descriptor.proto, which
            # criu's opts.proto imports) through /proc/self/exe: /proc is mounted in the chroot,
            # in a mount namespace of the build's own, so that nothing stays mounted in the root.
            unshare --mount --propagation private chroot "$root" \
                /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
                sh -c "mount -t proc proc /proc && $make_cmd" >"$log" 2>&1 || rc=$?
        else
            sh -c "$make_cmd" >"$log" 2>&1 || rc=$?
        fi
        if ((rc != 0)); then
            tail -n 30 "$log" >&2
            cp "$log" "$out.failed.log" 2>/dev/null || true
            rm -rf "$scratch"
            die "building $name from $tarball failed (status $rc; log: $out.failed.log)"
        fi
        rm -rf "$out.new"
        mkdir -p "$out.new/plugin"
        cp "$top/criu/criu" "$out.new/criu"
        cp "$top/plugins/amdgpu/amdgpu_plugin.so" "$out.new/plugin/amdgpu_plugin.so"
        cp "$log" "$out.new/build.log"
        printf '%s\n' "$((SECONDS - t0))" >"$out.new/seconds"
        printf '%s from %s (sha256 %s)\n' "$name" "${tarball##*/}" "$(sha256sum <"$tarball" | cut -d' ' -f1)" \
            >"$out.new/version"
        rm -rf "$scratch"
        rm -rf "$out"
        mv "$out.new" "$out"
        touch "$out/done"
        printf 'upstream/build.sh: built %s (%s) in %ss\n' "$name" "$label" "$(cat "$out/seconds")" >&2
    fi
    exec {lock}>&-
    printf '%s %s\n' "$name" "$out"
}

cmd_build() {
    local cache= root= label=host
    while (($#)); do
        case $1 in
            --cache) [[ $# -ge 2 ]] || usage; cache=$2; shift ;;
            --chroot) [[ $# -ge 2 ]] || usage; root=$(cd "$2" && pwd -P) || die "no such root: $2"; shift ;;
            --label) [[ $# -ge 2 ]] || usage; label=$2; shift ;;
            *) usage ;;
        esac
        shift
    done
    [[ -n $cache ]] || usage
    [[ $label =~ ^[A-Za-z0-9._-]+$ ]] || die "not a label: $label"
    local missing
    missing=$(dep_versions "$root" | grep -v '=[^ ]' || true)
    [[ -z $missing ]] || die "missing build packages${root:+ in $root}: $(paste -sd ' ' <<<"$missing")"
    local lines s tarball
    lines=$(cmd_sources) || exit $?
    for s in "${SNAPSHOTS[@]}"; do
        tarball=$(awk -v n="${s%%=*}" '$1 == n {print $2}' <<<"$lines")
        build_one "${s%%=*}" "$tarball" "$cache" "$root" "$label"
    done
}

(($#)) || usage
case $1 in
    sources) shift; cmd_sources ;;
    deps) printf '%s\n' "${BUILD_DEPS[@]}" ;;
    build) shift; cmd_build "$@" ;;
    *) usage ;;
esac
