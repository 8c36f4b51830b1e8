# criu-kfd-mapped: criu dumps and restores kfd-workload on the same node while it holds its device
# mappings (mapped.inc: kfd-simd through the kfd_bridge module, the workload on user-mode SDMA
# queues): per GPU its doorbell page of /dev/kfd and its ring and staging buffer (host-visible
# GTT, render node), and the events page of /dev/kfd. criu hands the device VMAs to the plugin
# at dump and asks it for their restored offsets; after the restore /proc/PID/maps shows the same
# device VMAs, the contents verify through them (the staging buffer the queues copy through, the
# events page's slots), the queues rung through the restored doorbells complete and their events
# signal (ticks go on). The CRIU_OP dma-bufs arrive installed by the module, with no pidfd_getfd.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=mapped.inc
. "$VM_LANE_REPO/ci/vm-lane.d/mapped.inc"

start_mapped_simd
start_workload --dma queues
grep -q 'dma=queues' "$VM_LANE_OUT/workload.out" || fail "kfd-workload did not take user-mode queues"
device_vmas "$WORKLOAD_PID" >"$VM_LANE_OUT/vmas-before.txt"
check_device_vmas "$VM_LANE_OUT/vmas-before.txt" 2
note "device VMAs of kfd-workload: $(wc -l <"$VM_LANE_OUT/vmas-before.txt")"
dump_workload
note "$(grep -c 'supported via device plugins' "$VM_LANE_OUT/criu/images-dump.log" || true) device VMAs went to the plugin"
grep -q 'supported via device plugins' "$VM_LANE_OUT/criu/images-dump.log" ||
    fail "criu did not hand the device VMAs to the plugin"
criu_restore "$IMAGES"
device_vmas "$WORKLOAD_PID" >"$VM_LANE_OUT/vmas-after.txt"
diff <(same_vmas "$VM_LANE_OUT/vmas-before.txt") <(same_vmas "$VM_LANE_OUT/vmas-after.txt") ||
    fail "the restored kfd-workload does not have its device VMAs back"
verify_restored
page_slots_checked "$VM_LANE_OUT/workload.out"
ticks_go_on "through the restored doorbells"
! grep -q 'pidfd_getfd' "$VM_LANE_OUT"/criu/*.log || fail "the plugin fetched fds from the daemon"
kernel_log_clean
pass
