# drm-ordered: render-node buffers checkpointed and restored on a kernel that refuses
# DRM_IOCTL_GEM_CHANGE_HANDLE (EINVAL, as every kernel fixed in June 2026 answers it), with the
# guest's own criu and our plugin, on kfd-simd's Linux 7.2 personality (`serve --kernel 7.2`).
#
# kfd-workload on one simulated MI50, on user-mode queues through the kfd_bridge module, with two
# render-node buffers (1 MiB, 64 KiB) that it writes by SDMA and verifies with the rest: dumped and
# restored on the same node, then dumped again and restored on node B (another gpu id and render
# minor). The plugin cannot move a restored buffer to its handle there; it makes the buffers in
# ascending handle order with placeholders below each, and says so in criu's log. The restored
# workload finds its buffers under their old handles (it addresses them by handle when it verifies
# and when it ticks), and kfd-simd has nothing to warn about.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=mapped.inc
. "$VM_LANE_REPO/ci/vm-lane.d/mapped.inc"

# The 7.2 stack's own question: shown on the forky guest (criu 4.2.1, Linux 7.2), once.
need_guest forky
KFD_LANE_DMA=queues
need_kmod

# The plugin's line when it finds GEM_CHANGE_HANDLE refused.
ORDERED_LINE='answers DRM_IOCTL_GEM_CHANGE_HANDLE with EINVAL'

# checkpoint NAME: dumps the workload into $VM_LANE_WORK/NAME and checks that both render-node
# buffers are in the images.
checkpoint() {
    local dir=$VM_LANE_WORK/$1 n
    criu_dump "$WORKLOAD_PID" "$dir"
    n=$(find "$dir" -name 'amdgpu-drm-pages-*.img' | wc -l)
    ((n == 2)) || fail "$1: the dump wrote $n render-node pages files, not 2"
    note "$1: 2 render-node buffers in the images"
}

# restored NAME: restores $VM_LANE_WORK/NAME, checks that the plugin made the buffers in order,
# and has the workload verify itself.
restored() {
    criu_restore "$VM_LANE_WORK/$1"
    grep -q "$ORDERED_LINE" "$VM_LANE_OUT/criu/$1-restore.log" ||
        fail "$1: the plugin did not say it made the render-node buffers in order (criu/$1-restore.log)"
    verify_restored
    note "$1: restored and verified"
}

start_mapped_simd --preset mi50x1 --kernel 7.2 --sysfs-dir "$KFD_SYSFS-A"
mount_sim_sysfs "$KFD_SYSFS-A"
start_workload --dma queues --render-kib 1024,64
checkpoint same
restored same
checkpoint remap
umount_sim_sysfs
stop_simd
"$KFD_BIN/kfd-simd" show mi50x1 --gpu-ids "${REMAP_IDS%%,*}" --render-minors "${REMAP_MINORS%%,*}" \
    >"$VM_LANE_WORK/node-B.toml"
start_mapped_simd --file "$VM_LANE_WORK/node-B.toml" --kernel 7.2 --sysfs-dir "$KFD_SYSFS-B"
mount_sim_sysfs "$KFD_SYSFS-B"
restored remap
other=$(cat "$VM_LANE_OUT"/simd*.err | grep -v '^\[\(INFO\|DEBUG\|TRACE\)\]' || true)
[[ -z $other ]] || fail "kfd-simd warned: $other"
kernel_log_clean
pass
