#!/usr/bin/env bash
# Builds the kfd_bridge kernel module (ci/kmod/kfd_bridge) for one kernel, against that kernel's
# headers as Debian packages them (linux-headers-<version>), and prints the path of the .ko.
#
# Usage: ci/kmod/build.sh [--chroot ROOT] [--out DIR] KERNEL_VERSION [HEADERS_DIR]
#
#   KERNEL_VERSION  the exact `uname -r` of the kernel that will load it (6.1.0-57-amd64)
#   HEADERS_DIR     default /usr/src/linux-headers-KERNEL_VERSION, else
#                   /lib/modules/KERNEL_VERSION/build (inside ROOT with --chroot)
#   --chroot ROOT   build inside a Debian root (a debootstrap of the guest's release, with
#                   linux-headers-KERNEL_VERSION, gcc and make installed): for a guest kernel the
#                   host has no headers or compiler for (trixie's 6.12 on a bookworm host)
#   --out DIR       where the module goes (default: target/kmod/KERNEL_VERSION in the repository)
#
# The sources are copied to a scratch directory first (kbuild writes its objects beside them), so
# the repository stays clean. Kernel sources are never needed: headers are enough. The module is
# checked to carry the requested version (vermagic) before it is copied out.
set -euo pipefail

KMOD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$KMOD_DIR/../.." && pwd -P)
SRC=$KMOD_DIR/kfd_bridge

die() { printf 'kmod/build.sh: error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '/^# Usage:/,/^set -euo/{/^set/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

root=
out=
args=()
while (($#)); do
    case $1 in
        --chroot) [[ $# -ge 2 ]] || usage; root=$(cd "$2" && pwd -P) || die "no such root: $2"; shift ;;
        --out) [[ $# -ge 2 ]] || usage; out=$2; shift ;;
        -h | --help) usage ;;
        -*) die "unknown option $1" ;;
        *) args+=("$1") ;;
    esac
    shift
done
((${#args[@]} >= 1 && ${#args[@]} <= 2)) || usage
kver=${args[0]}
headers=${args[1]:-}
[[ $kver =~ ^[A-Za-z0-9._+~-]+$ ]] || die "not a kernel version: $kver"
out=${out:-$REPO/target/kmod/$kver}

# Paths as seen by the build (inside ROOT with --chroot).
inside() { printf '%s%s' "$root" "$1"; }
if [[ -z $headers ]]; then
    for h in "/usr/src/linux-headers-$kver" "/lib/modules/$kver/build"; do
        if [[ -f $(inside "$h")/Makefile ]]; then headers=$h; break; fi
    done
    [[ -n $headers ]] || die "no headers for $kver under ${root:-/}usr/src or lib/modules (install linux-headers-$kver${root:+ in $root})"
fi
[[ -f $(inside "$headers")/Makefile ]] || die "$(inside "$headers") is not a kernel headers tree"

scratch=$(mktemp -d "$(inside /tmp)/kfd-bridge-build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cp "$SRC"/kfd_bridge.c "$SRC"/kfd_bridge.h "$SRC"/Kbuild "$scratch/"
build_dir=${scratch#"$root"}

log=$scratch/build.log
cmd=(make -C "$headers" M="$build_dir" modules)
if [[ -n $root ]]; then
    for tool in make gcc; do
        chroot "$root" sh -c "command -v $tool" >/dev/null || die "$root has no $tool (install gcc and make there)"
    done
    rc=0
    # With the root's /proc mounted, in a private mount namespace: 7.2's objtool reads
    # /proc/self/limits.
    unshare -m sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "${cmd[@]}" \
        >"$log" 2>&1 || rc=$?
else
    rc=0
    "${cmd[@]}" >"$log" 2>&1 || rc=$?
fi
if ((rc != 0)); then
    cat "$log" >&2
    die "the build failed (status $rc)"
fi
# Compiler warnings are shown (the build has none on 6.1 and 6.12); a symbol the kernel does not
# export would only fail at insmod, so modpost's warning about it fails the build here.
grep -iE 'warning|error' "$log" >&2 || true
if grep -q 'undefined!' "$log"; then
    die "the module uses symbols this kernel does not export (see above)"
fi

ko=$scratch/kfd_bridge.ko
[[ -f $ko ]] || die "no kfd_bridge.ko after the build"
# vermagic is the first string of the .modinfo section: "vermagic=<version> SMP ...".
vermagic=$(tr '\0' '\n' <"$ko" | sed -n 's/^vermagic=//p' | head -n 1)
[[ $vermagic == "$kver "* ]] || die "the module says vermagic '$vermagic', not $kver"
mkdir -p "$out"
cp "$ko" "$out/kfd_bridge.ko"
printf '%s\n' "$out/kfd_bridge.ko"
