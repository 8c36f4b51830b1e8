#!/usr/bin/env bash
# Fuzzes one target with AFL++ on stable Rust (cargo-afl), non-interactively.
#
#   scripts/fuzz.sh --list              the targets
#   scripts/fuzz.sh TARGET SECONDS      build, seed and fuzz TARGET for SECONDS
#
# Exit status: 0 when the run found no crash and no hang; 1 when it did (the reproducers' paths
# are printed); 2 on usage or setup errors. Installs cargo-afl (which builds AFL++) when missing.
#
# Environment:
#   FUZZ_DIR      where runs go (default target/fuzz): FUZZ_DIR/TARGET/{seeds,out}; crashes in
#                 FUZZ_DIR/TARGET/out/default/crashes, hangs in .../hangs
#   FUZZ_RESUME=1 continue the previous run of TARGET (its queue) instead of starting from seeds
#   FUZZ_TIMEOUT  milliseconds one input may take before it counts as a hang (default 2000)
#   FUZZ_AFL_ARGS more afl-fuzz options (e.g. "-M main" for a parallel campaign)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: $0 --list | TARGET SECONDS" >&2
    exit 2
}

targets() {
    cargo run --quiet -p fuzz -- list
}

[ $# -ge 1 ] || usage
if [ "$1" = "--list" ]; then
    targets
    exit 0
fi
[ $# -eq 2 ] || usage
target=$1
seconds=$2
case "$seconds" in '' | *[!0-9]*) usage ;; esac
known=$(targets)
if ! grep -qx -- "$target" <<<"$known"; then
    echo "$0: no target named '$target'; the targets are:" >&2
    echo "$known" >&2
    exit 2
fi

if ! command -v cargo-afl >/dev/null; then
    echo "installing cargo-afl (builds AFL++)"
    cargo install --locked cargo-afl
fi
# Builds AFL++ for the current toolchain if it was not yet (after a toolchain update); says
# "already built" and fails otherwise, which is fine.
cargo afl config --build >/dev/null 2>&1 || true

echo "building the instrumented target (fuzz/afl)"
(cd fuzz/afl && cargo afl build --release --quiet)
bin=$PWD/fuzz/afl/target/release/fuzz-afl

root=${FUZZ_DIR:-target/fuzz}/$target
out=$root/out
mkdir -p "$root"
findings() {
    find "$out/default/crashes" "$out/default/hangs" -type f -name 'id:*' 2>/dev/null | sort
}
if [ "${FUZZ_RESUME:-0}" = 1 ] && [ -d "$out/default/queue" ]; then
    input=-
    echo "resuming $out"
else
    if [ -d "$out" ]; then
        if [ -n "$(findings)" ]; then
            kept=$root/out-$(date +%Y%m%d-%H%M%S)
            mv "$out" "$kept"
            echo "the previous run's findings are kept in $kept"
        else
            rm -rf "$out"
        fi
    fi
    rm -rf "$root/seeds"
    cargo run --quiet -p fuzz -- seeds "$target" "$root/seeds"
    input=$root/seeds
fi

# No terminal UI; no CPU frequency or core-dump checks (CI machines); no CPU binding (the
# machine is shared); afl-fuzz stops by itself after $seconds (-V), and `timeout` makes sure.
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
export AFL_SKIP_CRASHES=0 AFL_AUTORESUME=0
echo "fuzzing $target for ${seconds}s: $out"
status=0
# shellcheck disable=SC2086 # FUZZ_AFL_ARGS is a list of options
timeout --signal=INT --kill-after=30 $((seconds + 120)) \
    cargo afl fuzz -i "$input" -o "$out" -V "$seconds" -t "${FUZZ_TIMEOUT:-2000}" \
    ${FUZZ_AFL_ARGS:-} -- "$bin" "$target" >"$root/afl.log" 2>&1 || status=$?

stats=$out/default/fuzzer_stats
if [ -f "$stats" ]; then
    awk -F' *: *' '$1 ~ /^(execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs|stability)$/ {
        printf "  %-14s %s\n", $1, $2 }' "$stats"
fi
found=$(findings)
if [ -n "$found" ]; then
    echo "FOUND $(echo "$found" | wc -l) crash(es)/hang(s) in $target:"
    echo "$found" | sed 's/^/  /'
    first=$(echo "$found" | head -n 1)
    echo "replay one (uninstrumented, with a backtrace):"
    echo "  RUST_BACKTRACE=1 cargo run -p fuzz -- run $target '$first'"
    echo "minimise it:"
    echo "  cargo afl tmin -i '$first' -o min.input -- $bin $target"
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "afl-fuzz failed (exit status $status); its log, $root/afl.log, ends with:" >&2
    tail -n 30 "$root/afl.log" >&2
    exit 2
fi
echo "no crash and no hang in $target"
