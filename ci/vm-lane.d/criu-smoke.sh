# criu-smoke: the real criu dumps a looping counter process and restores it; the counter must go on
# from where it was (its state lived only in the shell's memory).
# shellcheck source=lib.sh
. "$VM_LANE_LIB"

count_file=$VM_LANE_WORK/count
counter() { cat "$count_file" 2>/dev/null || echo 0; }
# shellcheck disable=SC2317 # called through wait_for
count_at_least() { (($(counter) >= $1)); }

# shellcheck disable=SC2016 # the loop is the counter's own script
pid=$(start_detached counter sh -c \
    'i=0; while :; do i=$((i+1)); echo $i >"$0.tmp"; mv "$0.tmp" "$0"; sleep 0.1; done' "$count_file")
note "counter started as pid $pid"
# Let it count for a while, so that a restart from scratch could not pass for a restore.
wait_for "the counter to reach 10" 60 count_at_least 10

criu_dump "$pid" "$VM_LANE_WORK/images"
kill -0 "$pid" 2>/dev/null && fail "pid $pid still runs after the dump"
at_dump=$(counter)
note "dumped at count $at_dump"

# shellcheck disable=SC2317 # called through wait_for
counting_on_from_dump() {
    local now
    now=$(counter)
    # A fresh start would count from 1 again; the restored shell goes on from its memory.
    ((now >= at_dump)) || fail "the counter fell back to $now (dumped at $at_dump): not restored"
    ((now >= at_dump + $1))
}

criu_restore "$VM_LANE_WORK/images"
kill -0 "$pid" 2>/dev/null || fail "pid $pid is not running after the restore"
wait_for "the counter to go on past $at_dump" 60 counting_on_from_dump 5
note "restored; count now $(counter)"
pass
