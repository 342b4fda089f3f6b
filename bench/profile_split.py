#!/usr/bin/env python3
"""Splits a CPU profile of the serving process (`perf record --call-graph
dwarf -p PID`) into where a FUSE request's time goes:

- kernel round trip: the system calls that carry requests and replies
  (/dev/fuse reads and writes; io_uring_enter on the io_uring queues),
  with the wake-ups and context switches they cause;
- decode/reply: the transport's own code (crates/wire's: parsing a
  request, building a reply);
- adapter: crates/fuse (DualFS's request handlers, outside the engine);
- stats: the per-request counting and timing (`dualfs stats`) itself;
- allocation: the allocator (malloc, free, jemalloc), under any of the
  above;
- meta-data cache: the engine's cache of decoded inodes and nodes
  (`meta_log::cache`, an inode's load);
- engine: the rest of the engine's code (crates/engine);
- lock wait: futex calls (taking a contended lock, waking its waiters);
- device I/O: the engine's reads, writes and flushes of its devices;
- other: whatever else the process ran (the flusher thread's sleeps...).

    bench/profile_split.py PERF_DATA [--folded OUT] [--by-op]

--folded writes the stacks folded (one line per stack, for a flame graph:
inferno-flamegraph < OUT > graph.svg). --by-op splits again per request
(the adapter method on the stack: `lookup`, `getxattr`...), and the
commits of the background writer apart.
"""

import argparse
import collections
import re
import subprocess

DEVICE_K = ("pread64", "pwrite64", "preadv", "pwritev", "fdatasync", "do_fsync", "blkdev_", "loop_")
ROUND_TRIP_K = ("fuse_dev_read", "fuse_dev_write", "fuse_dev_do_read", "fuse_dev_do_write", "fuse_dev_splice",
                "io_uring_enter", "io_uring_cmd", "fuse_uring_")
ALLOC_K = ("malloc", "__libc_free", "cfree", "realloc", "calloc", "_rjem_", "jemalloc", "__rust_alloc",
           "__rust_dealloc", "__rust_realloc", "alloc::raw_vec::", "alloc::alloc::", "sdallocx", "mallocx", "rallocx")
STATS_K = ("dualfs_fuse::requests::", "dualfs_wire::server::Stats", "sched_getcpu", "getcpu")
CLOCK_K = ("Instant::now", "Instant::elapsed", "clock_gettime", "__vdso_", "Timespec::now")
CATS = ["kernel round trip", "decode/reply", "adapter", "stats", "allocation", "meta-data cache", "engine",
        "lock wait", "device I/O", "other"]
OP_RE = re.compile(r"<impl dualfs_fuse::DualFs>::(\w+)")


def category(frames):
    """frames: leaf first, as (symbol, dso)."""
    # A system call made by the transport (reading a request, writing a
    # reply): the kernel's side of the round trip, whatever it runs.
    # The first frame of ours above the kernel, libc and std is the caller.
    if frames and any(k in frames[0][1] for k in ("kernel", "libc", "vdso")):
        for sym, dso in frames:
            if any(k in dso for k in ("kernel", "libc", "vdso")) or sym.lstrip("<&").startswith(("std::", "core::")):
                continue
            if "dualfs_wire::devfuse" in sym or "submit_and_wait" in sym or "io_uring::submit::Submitter::enter" in sym:
                return "kernel round trip"
            break
    for sym, dso in frames:
        if "futex" in sym:
            return "lock wait"
        if any(k in sym for k in ROUND_TRIP_K):
            return "kernel round trip"
        if any(k in sym for k in DEVICE_K) or "dualfs_engine::device::" in sym:
            return "device I/O"
    clock = False
    for sym, dso in frames:
        if "std::sys::sync" in sym and ("futex" in sym or "lock_contended" in sym):
            return "lock wait"
        if any(k in sym for k in CLOCK_K):
            # A clock read for a request's timing (inlined into the
            # adapter's methods) is the stats' cost; the engine's are its own.
            clock = True
            continue
        if clock and ("dualfs_fuse::" in sym or "dualfs_wire::" in sym):
            return "stats"
        if any(k in sym for k in STATS_K):
            return "stats"
        if any(k in sym for k in ALLOC_K) or "jemalloc" in dso:
            return "allocation"
        if "dualfs_engine::meta_log::cache" in sym or "load_inode" in sym:
            return "meta-data cache"
        if sym.startswith("dualfs_engine::") or "<dualfs_engine::" in sym:
            return "engine"
        if sym.startswith("dualfs_fuse::") or "<dualfs_fuse::" in sym:
            return "adapter"
        if sym.startswith("dualfs_wire::") or "<dualfs_wire::" in sym:
            return "decode/reply"
    return "other"


def operation(frames):
    """The request a stack serves: the adapter method nearest the root, or
    the background writer's commit, or the transport waiting."""
    op = None
    for sym, _ in frames:
        m = OP_RE.search(sym)
        if m:
            op = m.group(1)
    if op:
        return op
    for sym, _ in frames:
        if "background_step" in sym or "flusher" in sym:
            return "(background writer)"
    return "(outside a request)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--folded")
    ap.add_argument("--by-op", action="store_true")
    a = ap.parse_args()
    out = subprocess.run(["perf", "script", "-i", a.data, "-F", "comm,ip,sym,dso"], capture_output=True, text=True,
                         check=True).stdout
    counts = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    folded = collections.Counter()
    frames = []
    comm = ""

    def flush():
        if frames or comm:
            cat = category(frames)
            counts[cat] += 1
            if a.by_op:
                by_op[operation(frames)][cat] += 1
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
    for cat in CATS:
        print(f"{cat:<18} {counts[cat]:>8} samples {100.0 * counts[cat] / max(total, 1):6.1f}%")
    if a.by_op:
        print()
        print(f"{'request':<22} {'samples':>8}  " + "  ".join(f"{c[:10]:>10}" for c in CATS))
        for op, c in sorted(by_op.items(), key=lambda kv: -sum(kv[1].values())):
            n = sum(c.values())
            print(f"{op:<22} {n:>8}  " + "  ".join(f"{100.0 * c[k] / n:>9.1f}%" for k in CATS))
    if a.folded:
        with open(a.folded, "w") as f:
            for stack, n in folded.items():
                f.write(f"{stack} {n}\n")


if __name__ == "__main__":
    main()
