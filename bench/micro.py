#!/usr/bin/env python3
"""System calls through the mount, next to ext4 and fuse2fs.

Each configuration gets the suite's loop devices (bench/suite.py's Volume),
then `mount-bench` runs one phase at a time: create+close of 10,000 files,
stat of them warm and cold, readdir of their directory, `ls -l`-style
listing with a stat per entry cold and warm, 4 KiB appends, and a loop of
statx(AT_STATX_FORCE_SYNC), which costs one GETATTR round trip per call on
FUSE and a plain stat on ext4. "cold" means unmounted, caches dropped and
mounted again before the phase.

The FUSE requests each phase sends are counted by the kernel's own
tracepoint (fuse:fuse_request_send, filtered on the mount's connection,
recorded with `perf record`), so fuse2fs is counted exactly like DualFS.
For DualFS the serving time per opcode comes from `dualfs stats --json`.

    bench/micro.py [--configs ext4,dualfs,fuse2fs] [--n 10000] [--repeats 3]

Every measurement is appended to the results store (bench/results.jsonl,
tool `micro`); a Markdown table goes to stdout (medians of the repeats).
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402
import suite  # noqa: E402

# (phase, mount-bench phase, before it: "cold" (remount, caches dropped),
# "warm" (the same phase once, neither timed nor counted) or None, ops)
PHASES = [
    ("create", "create", None, "n"),
    ("stat warm", "stat", "warm", "n"),
    ("stat cold", "stat", "cold", "n"),
    ("readdir 10k (per entry)", "readdir", "warm", "n"),
    ("ls -l cold (per entry)", "ls-l", "cold", "n"),
    ("ls -l warm (per entry)", "ls-l", "warm", "n"),
    ("GETATTR round trip", "getattr-rt", None, "rt"),
    ("4 KiB append", "append", None, "rt"),
]


def perf_counted(cmd, mnt):
    """Runs cmd under `perf record` of the mount's FUSE requests; returns
    (cmd's stdout, {opcode: count})."""
    dev = os.stat(mnt).st_dev
    fuse = any(line.split()[1] == mnt and line.split()[2].startswith("fuse") for line in open("/proc/mounts"))
    if not fuse:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return out, {}
    with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
        data = f.name
    try:
        rec = ["perf", "record", "-q", "-a", "-e", "fuse:fuse_request_send", "--filter", f"connection == {dev}",
               "-o", data, "--"] + cmd
        out = subprocess.run(rec, check=True, capture_output=True, text=True).stdout
        script = subprocess.run(["perf", "script", "-i", data, "-F", "trace"], check=True, capture_output=True,
                                text=True).stdout
        counts = collections.Counter()
        for line in script.splitlines():
            if "(FUSE_" in line:
                counts[line.split("(FUSE_", 1)[1].split(")", 1)[0]] += 1
        return out, dict(counts)
    finally:
        os.unlink(data)


def dualfs_stats(args, mnt):
    r = subprocess.run([args.dualfs, "stats", "--json", mnt], capture_output=True, text=True)
    return json.loads(r.stdout).get("fuse_requests", {}) if r.returncode == 0 else {}


def run_config(cfg, args, rep):
    vol = suite.Volume(cfg, args, os.path.join(args.work, cfg))
    vol.attach()
    rows = []
    try:
        vol.mkfs()
        work = vol.mnt
        vol.mount()
        for name, phase, before, size in PHASES:
            n = args.n if size == "n" else args.roundtrips
            cmd = [args.mount_bench, phase, work, "--n", str(n), "--repeat", "1"]
            if before == "cold":
                vol.umount()
                suite.drop_caches()
                vol.mount()
            elif before == "warm":
                subprocess.run(cmd, check=True, capture_output=True)
            before = dualfs_stats(args, vol.mnt) if cfg == "dualfs" else {}
            out, counts = perf_counted(cmd, vol.mnt)
            after = dualfs_stats(args, vol.mnt) if cfg == "dualfs" else {}
            r = json.loads(out)
            served = {op: {"count": v["count"] - before.get(op, {}).get("count", 0),
                           "total_us": v["total_us"] - before.get(op, {}).get("total_us", 0)}
                      for op, v in after.items()}
            served = {op: v for op, v in served.items() if v["count"] > 0}
            rec = {"config": cfg, "rep": rep, "phase": name, "ops": r["ops"], "seconds": r["seconds"],
                   "us_per_op": r["us_per_op"], "requests": counts, "served": served}
            rows.append(rec)
            args.run.append(args.run.record(cfg, name, {k: v for k, v in rec.items() if k not in ("config", "phase", "rep")},
                                            rep=rep))
            reqs = sum(counts.values())
            suite.log(f"{cfg} {name}: {r['us_per_op']:.2f} µs/op, {reqs / max(r['ops'], 1):.2f} requests/op {counts}")
        vol.umount()
    finally:
        if suite.sh(f"mountpoint -q {vol.mnt}", check=False) == 0:
            vol.umount()
        vol.detach()
    return rows


def table(results, configs):
    by = collections.defaultdict(list)
    for r in results:
        by[(r["config"], r["phase"])].append(r)
    head = "| operation | " + " | ".join(f"{c} µs/op | {c} req/op" if c != "ext4" else "ext4 µs/op"
                                       for c in configs) + " |"
    lines = [head, "|---|" + "---:|" * sum(1 if c == "ext4" else 2 for c in configs)]
    for name, *_ in PHASES:
        cells = []
        base = by.get(("ext4", name))
        base_us = statistics.median(x["us_per_op"] for x in base) if base else None
        for c in configs:
            runs = by.get((c, name), [])
            if not runs:
                cells += ["–"] if c == "ext4" else ["–", "–"]
                continue
            us = statistics.median(x["us_per_op"] for x in runs)
            ratio = f" ({us / base_us:.1f}×)" if base_us and c != "ext4" else ""
            cells.append(f"{us:.2f}{ratio}")
            if c != "ext4":
                req = statistics.median(sum(x["requests"].values()) / max(x["ops"], 1) for x in runs)
                cells.append(f"{req:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--dualfs", default=os.path.join(here, "..", "target", "release", "dualfs"))
    ap.add_argument("--mount-bench", default=os.path.join(here, "..", "target", "release", "mount-bench"))
    ap.add_argument("--configs", default="ext4,dualfs,fuse2fs")
    ap.add_argument("--n", type=int, default=10_000, help="files")
    ap.add_argument("--roundtrips", type=int, default=20_000, help="GETATTR round trips and appends")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp/dualfs-micro")
    ap.add_argument("--store", default=store.STORE, help="the results store to append to")
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--meta-mib", type=int, default=408)
    args = ap.parse_args()
    args.dualfs = os.path.abspath(args.dualfs)
    args.mount_bench = os.path.abspath(args.mount_bench)
    args.trace_dir = os.path.join(args.work, "traces")
    if os.geteuid() != 0:
        sys.exit("the benchmark needs root (loop devices, mount, perf)")
    os.makedirs(args.work, exist_ok=True)
    configs = args.configs.split(",")
    tree = os.path.abspath(os.path.join(here, "..", "target", "release", "dualfs"))
    args.run = store.Run("micro", args.store, build=None if args.dualfs == tree else args.dualfs)
    results = []
    load = open("/proc/loadavg").read().strip()
    for rep in range(args.repeats):
        for cfg in configs:
            results.extend(run_config(cfg, args, rep))
    print(f"run {args.run.id} is in {args.store}; load average at start {load}, at end {open('/proc/loadavg').read().strip()}; medians of {args.repeats}\n")
    print(table(results, configs))


if __name__ == "__main__":
    main()
