#!/usr/bin/env bash
# Builds the programs of ci/rocm once, on the host, for one guest's release, and keeps them in a
# cache that is rebuilt only when a source or the toolchain changes. The VM lane runs it before
# booting each guest whose scenarios call need_rocm_programs, so no compiler runs in the (slow,
# emulated) guest.
#
# Usage: ci/rocm/build.sh [--chroot ROOT] --cache DIR --out DIR
#
#   --chroot ROOT  build inside a Debian root of the guest's release (the lane's trixie or forky
#                  root, with gcc, libhsakmt-dev (not in forky), libhsa-runtime-dev, pkg-config,
#                  hipcc and libamdhip64-dev);
#                  without it, on the host for the host's release (bookworm: the guest shares the
#                  host's root)
#   --cache DIR    where the built programs are kept between runs, with a stamp of what they were
#                  built from
#   --out DIR      where this run's programs go (the guest's results share)
#
# What it builds, into DIR and --out:
#   hsakmt-probe, hsa-probe, hsa-compute, hsa-long   gcc against the release's libhsakmt and ROCr
#   hip-probe, hip-compute, hip-loop                 the release's hipcc (--offload-arch=gfx90a)
#   hsa-kernels.co                                   the host's clang-15 and ld.lld-15 (a gfx90a
#                                                    code object; the same for every release)
# and writes `toolchain` (the package versions the programs were built with), `build.log`, and
# `missing` with one line per program it could not build for want of a tool (hipcc is not
# installed on the host, say), which the scenarios report. A failed build exits 1 with the
# compiler's errors on stderr; a program that cannot be built for want of a tool does not.
#
# The stamp: the sha256 of this script, every source in ci/rocm, and the toolchain's package
# versions (read from the root's dpkg database). Prints the cache's state ("cached" or "built in
# N s") on stdout.
set -euo pipefail

ROCM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

die() { printf 'rocm/build.sh: error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '/^# Usage:/,/^# What it builds/{/^# What it builds/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

root=
cache=
out=
while (($#)); do
    case $1 in
        --chroot) [[ $# -ge 2 ]] || usage; root=$(cd "$2" && pwd -P) || die "no such root: $2"; shift ;;
        --cache) [[ $# -ge 2 ]] || usage; cache=$2; shift ;;
        --out) [[ $# -ge 2 ]] || usage; out=$2; shift ;;
        -h | --help) usage ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
[[ -n $cache && -n $out ]] || usage

C_PROGRAMS=(hsakmt-probe hsa-probe hsa-compute hsa-long)
HIP_PROGRAMS=(hip-probe hip-compute hip-loop)
# The packages whose versions decide the programs (those not installed count as "none").
TOOL_PACKAGES=(gcc libc6-dev libhsakmt-dev libhsa-runtime-dev hipcc libamdhip64-dev clang-15 lld-15)

# The version of a package in the build root (clang-15 and lld-15: always the host's).
version() {
    local admin=${root:-}/var/lib/dpkg
    [[ $1 == clang-15 || $1 == lld-15 ]] && admin=/var/lib/dpkg
    dpkg-query --admindir="$admin" -W -f='${Version}' "$1" 2>/dev/null || printf none
}

toolchain=$(for p in "${TOOL_PACKAGES[@]}"; do printf '%s %s\n' "$p" "$(version "$p")"; done)
stamp=$({
    sha256sum "${BASH_SOURCE[0]}" "$ROCM_DIR"/*.c "$ROCM_DIR"/*.cpp "$ROCM_DIR"/*.h "$ROCM_DIR"/*.cl |
        sed 's|  .*/|  |'
    printf '%s\n' "root=${root:-/}" "$toolchain"
} | sha256sum | cut -d' ' -f1)

mkdir -p "$cache" "$out"
exec {lock}>"$cache.lock"
flock -x "$lock"

publish() {
    cp -a "$cache"/. "$out"/
}

if [[ -f $cache/stamp && $(cat "$cache/stamp") == "$stamp" ]]; then
    publish
    echo cached
    exit 0
fi

t0=$SECONDS
new=$(mktemp -d "$cache.new.XXXXXX")
trap 'rm -rf "$new"' EXIT
log=$new/build.log
: >"$new/missing"
printf '%s\n' "$toolchain" >"$new/toolchain"

# run CMD...: in the build root (its /proc mounted in a private mount namespace), or on the host.
run() {
    if [[ -n $root ]]; then
        unshare -m sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "$@"
    else
        "$@"
    fi
}

# The sources and the build directory as the compilers see them (inside the root with --chroot).
scratch=$(mktemp -d "${root:-}/tmp/rocm-build.XXXXXX")
trap 'rm -rf "$new" "$scratch"' EXIT
cp "$ROCM_DIR"/*.c "$ROCM_DIR"/*.cpp "$ROCM_DIR"/*.h "$ROCM_DIR"/*.cl "$scratch/"
src=${scratch#"$root"}

have() { run sh -c "command -v $1" >/dev/null 2>&1; }

failed=()
build() {
    local name=$1
    shift
    printf '$ %s\n' "$*" >>"$log"
    if run "$@" >>"$log" 2>&1; then
        cp "$scratch/$name" "$new/$name"
    else
        failed+=("$name")
    fi
}

if have gcc && have pkg-config; then
    if run pkg-config --exists libhsakmt; then
        build hsakmt-probe sh -c "gcc -O1 -Wall -Wextra -Werror -o $src/hsakmt-probe $src/hsakmt-probe.c \$(pkg-config --cflags --libs libhsakmt)"
    else
        # ROCm 6.4 (forky) builds the thunk into ROCr and ships no libhsakmt of its own.
        echo "hsakmt-probe: no libhsakmt in ${root:-the host} (ROCm 6.4 builds the thunk into ROCr)" >>"$new/missing"
    fi
    for p in hsa-probe hsa-compute hsa-long; do
        build "$p" gcc -O1 -Wall -Wextra -Werror -o "$src/$p" "$src/$p.c" -lhsa-runtime64 -lm
    done
else
    for p in "${C_PROGRAMS[@]}"; do echo "$p: no gcc and pkg-config in ${root:-the host}" >>"$new/missing"; done
fi

if have hipcc; then
    # --offload-arch: without it hipcc asks rocm_agent_enumerator, which reads the real GPUs.
    for p in "${HIP_PROGRAMS[@]}"; do
        build "$p" hipcc -O2 -Wall -Wextra -Werror --offload-arch=gfx90a -o "$src/$p" "$src/$p.cpp"
    done
else
    for p in "${HIP_PROGRAMS[@]}"; do
        echo "$p: hipcc is not installed in ${root:-the host} (apt-get install hipcc libamdhip64-dev)" >>"$new/missing"
    done
fi

# The code object, on the host whatever the release (clang-15 -x cl, no device libraries).
if command -v clang-15 >/dev/null && command -v ld.lld-15 >/dev/null; then
    printf '$ clang-15 ... hsa-kernels.cl && ld.lld-15 -shared ...\n' >>"$log"
    if clang-15 -x cl -cl-std=CL2.0 -nogpulib -O2 -target amdgcn-amd-amdhsa -mcpu=gfx90a \
        -c "$scratch/hsa-kernels.cl" -o "$scratch/hsa-kernels.o" >>"$log" 2>&1 &&
        ld.lld-15 -shared "$scratch/hsa-kernels.o" -o "$new/hsa-kernels.co" >>"$log" 2>&1; then
        :
    else
        failed+=(hsa-kernels.co)
    fi
else
    echo "hsa-kernels.co: clang-15 and lld-15 are not installed on the host (apt-get install clang-15 lld-15)" >>"$new/missing"
fi

if ((${#failed[@]})); then
    cat "$log" >&2
    die "building ${failed[*]} failed (${root:-host})"
fi

printf '%s\n' "$stamp" >"$new/stamp"
rm -rf "$cache"
mv "$new" "$cache"
trap 'rm -rf "$scratch"' EXIT
publish
echo "built in $((SECONDS - t0)) s"
