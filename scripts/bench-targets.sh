#!/usr/bin/env bash
# Runs every benchmark target of issue 18 with `amdgpu-cr bench --json` and prints one table,
# each target met or not met, with the figures it was judged on.
#
#   scripts/bench-targets.sh [--dir DIR] [--out DIR] [--skip-8g]
#
#   --dir DIR   where the bench writes its files (default: the bench's own choice, $TMPDIR);
#               the --sync runs measure that directory's disk
#   --out DIR   keep every run's JSON there (default: a new temporary directory, printed)
#   --skip-8g   leave out the one 8 GiB buffer run (it needs 8 GiB of memory for the simulated
#               VRAM and takes the longest)
#
# Runs, in this order (one each unless said):
#   1. --gpus 1                           speedup over upstream's data path >= 1.5, dump and
#                                         restore (page cache)
#   2. --gpus 1 --sync                    the same from the disk
#   3. default (2 GPUs)                   speedup >= 1.0 both ways; our peak extra anonymous
#                                         memory <= staging + 1 MiB, upstream's >= its largest
#                                         buffer; the plugin's own CPU per GiB <= 1.35x the raw
#                                         write's (dump) and the raw read's (restore)
#   4. --gpus 1 --zero-fraction 0.75      bytes on disk <= 0.3 of the payload; restore >= 2x and
#                                         dump >= 1.3x faster than run 1 (no zeros)
#   5. --bo-size 8G --size 8G --gpus 1 --no-upstream
#                                         completes with the same peak extra memory as run 3's
#                                         per GPU (<= staging + 1 MiB)
#   6. --sync --no-upstream, 3 runs       medians: dump >= 0.85 of the raw write (with fsync),
#                                         restore >= 0.9 of the raw read (from the disk)
#
# The machine should be idle: every figure is a time or a CPU time, and other work on the cores
# or the disk shows in them. The load average is printed before and after. Exit status 0 when
# every target is met, 1 when one is not, 2 when a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=()
out=""
skip8=0
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir=(--dir "$2"); shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --skip-8g) skip8=1; shift ;;
        *) echo "usage: $0 [--dir DIR] [--out DIR] [--skip-8g]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out="$(mktemp -d /tmp/bench-targets.XXXXXX)"
mkdir -p "$out"

cargo build --quiet --release -p amdgpu-cr
bin=target/release/amdgpu-cr

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); JSON in $out"
run() {
    local name="$1"
    shift
    echo "  run $name: amdgpu-cr bench $* --json" >&2
    if ! "$bin" bench "${dir[@]}" "$@" --json >"$out/$name.json"; then
        echo "bench run $name failed (output in $out/$name.json)" >&2
        exit 2
    fi
}
run gpu1 --gpus 1
run gpu1-sync --gpus 1 --sync
run default
run zeros --gpus 1 --zero-fraction 0.75
if [ "$skip8" = 0 ]; then
    run big --bo-size 8G --size 8G --gpus 1 --no-upstream
fi
for i in 1 2 3; do
    run "sync-$i" --sync --no-upstream
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$skip8" <<'EOF'
import json, statistics, sys

out, skip8 = sys.argv[1], sys.argv[2] == "1"
def load(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)

MiB, GiB = 1 << 20, 1 << 30
rows = []
def target(what, ok, figures):
    rows.append((what, "met" if ok else "NOT MET", figures))

g1, g1s, d, z = load("gpu1"), load("gpu1-sync"), load("default"), load("zeros")
for name, r in (("1 GPU, page cache", g1), ("1 GPU, --sync", g1s)):
    s = r["speedup"]
    target(f"{name}: speedup over upstream >= 1.5 (dump, restore)",
           s["dump"] >= 1.5 and s["restore"] >= 1.5,
           f"dump {s['dump']:.2f}x ({r['dump']['seconds']:.2f} s vs {r['upstream']['dump']['seconds']:.2f} s), "
           f"restore {s['restore']:.2f}x ({r['restore']['seconds']:.2f} s vs {r['upstream']['restore']['seconds']:.2f} s)")
s = d["speedup"]
target("2 GPUs: never slower than upstream (speedup >= 1.0)",
       s["dump"] >= 1.0 and s["restore"] >= 1.0,
       f"dump {s['dump']:.2f}x, restore {s['restore']:.2f}x")
ours, staging = d["peak_extra_anon_bytes"], d["staging_bytes"]
up = max(d["upstream"]["dump"]["peak_extra_anon_bytes"], d["upstream"]["restore"]["peak_extra_anon_bytes"])
largest = 256 * MiB
target("2 GPUs: peak extra memory, ours <= staging + 1 MiB, upstream's >= largest BO",
       ours <= staging + MiB and up >= largest,
       f"ours {ours / MiB:.1f} MiB (staging {staging / MiB:.0f} MiB), upstream {up / MiB:.1f} MiB")
gib = d["dump"]["bytes"] / GiB
for phase, raw in (("dump", "raw write"), ("restore", "raw read")):
    c = d["cpu"][phase]
    ratio = c["plugin_seconds"] / max(c["raw_seconds"], 1e-9)
    target(f"2 GPUs: plugin CPU per GiB <= 1.35x the {raw}'s ({phase})", ratio <= 1.35,
           f"{c['plugin_seconds'] / gib:.3f} vs {c['raw_seconds'] / gib:.3f} s/GiB = {ratio:.2f}x "
           f"(engine {c['engine_seconds'] / gib:.3f} s/GiB)")
disk = z["dump"]["bytes_on_disk"] / z["dump"]["bytes"]
target("--zero-fraction 0.75: bytes on disk <= 0.3 of the payload", disk <= 0.3,
       f"{disk:.3f} of {z['dump']['bytes'] / GiB:.1f} GiB")
rz = g1["restore"]["seconds"] / z["restore"]["seconds"]
dz = g1["dump"]["seconds"] / z["dump"]["seconds"]
target("--zero-fraction 0.75 vs 0 (1 GPU): restore >= 2x, dump >= 1.3x faster",
       rz >= 2 and dz >= 1.3, f"restore {rz:.2f}x, dump {dz:.2f}x")
if skip8:
    rows.append(("one 8 GiB BO in the same memory", "skipped", "--skip-8g"))
else:
    b = load("big")
    per_gpu = d["peak_extra_anon_bytes"] / 2
    target("one 8 GiB BO (--bo-size 8G --size 8G --gpus 1): same peak extra memory",
           b["peak_extra_anon_bytes"] <= b["staging_bytes"] + MiB,
           f"{b['peak_extra_anon_bytes'] / MiB:.1f} MiB (staging {b['staging_bytes'] / MiB:.0f} MiB; "
           f"2 GPUs: {per_gpu / MiB:.1f} MiB per GPU)")
syncs = [load(f"sync-{i}") for i in (1, 2, 3)]
dr = [r["dump"]["ratio"] for r in syncs]
rr = [r["restore"]["ratio"] for r in syncs]
target("--sync (2 GPUs), median of 3: dump >= 0.85 of raw write, restore >= 0.9 of raw read",
       statistics.median(dr) >= 0.85 and statistics.median(rr) >= 0.9,
       f"dump {statistics.median(dr):.2f} ({', '.join(f'{x:.2f}' for x in dr)}), "
       f"restore {statistics.median(rr):.2f} ({', '.join(f'{x:.2f}' for x in rr)})")

w = max(len(r[0]) for r in rows)
print(f"{'target':<{w}}  {'result':<8}  figures")
for what, res, fig in rows:
    print(f"{what:<{w}}  {res:<8}  {fig}")
sys.exit(0 if all(r[1] != "NOT MET" for r in rows) else 1)
EOF
