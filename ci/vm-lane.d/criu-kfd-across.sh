# criu-kfd-across: an image made by bookworm's criu 3.17.1 restores with trixie's criu 4.1.1.
# On bookworm, criu dumps kfd-workload (with our plugin) and the images go to the carry share;
# on trixie, which runs beside it in the same ci/vm-lane run, criu restores them (once bookworm
# has finished this scenario) on a fresh kfd-simd with the same GPUs, and the workload verifies
# every byte, queue and event. (Without the bookworm guest in the run, trixie skips it.)
#
# criu reopens every file of the process by path and checks it is the same file, so the process
# must see the same files at the same paths in both guests:
# - each guest's /lib is its own distribution's, so the workload runs the host's own loader and
#   libraries, from /hostroot (the host root in both guests), and so does its executable;
# - its output goes to the results share, which the restoring guest mounts at the same path: the
#   output files are carried over and put back there, at the sizes they had at the dump;
# - its pid is taken above what a fresh guest uses, so that it is free in the second guest.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

carry=$VM_LANE_CARRY/$VM_LANE_SCENARIO
# A path as the host sees it (its symlinks resolved in the host's root), under /hostroot.
host_path() { printf '/hostroot%s\n' "$(chroot /hostroot realpath -e "$1")"; }

dump_side() {
    local ld libdir
    ld=$(host_path /lib64/ld-linux-x86-64.so.2)
    libdir=$(host_path /lib/x86_64-linux-gnu)
    WORKLOAD_EXEC=("$ld" --library-path "$libdir" "$(host_path "$KFD_BIN/kfd-workload")")
    start_simd --preset mi210x2
    echo 30000 >/proc/sys/kernel/ns_last_pid
    start_workload
    # Nothing of the guest's own root may be mapped: the other guest has other files there.
    local own
    own=$(awk '$6 ~ /^\// && $6 !~ /^\/(hostroot\/|dev\/|memfd:)/ {print $6}' "/proc/$WORKLOAD_PID/maps" | sort -u)
    [[ -z $own ]] || fail "the workload maps files of this guest's root: $own"
    dump_workload
    rm -rf "$carry"
    mkdir -p "$carry"
    cp -a "$IMAGES" "$carry/images"
    cp "$VM_LANE_OUT/workload.out" "$VM_LANE_OUT/workload.err" "$carry/"
    printf '%s\n' "$WORKLOAD_PID" >"$carry/pid"
    printf '%s %s\n' "$VM_LANE_GUEST" "$VM_LANE_CRIU_VERSION" >"$carry/made-by"
    note "images of pid $WORKLOAD_PID made by criu $VM_LANE_CRIU_VERSION left for the next guest"
    pass
}

restore_side() {
    local made_by
    made_by=$(cat "$carry/made-by")
    note "restoring pid $(cat "$carry/pid") from images made on $made_by"
    WORKLOAD_PID=$(cat "$carry/pid")
    ! kill -0 "$WORKLOAD_PID" 2>/dev/null || fail "pid $WORKLOAD_PID is taken in this guest"
    start_simd --preset mi210x2
    cp -a "$carry/images" "$IMAGES"
    cp "$carry/workload.out" "$carry/workload.err" "$VM_LANE_OUT/"
    criu_restore "$IMAGES"
    echo "$WORKLOAD_PID" >>"$VM_LANE_WORK/pids"
    verify_restored
    note "criu $VM_LANE_CRIU_VERSION restored what $made_by dumped"
    pass
}

case $VM_LANE_GUEST in
    bookworm) dump_side ;;
    *)
        wait_for_guest bookworm "$VM_LANE_SCENARIO" ||
            skip "no bookworm guest in this run (run ci/vm-lane --guest all)"
        [[ -f $carry/made-by ]] ||
            skip "the bookworm guest left no image (see bookworm/$VM_LANE_SCENARIO)"
        restore_side
        ;;
esac
