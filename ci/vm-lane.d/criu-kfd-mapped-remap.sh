# criu-kfd-mapped-remap: as criu-kfd-mapped, but kfd-simd restarts between dump and restore with
# the same GPUs under other gpu ids and render minors (mapped.inc's remap_node), so the plugin
# maps the GPUs and its answers to UPDATE_VMA_MAP move the mappings: a doorbell page's offset
# carries its GPU's new id, a render-node buffer is mapped from the render node its GPU has now,
# the events page stays at its offset. After the restore /proc/PID/maps shows the same ranges with
# those devices and offsets, and the workload verifies through them and ticks on.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=mapped.inc
. "$VM_LANE_REPO/ci/vm-lane.d/mapped.inc"

start_mapped_simd
start_workload --dma queues
device_vmas "$WORKLOAD_PID" >"$VM_LANE_OUT/vmas-before.txt"
check_device_vmas "$VM_LANE_OUT/vmas-before.txt" 2
dump_workload
remap_node
criu_restore "$IMAGES"
grep -q 'GPU mapping' "$VM_LANE_OUT/criu/images-restore.log" || note "(no mapping line in the restore log)"
device_vmas "$WORKLOAD_PID" >"$VM_LANE_OUT/vmas-after.txt"
check_device_vmas "$VM_LANE_OUT/vmas-after.txt" 2
diff <(canon_vmas "$VM_LANE_OUT/vmas-before.txt") <(canon_vmas "$VM_LANE_OUT/vmas-after.txt") ||
    fail "the restored kfd-workload does not have its device VMAs back at their addresses"
got_ids=$(doorbell_ids "$VM_LANE_OUT/vmas-after.txt")
[[ $got_ids == "$REMAP_IDS" ]] || fail "the restored doorbell pages have the gpu ids $got_ids, expected $REMAP_IDS"
minors=$(render_minors "$VM_LANE_OUT/vmas-after.txt")
[[ $minors == "$REMAP_MINORS" ]] || fail "the restored buffers are mapped from render minors $minors, expected $REMAP_MINORS"
note "doorbells: $(doorbell_ids "$VM_LANE_OUT/vmas-before.txt") -> $got_ids; render minors $(render_minors "$VM_LANE_OUT/vmas-before.txt") -> $minors"
verify_restored
page_slots_checked "$VM_LANE_OUT/workload.out"
ticks_go_on "through the restored doorbells of the new GPU ids"
kernel_log_clean
pass
