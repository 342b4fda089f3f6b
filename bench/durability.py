#!/usr/bin/env python3
"""Durability probes for bench/suite.py's `durability` sequence.

Each prints one JSON object on standard output.

  tangle  --mnt M --devs "role=/dev/loopN ..." --dirty-mib N --n 200
      Writes N MiB to file A and pushes it to the file system
      (sync_file_range WRITE|WAIT: on a FUSE mount it reaches the server;
      ext4 and XFS write it in place, its allocation left uncommitted),
      waits two seconds, then times 4 KiB appends to file B, each followed
      by fsync: latency (median, p99) and what the devices wrote during the
      loop only (requests, bytes, flushes), per fsync.

  sqlite  --mnt M --devs ... --mode wal|delete --seconds S [--copy SRC]
      One insert per transaction (synchronous=FULL) into a fresh database
      for S seconds; with --copy, while `dd if=SRC of=M/copy bs=1M
      conv=fsync` runs (the rate is counted over the copy's duration).
"""

import argparse
import ctypes
import json
import os
import sqlite3
import statistics
import subprocess
import time


def sync_file_range(fd):
    """sync_file_range(fd, 0, 0, WAIT_BEFORE | WRITE | WAIT_AFTER): Python's os lacks it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    if libc.sync_file_range(fd, 0, 0, 1 | 2 | 4) != 0:
        raise OSError(ctypes.get_errno(), "sync_file_range")


def stat(dev):
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = [int(x) for x in f.read().split()]
    return {"write_req": v[4], "write_sectors": v[6], "flush_req": v[15] if len(v) > 15 else 0}


def devices(spec):
    return dict(item.split("=", 1) for item in spec.split())


def counters(devs):
    return {role: stat(dev) for role, dev in devs.items()}


def delta(c0, c1, per):
    out = {}
    for role in c0:
        d = {k: c1[role][k] - c0[role][k] for k in c0[role]}
        out[role] = {
            "write_req": d["write_req"],
            "write_mib": d["write_sectors"] / 2048.0,
            "flush_req": d["flush_req"],
            "write_req_per_op": d["write_req"] / per,
            "write_kib_per_op": d["write_sectors"] / 2.0 / per,
            "flush_per_op": d["flush_req"] / per,
        }
    return out


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def tangle(args):
    devs = devices(args.devs)
    a = os.path.join(args.mnt, "tangle-a")
    b = os.path.join(args.mnt, "tangle-b")
    if args.dirty_mib > 0:
        piece = bytes((i * 7 + 1) & 0xFF or 1 for i in range(1 << 20))
        fd = os.open(a, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(args.dirty_mib):
            os.write(fd, piece)
        sync_file_range(fd)
        os.close(fd)
    time.sleep(2)
    fd = os.open(b, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    # One unmeasured round: the file's creation is not what is measured.
    os.pwrite(fd, block, 0)
    os.fsync(fd)
    c0 = counters(devs)
    lat = []
    for i in range(1, args.n + 1):
        t = time.perf_counter()
        os.pwrite(fd, block, i * 4096)
        os.fsync(fd)
        lat.append(time.perf_counter() - t)
    c1 = counters(devs)
    os.close(fd)
    ms = [x * 1000 for x in lat]
    return {"dirty_mib": args.dirty_mib, "n": args.n, "median_ms": statistics.median(ms), "p99_ms": pct(ms, 99),
            "mean_ms": statistics.fmean(ms), "max_ms": max(ms), "devices": delta(c0, c1, args.n)}


def sqlite(args):
    devs = devices(args.devs)
    path = os.path.join(args.mnt, f"bench-{args.mode}{'-copy' if args.copy else ''}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode={args.mode}")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    for i in range(50):
        conn.execute("INSERT INTO t (v) VALUES (?)", (os.urandom(100),))
    copy = None
    c0 = counters(devs)
    t0 = time.monotonic()
    if args.copy:
        copy = subprocess.Popen(["dd", f"if={args.copy}", f"of={os.path.join(args.mnt, 'copy')}", "bs=1M",
                                 "conv=fsync", "status=none"])
    lat = []
    while True:
        now = time.monotonic()
        if copy is not None:
            if copy.poll() is not None:
                break
            if now - t0 > args.seconds * 20:
                copy.kill()
                break
        elif now - t0 >= args.seconds:
            break
        t = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t (v) VALUES (?)", (os.urandom(100),))
        conn.execute("COMMIT")
        lat.append(time.perf_counter() - t)
    elapsed = time.monotonic() - t0
    c1 = counters(devs)
    conn.close()
    ms = [x * 1000 for x in lat] or [0.0]
    out = {"mode": args.mode, "copy": bool(args.copy), "tx": len(lat), "seconds": elapsed,
           "tx_s": len(lat) / elapsed if elapsed > 0 else 0.0, "median_ms": statistics.median(ms),
           "p99_ms": pct(ms, 99), "devices": delta(c0, c1, max(1, len(lat)))}
    if copy is not None:
        out["copy_rc"] = copy.returncode
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tangle")
    t.add_argument("--mnt", required=True)
    t.add_argument("--devs", required=True)
    t.add_argument("--dirty-mib", type=int, default=0)
    t.add_argument("--n", type=int, default=200)
    s = sub.add_parser("sqlite")
    s.add_argument("--mnt", required=True)
    s.add_argument("--devs", required=True)
    s.add_argument("--mode", choices=["wal", "delete"], required=True)
    s.add_argument("--seconds", type=float, default=15)
    s.add_argument("--copy")
    args = ap.parse_args()
    print(json.dumps(tangle(args) if args.cmd == "tangle" else sqlite(args)))


if __name__ == "__main__":
    main()
