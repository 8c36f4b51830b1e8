# rocm-hsa: ROCr programs of ours (ci/rocm, built once on the host against the guest release's
# ROCr by ci/rocm/build.sh) on kfd-simd served through the kfd_bridge module with the simulated
# sysfs mounted where the kernel puts it:
#
# 1. hsa-probe: hsa_init, the agents, their memory pools, VRAM and host buffers from
#    hsa_amd_memory_pool_allocate, a round trip host -> VRAM -> host with
#    hsa_amd_memory_async_copy (ROCr's SDMA queues, run by kfd-simd's user-mode queue engine:
#    HDP flush, copy, ATOMIC decrement of the completion signal, FENCE + TRAP of its event), then
#    hsa_memory_copy, which ROCr makes with a blit kernel on an AQL queue.
# 2. hsa-compute: hsa_memory_copy in every direction (host, VRAM, locked malloc memory, the other
#    GPU's VRAM), hsa_amd_memory_fill, then our kernels (hsa-kernels.cl, built by clang-15) loaded
#    through ROCr's executable API and dispatched on an AQL queue: vector add, an LDS reduction
#    with barriers, atomics, cross-lane shuffles, a 2D grid, double precision, 64-bit indexing;
#    every result compared with the CPU's.
# 3. hsa-long: a long kernel (xorshift chains with a progress counter in host memory), checked
#    against the CPU, then a second dispatch on the same queue.
# 4. real criu dumps a probe holding ROCr's state (SDMA queues, signals, events, VRAM and host
#    buffers) and restores it, on the same node and on one with other gpu ids and render minors;
#    the restored probe checks its buffers, makes a new round trip through the restored SDMA
#    queues and (with the command processor) hsa_memory_copy, frees everything and shuts ROCr down.
#
# Until kfd-simd has an AQL command processor it executes no packet of an AQL queue (it logs the
# first one rung: "not executed, there is no command processor"): then the scenario asserts that
# each program stops exactly at its first kernel dispatch (hsa-probe at memcpy, hsa-compute at
# copy_h2d, hsa-long at load: the loader copies the code object to VRAM with a blit kernel) and
# passes with that said in its verdict; with the command processor every program must run to its
# checked results.
#
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

need_rocm_programs hsa-probe hsa-compute hsa-long hsa-kernels.co
note "ROCr $(dpkg-query -W -f '${Version}' libhsa-runtime64-1 2>/dev/null)"
probe=$ROCM_PROGRAMS/hsa-probe
code_object=$ROCM_PROGRAMS/hsa-kernels.co

start_probe_simd

# 1. The probe once, traced.
rc=0
timeout -k 5 180 strace -f --seccomp-bpf -e 'trace=openat,ioctl,mmap' -o "$VM_LANE_OUT/probe.strace" \
    "$probe" >"$VM_LANE_OUT/probe.out" 2>"$VM_LANE_OUT/probe.err" || rc=$?
note "hsa-probe: status $rc; steps: $(probe_steps "$VM_LANE_OUT/probe.out")"
grep '^GPU agent' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "hsa-probe issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"
! grep -q 'SDMA queue .* hung' "$VM_LANE_OUT/simd.err" ||
    fail "an SDMA queue of ROCr hung: $(grep 'SDMA queue .* hung' "$VM_LANE_OUT/simd.err")"
[[ $(grep -c '^GPU agent .*: gfx90a, AMD Instinct MI210, 104 CUs' "$VM_LANE_OUT/probe.out") == 2 ]] ||
    fail "ROCr does not see the preset's two MI210s"
[[ $(probe_steps "$VM_LANE_OUT/probe.out") == "init agents pools alloc h2d d2h"* ]] ||
    fail "hsa-probe stopped before hsa_memory_copy: $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
note "ROCr: hsa_init, agents, pools, allocations, SDMA copies host -> VRAM -> host"
grep 'queue [0-9]* created' "$VM_LANE_OUT/simd.err" | while read -r line; do note "kfd-simd: $line"; done
PROGRAM_RC=$rc
SIMD_LINES_BEFORE=0
cp "$VM_LANE_OUT/probe.out" "$VM_LANE_OUT/hsa-probe.out"
probe_copies=true
program_result hsa-probe || probe_copies=false

# 2. and 3. The programs that compute.
run_program hsa-compute 3600 "$ROCM_PROGRAMS/hsa-compute" --code-object "$code_object" \
    --step-seconds 120
program_result hsa-compute || true
run_program hsa-long 2400 "$ROCM_PROGRAMS/hsa-long" --code-object "$code_object" \
    --items 1024 --steps 65536 --step-seconds 120
program_result hsa-long || true

# 4. criu dumps a probe holding ROCr's state and restores it; the restored probe copies again
# (where hsa_memory_copy completed in 1., with it too: a blit kernel on an AQL queue it creates
# after the restore).
no_memory_copy=()
$probe_copies || no_memory_copy=(--no-memory-copy)
probe_cycle held 120 "$probe" "${no_memory_copy[@]}"
probe_cycle remapped 120 --between probe_remap_node "$probe" "${no_memory_copy[@]}"
rocm_verdict "hsa-probe, hsa-compute and hsa-long"
