#!/usr/bin/env bash
# Which of rocBLAS's gfx90a instructions the shader core cannot execute: downloads Debian's
# rocBLAS packages (without installing them), extracts their gfx90a code and runs the coverage
# example of kfd-shader over it, once per release. docs/shader-coverage.md is its last result.
#
#   scripts/shader-coverage.sh                 trixie (librocblas0 5.5.1) and forky (librocblas4 6.4.4)
#   scripts/shader-coverage.sh forky           one release
#   CACHE=/some/dir scripts/shader-coverage.sh where the .debs and extracted files go
#
# Needs apt-get and dpkg-deb (Debian), deb.debian.org, and about 5 GiB in the cache: the two
# librocblas packages are 170 and 290 MB, their gfx90a code 0.8 and 2.6 GB extracted. Reads only
# the XNACK-off code objects (`*gfx90a.co`, `*gfx90a-xnack-.hsaco`, the fat binary's `gfx90a` and
# `gfx90a:xnack-` entries): the simulated MI210 runs with XNACK off. Output: Markdown on stdout,
# one section per release, and the same in $CACHE/coverage-RELEASE.md.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CACHE:-/var/cache/amdgpu-cr/debs}
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(trixie forky)

package() {
    case "$1" in
        trixie) echo librocblas0 ;;
        forky) echo librocblas4 ;;
        *) echo "shader-coverage: unknown release $1 (trixie or forky)" >&2; exit 2 ;;
    esac
}

(cd "$top" && nice -n 10 cargo build --release -q -p kfd-shader --example coverage)
tool="$top/target/release/examples/coverage"

for rel in "${releases[@]}"; do
    pkg=$(package "$rel")
    dir="$cache/$rel"
    mkdir -p "$dir/etc" "$dir/lists/partial" "$dir/apt/archives/partial" "$dir/debs"
    echo "deb [trusted=yes] http://deb.debian.org/debian $rel main" >"$dir/etc/sources.list"
    apt_opts=(-o Dir::Etc::SourceList="$dir/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o APT::Sandbox::User=root
        -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/apt"
        -o Acquire::Check-Valid-Until=false -o Debug::NoLocking=1 -q)
    apt-get "${apt_opts[@]}" update >/dev/null
    version=$(apt-cache "${apt_opts[@]}" show "$pkg" | sed -n 's/^Version: //p' | head -n1)
    deb="$dir/debs/${pkg}_${version//:/%3a}_amd64.deb"
    if [ ! -f "$deb" ]; then
        (cd "$dir/debs" && apt-get "${apt_opts[@]}" download "$pkg" >/dev/null)
    fi
    root="$dir/root-$version"
    if [ ! -d "$root" ]; then
        mkdir -p "$root.partial"
        dpkg-deb --fsys-tarfile "$deb" |
            tar -x -C "$root.partial" --wildcards '*gfx90a*' '*librocblas.so.*'
        mv "$root.partial" "$root"
    fi
    mapfile -t files < <(find "$root" -type f \( -name '*gfx90a.co' -o -name '*gfx90a-xnack-.hsaco' \
        -o -name 'librocblas.so.*' \) | sort)
    {
        echo "# $pkg $version ($rel)"
        echo
        "$tool" "${files[@]}"
    } | tee "$cache/coverage-$rel.md"
done
