# criu-kfd-inventory (criu >= 4.1): criu 4.1 lists in inventory.img the plugins a dump needs, and
# refuses to restore it without them. With our plugin loaded:
# - a dump of kfd-workload lists amdgpu_plugin (read with crit, criu's own image decoder), and
#   that image restores (the plugin claims its entry) and verifies;
# - a dump of a process without GPU files does not list it, and its restore goes through with the
#   plugin staying out of it.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
need_criu 4.1
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

command -v crit >/dev/null || fail "no crit in this guest (python3-pycriu)"
# plugins DIR: the plugins DIR's inventory.img lists, one a line (crit decodes it to JSON).
plugins() {
    crit decode -i "$1/inventory.img" >"$VM_LANE_OUT/$(basename "$1")-inventory.json" ||
        fail "crit cannot decode $1/inventory.img"
    python3 -c '
import json, sys
entry = json.load(open(sys.argv[1]))["entries"][0]
print("\n".join(entry.get("plugins_entry", {}).get("plugins", [])))
' "$VM_LANE_OUT/$(basename "$1")-inventory.json"
}

# 1. A GPU process: listed, and restored.
start_simd --preset mi210x2
start_workload
dump_workload
listed=$(plugins "$IMAGES")
note "inventory.img of the kfd-workload dump lists: ${listed:-nothing}"
grep -qx amdgpu_plugin <<<"$listed" || fail "inventory.img does not list amdgpu_plugin"
criu_restore "$IMAGES"
! grep -q 'Missing required plugin' "$VM_LANE_OUT/criu/images-restore.log" ||
    fail "criu missed a plugin: $(grep -m 1 'Missing required plugin' "$VM_LANE_OUT/criu/images-restore.log")"
verify_restored

# 2. A process without GPU files: not listed; its restore goes on without the plugin.
plain=$VM_LANE_WORK/plain
pid=$(start_detached sleeper sleep 1000)
criu_dump "$pid" "$plain"
listed=$(plugins "$plain")
note "inventory.img of a plain process lists: ${listed:-nothing}"
! grep -qx amdgpu_plugin <<<"$listed" || fail "a dump without GPU objects lists amdgpu_plugin"
criu_restore "$plain"
grep -q 'amdgpu_plugin: .*does not list amdgpu_plugin: staying out of this restore' \
    "$VM_LANE_OUT/criu/plain-restore.log" || fail "the plugin did not stay out of the plain restore"
kill -0 "$pid" || fail "the plain process was not restored"
pass
