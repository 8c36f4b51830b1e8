# criu-kfd-refused: the restore node's GPUs have older firmware than the image's, so the plugin
# refuses the restore with its explanation in criu's log (naming KFD_FW_VER_CHECK); with
# KFD_FW_VER_CHECK=0 in criu's environment the same restore goes through and verifies.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 90 >"$VM_LANE_WORK/newer.toml"
"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 60 >"$VM_LANE_WORK/older.toml"
start_simd --file "$VM_LANE_WORK/newer.toml"
start_workload
dump_workload
stop_simd
start_simd --file "$VM_LANE_WORK/older.toml"
rc=0
criu_run restore "$IMAGES" -d || rc=$?
((rc != 0)) || fail "criu restored onto older firmware"
log=$VM_LANE_OUT/criu/images-restore.log
grep -q 'amdgpu_plugin: .*KFD_FW_VER_CHECK' "$log" || fail "the plugin's reason is not in criu's log"
note "$(grep -m 3 'amdgpu_plugin:' "$log")"
mv "$log" "$VM_LANE_OUT/criu/images-restore-refused.log"
KFD_FW_VER_CHECK=0 criu_restore "$IMAGES"
verify_restored
pass
