# criu-kfd-cuse-cs: the mode for devices that cannot be mapped. kfd-simd serves plain CUSE (no
# kfd_bridge module: a CUSE device has no mmap), so kfd-workload moves its data by the render
# node's command submission (`--dma cs`: AMDGPU_CS on the DMA ring, which ROCm never does) and maps
# nothing. criu dumps and restores it on the same node and the workload verifies every byte, queue
# and event. What this mode loses against the other criu-kfd-* scenarios (kfd_bridge, `dma=queues`):
# no device VMAs (doorbells, events page, host-visible buffers) reach the plugin's VMA hooks, no
# user-mode queue ring or doorbell is frozen and resumed, and a tick step frozen between its
# submission and its wait runs again on new render-node objects after the restore (contexts, GEM
# handles and VA mappings of render nodes are not checkpointed, as upstream): `rebuilds=` in the
# VERIFY line counts those steps.
KFD_LANE_PLAIN_CUSE=1
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
grep -q 'kfd_bridge proxy' "$VM_LANE_OUT/simd.out" && fail "kfd-simd served through the kfd_bridge module"
start_workload --dma cs
dump_workload
criu_restore "$IMAGES"
verify_restored
note "$(grep -o 'rebuilds=[0-9]*' "$VM_LANE_OUT/workload.out" | tail -n 1) (tick steps run again on new render-node objects)"
pass
