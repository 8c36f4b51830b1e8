# criu-kfd-remap: as criu-kfd-same, but kfd-simd restarts between dump and restore with the same
# GPUs under other gpu ids and render minors, so the plugin maps the GPUs; the restored workload
# keeps using its old ids and verifies.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
start_workload
dump_workload
stop_simd
"$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4242,0x4343 --render-minors 130,131 >"$VM_LANE_WORK/variant.toml"
start_simd --file "$VM_LANE_WORK/variant.toml"
criu_restore "$IMAGES"
grep -q 'GPU mapping' "$VM_LANE_OUT/criu/images-restore.log" || note "(no mapping line in the restore log)"
verify_restored
pass
