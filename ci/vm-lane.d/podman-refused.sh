# podman-refused: a container checkpointed (--export) on a node whose GPUs run newer firmware is
# restored (--import) on one with older firmware, with the plugin's checks on (the default): the
# restore fails, criu's log (the runtime's restore.log, kept by --keep) has the plugin's reason
# naming KFD_FW_VER_CHECK, and nothing is left behind: no container running, the device files the
# restore opened released again. The plugin refuses at /dev/kfd's RESTORE_EXT_FILE, before it
# opens /dev/kfd: only the render nodes were opened (measured 2026-12-03), so kfd-simd has no KFD
# process of the restore to release.
# trixie only (podman 5, crun, criu 4.1.1).
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=podman.inc
. "$VM_LANE_REPO/ci/vm-lane.d/podman.inc"

# kfd-simd logs every open of its devices at debug.
export KFD_SIMD_LOG=debug
"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 90 >"$VM_LANE_WORK/newer.toml"
"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 60 >"$VM_LANE_WORK/older.toml"
podman_setup --file "$VM_LANE_WORK/newer.toml"
run_gpu_container g3 128 129
archive=$VM_LANE_WORK/g3.tar.gz
podman_cr checkpoint g3 export --export "$archive" --compress gzip || fail "podman checkpoint --export failed (criu's log: criu/g3-export-dump.log)"
pm rm -f g3 >/dev/null || fail "podman rm g3 failed"

gpu_node_restart --file "$VM_LANE_WORK/older.toml"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")
if podman_cr restore g3 import --import "$archive"; then
    fail "podman restored onto older firmware"
fi
note "podman says: $(tail -n 3 "$VM_LANE_OUT/g3-import.podman" | paste -sd ' ')"
log=$VM_LANE_OUT/criu/g3-import-restore.log
[[ -f $log ]] || fail "no restore.log of the failed restore (podman --keep)"
grep 'amdgpu_plugin: .*KFD_FW_VER_CHECK' "$log" || fail "the plugin's reason is not in criu's log"
# podman keeps the imported container, not running ("created"); the render nodes the restore
# opened are released.
nothing_left_since "$seen" g3 "the failed restore"
pass
