#!/usr/bin/env bash
# Rebuilds the shader core's test kernels: kfd-sim/shader/kernels/*.cl and *.s -> NAME.co (gfx90a
# code objects, committed; the in-process tests and the bench load them).
#
#   scripts/gen-kernels.sh           write the code objects
#   scripts/gen-kernels.sh --check   rebuild into a temporary directory and fail if they differ
#
# Compiler: Debian's clang-15 and ld.lld-15 (apt packages clang-15, lld-15; installed with
# apt-get when missing). OpenCL C (no device libraries) and assembly, target amdgcn-amd-amdhsa,
# -mcpu=gfx90a.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
dir="$top/kfd-sim/shader/kernels"

if ! command -v clang-15 >/dev/null 2>&1 || ! command -v ld.lld-15 >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang-15 lld-15 >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for src in "$dir"/*.cl "$dir"/*.s; do
    name=$(basename "${src%.*}")
    case "$src" in
        *.cl) lang=(-x cl -cl-std=CL2.0 -nogpulib -O2) ;;
        *) lang=(-x assembler) ;;
    esac
    clang-15 "${lang[@]}" -target amdgcn-amd-amdhsa -mcpu=gfx90a \
        -ffile-prefix-map="$top"=. -c "$src" -o "$tmp/$name.o"
    ld.lld-15 -shared "$tmp/$name.o" -o "$tmp/$name.co"
done

if [ "${1:-}" = "--check" ]; then
    status=0
    for co in "$tmp"/*.co; do
        name=$(basename "$co")
        if ! cmp -s "$co" "$dir/$name"; then
            echo "gen-kernels: kfd-sim/shader/kernels/$name is not current; run scripts/gen-kernels.sh" >&2
            status=1
        fi
    done
    for co in "$dir"/*.co; do
        [ -e "$co" ] || continue
        if [ ! -e "$tmp/$(basename "$co")" ]; then
            echo "gen-kernels: kfd-sim/shader/kernels/$(basename "$co") has no source" >&2
            status=1
        fi
    done
    exit $status
fi
cp "$tmp"/*.co "$dir"/
