#!/usr/bin/env python3
"""Splits a CPU profile of the serving process (`perf record --call-graph
dwarf -p PID`) into where a FUSE request's time goes:

- kernel round trip: the /dev/fuse read and write system calls (request
  in, reply out, the wake-ups and context switches they cause);
- decode/reply: fuser's own code (parsing a request, building a reply);
- adapter: crates/fuse (DualFS's request handlers, outside the engine);
- engine: the engine's code (crates/engine), memory allocation included;
- lock wait: futex calls (taking a contended lock, waking its waiters);
- device I/O: the engine's reads, writes and flushes of its devices;
- other: whatever else the process ran (the flusher thread's sleeps...).

    bench/profile_split.py PERF_DATA [--folded OUT]

--folded writes the stacks folded (one line per stack, for a flame graph:
inferno-flamegraph < OUT > graph.svg).
"""

import argparse
import collections
import subprocess

DEVICE_K = ("pread64", "pwrite64", "preadv", "pwritev", "fdatasync", "do_fsync", "blkdev_", "loop_")
ROUND_TRIP_K = ("fuse_dev_read", "fuse_dev_write", "fuse_dev_do_read", "fuse_dev_do_write", "fuse_dev_splice")


def category(frames):
    """frames: leaf first, as (symbol, dso)."""
    # A system call made by fuser's channel (reading a request, writing a
    # reply): the kernel's side of the round trip, whatever it runs.
    for sym, dso in frames:
        if "fuser::channel::Channel::receive" in sym or "ioslice_concat" in sym:
            if frames and ("kernel" in frames[0][1] or "libc" in frames[0][1]):
                return "kernel round trip"
            break
    for sym, dso in frames:
        if "futex" in sym:
            return "lock wait"
        if any(k in sym for k in ROUND_TRIP_K):
            return "kernel round trip"
        if any(k in sym for k in DEVICE_K) or "dualfs_engine::device::" in sym:
            return "device I/O"
    for sym, dso in frames:
        if "std::sys::sync" in sym and ("futex" in sym or "lock_contended" in sym):
            return "lock wait"
        if sym.startswith("dualfs_engine::") or "<dualfs_engine::" in sym:
            return "engine"
        if sym.startswith("dualfs_fuse::") or "<dualfs_fuse::" in sym:
            return "adapter"
        if sym.startswith("fuser::") or "<fuser::" in sym:
            return "decode/reply"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--folded")
    a = ap.parse_args()
    out = subprocess.run(["perf", "script", "-i", a.data, "-F", "comm,ip,sym,dso"], capture_output=True, text=True,
                         check=True).stdout
    counts = collections.Counter()
    folded = collections.Counter()
    frames = []
    comm = ""

    def flush():
        if frames or comm:
            counts[category(frames)] += 1
            if a.folded:
                folded[";".join([comm] + [s for s, _ in reversed(frames)])] += 1

    for line in out.splitlines():
        if not line.strip():
            flush()
            frames, comm = [], ""
        elif line[0] not in " \t":
            comm = line.split()[0]
        else:
            parts = line.strip().split(None, 1)
            rest = parts[1] if len(parts) > 1 else "[unknown]"
            sym, _, dso = rest.rpartition(" (")
            sym = sym.rsplit("+0x", 1)[0]
            frames.append((sym or rest, dso.rstrip(")")))
    flush()
    total = sum(counts.values())
    for cat in ["kernel round trip", "decode/reply", "adapter", "engine", "lock wait", "device I/O", "other"]:
        print(f"{cat:<18} {counts[cat]:>8} samples {100.0 * counts[cat] / max(total, 1):6.1f}%")
    if a.folded:
        with open(a.folded, "w") as f:
            for stack, n in folded.items():
                f.write(f"{stack} {n}\n")


if __name__ == "__main__":
    main()
