#!/usr/bin/env python3
"""The block layer's view of a command's reads: runs COMMAND while sampling /sys/block/DEV/stat
every 10 ms, cuts the reads into bursts (reads separated by at least --gap seconds without one)
and prints, per burst of at least 64 MiB: its length, bytes and throughput, the read requests
the device completed (count, average size, merges), how busy the device was (io_ticks over
the burst's time), the average queue depth (time_in_queue over time) and the share of samples
with no request in flight.

    scripts/block-phases.py [--gap SECONDS] DEV -- COMMAND...

Use a device nobody else reads from while it runs (a loop device of one's own, for example,
whose read_ahead_kb and max_sectors_kb can be set like another disk's): the counters are the
device's, not the command's. docs/cold-restore.md shows what it measured.
"""

import argparse
import subprocess
import threading
import time

# /sys/block/DEV/stat fields (Documentation/block/stat.rst).
READS, READ_MERGES, READ_SECTORS = 0, 1, 2
IN_FLIGHT, IO_TICKS, TIME_IN_QUEUE = 8, 9, 10


def sample(dev, out, stop):
    while not stop.is_set():
        with open(f"/sys/block/{dev}/stat") as f:
            out.append((time.monotonic(), [int(x) for x in f.read().split()]))
        time.sleep(0.01)


def bursts(samples, gap):
    cur, last_read = None, None
    for i in range(1, len(samples)):
        t, v = samples[i]
        if v[READ_SECTORS] > samples[i - 1][1][READ_SECTORS]:
            if cur is None or t - last_read > gap:
                cur = [i - 1, i]
                yield cur
            cur[1] = i
            last_read = t


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gap", type=float, default=0.15)
    p.add_argument("dev")
    p.add_argument("command", nargs="+")
    a = p.parse_args()
    samples, stop = [], threading.Event()
    th = threading.Thread(target=sample, args=(a.dev, samples, stop))
    th.start()
    rc = subprocess.call(a.command)
    stop.set()
    th.join()
    t_start = samples[0][0]
    for first, last in list(bursts(samples, a.gap)):
        (t0, v0), (t1, v1) = samples[first], samples[last]
        d = [y - x for x, y in zip(v0, v1)]
        dt = max(t1 - t0, 1e-9)
        nbytes = d[READ_SECTORS] * 512
        if nbytes < 64 << 20:
            continue
        inflight = [s[1][IN_FLIGHT] for s in samples[first : last + 1]]
        idle = sum(1 for x in inflight if x == 0) / len(inflight)
        print(
            f"at {t0 - t_start:7.2f} s for {dt:5.2f} s: {nbytes / 2**30:5.2f} GiB, "
            f"{nbytes / dt / 2**30:5.2f} GiB/s; {d[READS]} requests of "
            f"{nbytes / max(d[READS], 1) / 1024:7.1f} KiB on average, {d[READ_MERGES]} merges; "
            f"busy {d[IO_TICKS] / 1000 / dt:4.2f}, queue depth {d[TIME_IN_QUEUE] / 1000 / dt:5.1f}, "
            f"nothing in flight in {idle:4.0%} of the samples"
        )
    raise SystemExit(rc)


if __name__ == "__main__":
    main()
