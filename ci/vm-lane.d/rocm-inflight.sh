# rocm-inflight: real criu dumps our long-running ROCm programs while their kernels run, and the
# restored processes finish and verify (issue "Checkpoint with kernels in flight", item 4):
#
# - hsa-long (ROCr): one long kernel (xorshift chains; a progress counter in host memory that the
#   program prints). It holds (prints HOLDING, waits for its trigger file) once the counter has
#   moved, without waiting for the kernel: criu dumps it with the kernel running, restores it, and
#   the restored kernel must complete with every chain and the counter equal to the CPU's (a wave
#   lost or run twice shows), then a second dispatch on the restored queue.
# - hip-loop (HIP): device-resident state updated by 1000 kernels, a long one every 250th; in the
#   middle it launches a batch with a long kernel and holds while they run; criu dumps and
#   restores it; at the end the state equals the CPU copy and every kernel ran exactly once.
#
# Each is dumped and restored on the same node, then, run anew, restored on a kfd-simd with other
# gpu ids and render minors (hsa-long dumped on the preset's node and restored on the other,
# hip-loop the other way round). The HOLDING line says whether the kernels were still in flight when
# the program held ("in flight: yes").
#
# Needs kfd-simd's compute wave save/restore for the dump to catch waves mid-kernel.
# Four checkpoints of programs that compute under TCG take longer than most scenarios:
# vm-lane-timeout: 2400
#
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

need_rocm_programs hsa-long hip-loop hsa-kernels.co
start_probe_simd

# The long kernel's size: KFD_INFLIGHT_ITEMS work-items of KFD_INFLIGHT_STEPS steps (default
# 1024 x 131072: about 2 minutes under TCG at load 5, 2026-12-05, where criu's dump takes 10-20 s
# to pause the queues after the program holds; 2048 x 1048576 ran 16 minutes).
hsa_long=("$ROCM_PROGRAMS/hsa-long" --code-object "$ROCM_PROGRAMS/hsa-kernels.co"
    --items "${KFD_INFLIGHT_ITEMS:-1024}" --steps "${KFD_INFLIGHT_STEPS:-131072}" --step-seconds 600)
hip_loop=("$ROCM_PROGRAMS/hip-loop" --kernels 400 --batch 50 --long-every 100 --long-steps 16384
    --step-seconds 600)

# A short run of hsa-long first: its kernels run on kfd-simd's command processor.
run_program hsa-long-first 120 "$ROCM_PROGRAMS/hsa-long" --code-object "$ROCM_PROGRAMS/hsa-kernels.co" \
    --items 256 --steps 4096 --step-seconds 30
program_result hsa-long-first || rocm_verdict "hsa-long's short run"

# in_flight NAME: what the program's HOLDING line said.
in_flight() { sed -n 's/^HOLDING [0-9]* (in flight: \([a-z]*\)).*/\1/p' "$VM_LANE_OUT/$1.out"; }

probe_cycle hsa-long-same 900 "${hsa_long[@]}"
note "hsa-long-same: in flight at the dump: $(in_flight hsa-long-same); $(grep -c '^PROGRESS' "$VM_LANE_OUT/hsa-long-same.out") progress lines"
[[ $(in_flight hsa-long-same) == yes ]] || fail "hsa-long's kernel had ended before the dump: nothing was in flight"
probe_cycle hip-loop-same 900 "${hip_loop[@]}"
note "hip-loop-same: in flight at the dump: $(in_flight hip-loop-same)"
probe_cycle hsa-long-remapped 900 --between probe_remap_node "${hsa_long[@]}"
note "hsa-long-remapped: in flight at the dump: $(in_flight hsa-long-remapped)"
# Dumped on the node with other gpu ids, restored on the preset's own.
probe_original_node() {
    umount_sim_sysfs
    stop_simd
    start_simd --preset mi210x2 --sysfs-dir "$KFD_SYSFS"
    mount_sim_sysfs
}
probe_cycle hip-loop-remapped 900 --between probe_original_node "${hip_loop[@]}"
note "hip-loop-remapped: in flight at the dump: $(in_flight hip-loop-remapped)"
simd_no_gone_mm
pass "hsa-long and hip-loop dumped with kernels in flight ($(in_flight hsa-long-same), $(in_flight hip-loop-same), $(in_flight hsa-long-remapped), $(in_flight hip-loop-remapped)), restored, verified"
