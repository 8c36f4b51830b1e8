# rocm-hip: HIP programs of ours (ci/rocm, built once on the host by ci/rocm/build.sh with the
# guest release's hipcc: HIP 5.2.3 on bookworm, 5.7.1 in the trixie root) on kfd-simd served
# through the kfd_bridge module with the simulated sysfs mounted:
#
# 1. hip-probe: hipInit, the device's properties, hipMalloc, hipHostMalloc, hipMemcpy host ->
#    device -> device -> host (HIP copies with its blit kernels on AQL queues).
# 2. hip-compute: hipMemcpy in every direction with pinned and pageable host memory,
#    hipMemcpyDefault, odd sizes and offsets, hipMemset and hipMemsetD32, two streams with events
#    and hipMemcpyAsync, and kernels: vector add, an LDS reduction with barriers, atomics, warp
#    shuffles, a 2D grid, double precision, 64-bit indexing; every result compared with the CPU's.
# 3. hip-loop: device-resident state updated by 600 kernels in a loop (a long one every 200th),
#    compared at the end with a CPU copy, each kernel counted and logged once.
# 4. with the command processor, when hip-probe ran to its end: real criu dumps hip-probe holding
#    HIP's state (its AQL queues idle, device and pinned buffers) and restores it, on the same
#    node and remapped; the restored probe checks its buffers and copies again through the
#    restored queues.
#
# Until kfd-simd has an AQL command processor it executes no packet of an AQL queue (it logs the
# first one rung: "not executed, there is no command processor"): then the scenario asserts that
# each program stops exactly at its first kernel dispatch (hip-probe and hip-compute at their
# first hipMemcpy, hip-loop at setup's), skips the criu cycle (a HIP program holds nothing worth
# dumping before its first copy) and passes with that said in its verdict; with the command
# processor every program must run to its checked results.
#
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

need_rocm_programs hip-probe hip-compute hip-loop
note "HIP $(dpkg-query -W -f '${Version}' libamdhip64-5 2>/dev/null)"
probe=$ROCM_PROGRAMS/hip-probe

start_probe_simd

# 1. The probe once, traced.
rc=0
timeout -k 5 300 strace -f --seccomp-bpf -e 'trace=openat,ioctl,mmap' -o "$VM_LANE_OUT/probe.strace" \
    "$probe" >"$VM_LANE_OUT/probe.out" 2>"$VM_LANE_OUT/probe.err" || rc=$?
note "hip-probe: status $rc; steps: $(probe_steps "$VM_LANE_OUT/probe.out")"
grep '^STEP init' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
grep -E 'not simulated|hung|logged once|queue [0-9]* created' "$VM_LANE_OUT/simd.err" |
    while read -r line; do note "kfd-simd: $line"; done
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "hip-probe issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"
grep -q '^STEP init ok: 2 devices; device 0: AMD Instinct MI210, gfx90a.*, 104 CUs' "$VM_LANE_OUT/probe.out" ||
    fail "HIP does not see the preset's two MI210s: $(grep -E '^(STEP init|STOP)' "$VM_LANE_OUT/probe.out")"
[[ $(probe_steps "$VM_LANE_OUT/probe.out") == "init malloc"* ]] ||
    fail "hip-probe stopped before its first copy: $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
note "HIP: hipInit, device properties, hipMalloc, hipHostMalloc"
PROGRAM_RC=$rc
SIMD_LINES_BEFORE=0
cp "$VM_LANE_OUT/probe.out" "$VM_LANE_OUT/hip-probe.out"
probe_done=true
program_result hip-probe || probe_done=false

# 2. and 3. The programs that compute.
run_program hip-compute 3600 "$ROCM_PROGRAMS/hip-compute" --step-seconds 120
program_result hip-compute || true
run_program hip-loop 2400 "$ROCM_PROGRAMS/hip-loop" --kernels 600 --batch 100 \
    --long-every 200 --long-steps 4096 --step-seconds 120
program_result hip-loop || true

# 4. criu dumps the probe holding HIP's state and restores it; the restored probe copies again.
if ! $probe_done; then
    note "no criu cycle: hip-probe did not run to its end"
else
    probe_cycle held 300 "$probe"
    probe_cycle remapped 300 --between probe_remap_node "$probe"
fi
rocm_verdict "hip-probe, hip-compute and hip-loop"
