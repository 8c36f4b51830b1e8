#!/usr/bin/env bash
# Runs every benchmark target (issues 18 and 29) with `amdgpu-cr bench --json` and prints one table,
# each target met or not met, with the figures it was judged on.
#
#   scripts/bench-targets.sh [--dir DIR] [--out DIR] [--skip-8g] [--runs N]
#
#   --dir DIR   where the bench writes its files (default: the bench's own choice, $TMPDIR);
#               the --sync runs measure that directory's disk
#   --out DIR   keep every run's JSON there (default: a new temporary directory, printed)
#   --skip-8g   leave out the one 8 GiB buffer run (it needs 8 GiB of memory for the simulated
#               VRAM and takes the longest)
#   --runs N    how many times each repeated run is made (default 3); every target is judged
#               on the median of its figure over the repetitions, and each repetition's figure
#               is printed beside it
#
# Why medians: on the 2-vCPU VMs this runs on, the same run twice in a row differs by up to 2-3x
# in wall and CPU time. The guest returns freed memory to the host at once (free page reporting,
# `page_reporting.min_free_ms` 0 there), so the first touch of a page that was freed (page cache
# dropped between phases, VRAM of the previous node) costs a host fault, charged to whichever
# phase touches it first, in an amount that depends on the host.
#
# The runs and the targets are one table in Rust (cli/src/bench/targets.rs): `amdgpu-cr bench
# --targets` prints it, `--plan` lists the runs this script makes (the repeated ones interleaved,
# N times each; the 8 GiB one once), and `--judge DIR` judges every target on the runs' JSON in
# DIR, on the median of each figure over the repetitions.
#
# The machine should be idle: every figure is a time or a CPU time, and other work on the cores
# or the disk shows in them. The load average is printed before and after. Exit status 0 when
# every target is met, 1 when one is not, 2 when a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=()
out=""
skip8=0
runs=3
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir=(--dir "$2"); shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --skip-8g) skip8=1; shift ;;
        --runs) runs="$2"; shift 2 ;;
        *) echo "usage: $0 [--dir DIR] [--out DIR] [--skip-8g] [--runs N]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out="$(mktemp -d /tmp/bench-targets.XXXXXX)"
mkdir -p "$out"

cargo build --quiet --release -p amdgpu-cr
bin=target/release/amdgpu-cr

plan=$("$bin" bench --plan)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); JSON in $out"
run() {
    local name="$1"
    shift
    echo "  run $name: amdgpu-cr bench $* --json" >&2
    if ! "$bin" bench "${dir[@]}" "$@" --json >"$out/$name.json" </dev/null; then
        echo "bench run $name failed (output in $out/$name.json)" >&2
        exit 2
    fi
}
# Interleaved, so that a slow spell of the host weighs on every target alike.
for i in $(seq 1 "$runs"); do
    while read -r name when _ args; do
        if [ "$when" = each ]; then
            # shellcheck disable=SC2086 # the plan's arguments are words
            run "$name-$i" $args
        fi
    done <<<"$plan"
done
while read -r name when weight args; do
    [ "$when" = once ] || continue
    if [ "$weight" = heavy ] && [ "$skip8" = 1 ]; then
        continue
    fi
    # shellcheck disable=SC2086 # the plan's arguments are words
    run "$name" $args
done <<<"$plan"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$bin" bench --judge "$out"
