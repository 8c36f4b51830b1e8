# upstream-hsakmt: AMD's libhsakmt under upstream's criu and plugin, and across to ours: the
# libhsakmt probe of rocm-hsakmt (ci/rocm/hsakmt-probe.c: VRAM, GTT and host-visible VRAM checked
# through their mappings, userptr, events, an SDMA queue and a copy through it) held by criu with
# all of that, dumped by one plugin and restored by the other, under upstream's criu v4.2 (two
# simulated MI210s) and criu-dev (one simulated MI50: criu-dev's own restore is wrong on two GPUs,
# see upstream-dev):
#   up-up-same     upstream dumps, upstream restores on the same node;
#   up-ours-remap  upstream dumps, ours restores on node B (other gpu ids and render minors), where
#                  libhsakmt's files are not in /dev/shm: ours recreates them;
#   ours-up-back   ours dumps, upstream restores on node A, its /dev/shm emptied too: upstream's
#                  plugin recreates them.
# After each restore the probe checks its data through its mappings and copies again through its
# restored queue. In up-up-same the probe is the only libhsakmt process: it created libhsakmt's
# semaphore, criu dumps it with --link-remap (see rocm-hsakmt) and the restore is on the same
# node. In the other two another libhsakmt process (the keeper) holds libhsakmt's files when the
# probe starts, so it maps them by their real names and criu dumps it without --link-remap; the
# keeper is killed before the restore.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

build_hsakmt_probe

# between: what runs between a dump and its restore: kfd-simd on node NEXT_NODE; when EMPTY_SHM
# is 1, the keeper killed and libhsakmt's files removed from /dev/shm; the restorer's plugin.
between() {
    if [[ $EMPTY_SHM == 1 ]]; then
        stop_shm_keeper
        shm_emptied
    fi
    node "$NEXT_NODE"
    use_plugin "$NEXT_PLUGIN"
}

# direction NAME DUMPER RESTORER NODE ELSEWHERE: one held probe dumped with DUMPER's plugin and
# restored with RESTORER's on NODE; with ELSEWHERE 1, started beside the keeper, dumped without
# --link-remap, restored where libhsakmt's files are missing.
direction() {
    local t0=$SECONDS
    note "---- $1: $2 dumps on node ${NODE%%:*}, $3 restores on node $4"
    use_plugin "$2"
    NEXT_PLUGIN=$3 NEXT_NODE=$4 EMPTY_SHM=$5
    if [[ $5 == 1 ]]; then
        start_shm_keeper
        PROBE_DUMP_ARGS=()
        PROBE_AFTER_RESTORE=shm_recreated
    else
        PROBE_DUMP_ARGS=(--link-remap)
        PROBE_AFTER_RESTORE=
    fi
    held_probe_cycle "$1" between
    check_restore_log "$3" "$VM_LANE_OUT/criu/$1-images-restore.log"
    note "---- $1: the restored probe checked its data and copied again ($((SECONDS - t0))s)"
}

for criu in v4.2 dev; do
    use_criu "$criu"
    if [[ $criu == dev ]]; then UP_PRESET=mi50x1; fi
    node A
    direction "$criu-up-up-same" up up A 0
    direction "$criu-up-ours-remap" up ours B 1
    direction "$criu-ours-up-back" ours up A 1
done
simd_warns_only "$LIST_HANDLES_WARNING"
kernel_log_clean
pass
