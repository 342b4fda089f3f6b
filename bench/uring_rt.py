#!/usr/bin/env python3
"""What FUSE over io_uring saves on a round trip here (docs/DESIGN.md, the
FUSE adapter).

Four file systems in one run, each measured with `rt-client` (crates/bench):

  proto-uring  the no-work server (crates/bench) over io_uring: one queue
               per CPU, the queue's thread pinned to its CPU
  proto-dev    the same server and handler over /dev/fuse read/write
  dualfs-uring `dualfs mount -o transport=uring` (the adapter over the
               io_uring queues) on the suite's loop devices
  dualfs       `dualfs mount` on the suite's loop devices (io_uring if the
               machine's enable_uring allows it, /dev/fuse otherwise)
  ext4         kernel ext4 on a loop device

Two loops: `getattr` (statx with AT_STATX_FORCE_SYNC: one GETATTR round trip
per call on FUSE) and `create` (create a new file, close it, unlink it).
Each runs with 1 client thread unpinned, pinned to each CPU, and with 2
client threads (unpinned, and one per CPU). Context switches per call are
counted from /proc for the client threads and for the serving process.
FUSE requests per call come from a separate, untimed run recorded with the
kernel's fuse:fuse_request_send tracepoint (bench/micro.py's way).

enable_uring is set to Y for proto-uring and put back as it was at the end.

    bench/uring_rt.py [--repeats 3] [--getattr-n 20000] [--create-n 5000]
    bench/uring_rt.py --report RUN ...   # tables of runs in the store, pooled

Each repeat also makes --spread-runs short getattr runs (unpinned, 5,000
calls) per file system, for the tail the scheduler's placement makes, and
then extracts the suite's untar (Linux 6.1's fs include kernel mm block,
8,830 files; the prototype counts written bytes, keeps none) and syncs.
For the prototype, a getattr loop pinned to each CPU in turn on a fresh
mount shows which CPU served the requests (the server counts them).

Every row is appended to the results store (bench/results.jsonl, tool
`uring-rt`); Markdown tables go to stdout (medians of the repeats).
"""

import argparse
import collections
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import micro  # noqa: E402
import store  # noqa: E402
import suite  # noqa: E402

PARAM = "/sys/module/fuse/parameters/enable_uring"
# Held while the run needs enable_uring (the whole machine's) to stay Y;
# the mount tests take it too (crates/cli/tests/common).
PARAM_LOCK = "/run/lock/dualfs-enable-uring.lock"
CONFIGS = ["proto-uring", "proto-dev", "dualfs-uring", "dualfs", "ext4"]


def layouts():
    """(label, client threads, --cpu) for every case."""
    cpus = os.cpu_count() or 1
    out = [("1 client, unpinned", 1, "none")]
    out += [(f"1 client, on CPU {k}", 1, str(k)) for k in range(cpus)]
    out += [("2 clients, unpinned", 2, "none"), ("2 clients, one per CPU", 2, "spread")]
    return out


def switches(pid):
    """Voluntary and involuntary context switches of every thread of pid."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def dualfs_pid(mnt):
    """The serving process of the DualFS mount on mnt."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"dualfs") and b"mount" in argv and mnt.encode() in argv:
            return int(p)
    return None


class Proto:
    """The prototype server mounted on mnt over one transport."""

    def __init__(self, args, mnt, uring):
        self.args, self.mnt, self.uring = args, mnt, uring
        self.proc, self.pid = None, None

    def mount(self):
        os.makedirs(self.mnt, exist_ok=True)
        t = "uring" if self.uring else "dev"
        self.proc = subprocess.Popen([self.args.proto, self.mnt, "--transport", t], stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline())
        if ready["transport"] != t.replace("dev", "devfuse"):
            raise RuntimeError(f"the prototype did not get {t}: {ready}")
        self.pid = ready["pid"]

    def umount(self):
        """Unmounts; returns the server's report (requests by opcode, by
        the CPU that served them, on the ring)."""
        suite.sh(f"umount {self.mnt}")
        out, _ = self.proc.communicate(timeout=60)
        lines = [line for line in out.splitlines() if line.strip()]
        return json.loads(lines[-1]) if lines else {}


def placement(args, cfg, rep):
    """A getattr loop with the client pinned to each CPU in turn, each on a
    fresh mount: which CPU served its requests."""
    rows = []
    for k in range(os.cpu_count() or 1):
        proto = Proto(args, os.path.join(args.work, cfg, "mnt"), cfg == "proto-uring")
        proto.mount()
        try:
            r = run_client(args, "getattr", proto.mnt, 1, str(k), None)
        finally:
            report = proto.umount()
        served = report.get("served_on_cpu", [])
        other = sum(n for cpu, n in enumerate(served) if cpu != k) / max(sum(served), 1)
        rows.append({"config": cfg, "rep": rep, "client_cpu": k, "us_per_call": r["us_per_call"],
                     "served_on_cpu": served, "other_cpu_share": other})
        suite.log(f"{cfg} client on CPU {k}: {r['us_per_call']:.2f} µs/call, served on CPUs {served}")
    return rows


def run_client(args, phase, mnt, threads, cpu, pid, n=None):
    n = n or (args.getattr_n if phase == "getattr" else args.create_n)
    before = switches(pid) if pid else 0
    out = subprocess.run([args.client, phase, mnt, "--n", str(n), "--threads", str(threads), "--cpu", cpu],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    r["server_cs_per_call"] = (switches(pid) - before) / r["calls"] if pid else 0.0
    return r


def requests_per_call(args, phase, mnt):
    """FUSE requests per call of one untimed single-client run."""
    n = 2000
    cmd = [args.client, phase, mnt, "--n", str(n)]
    _, counts = micro.perf_counted(cmd, mnt)
    # The client's warm-up calls and probe file are counted too.
    calls = n + 200
    return sum(counts.values()) / calls, counts


# Rows that name no phase, by the key that tells them apart.
IMPLIED = (("spread_us", "getattr-spread"), ("untar_s", "untar"), ("served_on_cpu", "placement"))


def record(run, r):
    """A row as a record of the store."""
    phase = r.get("phase") or next(p for k, p in IMPLIED if k in r)
    return run.record(r["config"], phase, {k: v for k, v in r.items() if k not in ("config", "phase", "rep", "layout")},
                      rep=r.get("rep"), layout=r.get("layout"))


def row(rec):
    """A record of the store as the row it was; phases the rows leave implied are left out again."""
    r = dict(rec["values"], config=rec["config"], rep=rec.get("rep"))
    if rec["phase"] not in [p for _, p in IMPLIED]:
        r["phase"] = rec["phase"]
    if "layout" in rec:
        r["layout"] = rec["layout"]
    return r


def run_config(cfg, args, rep):
    work = os.path.join(args.work, cfg)
    rows = []
    vol, proto = None, None
    if cfg.startswith("proto"):
        proto = Proto(args, os.path.join(work, "mnt"), cfg == "proto-uring")
        proto.mount()
        mnt, pid = proto.mnt, proto.pid
    else:
        vol = suite.Volume(cfg, args, work)
        vol.attach()
        vol.mkfs()
        vol.mount()
        mnt = vol.mnt
        pid = dualfs_pid(mnt) if cfg.startswith("dualfs") else None
    try:
        for phase in ("getattr", "create"):
            for label, threads, cpu in layouts():
                r = run_client(args, phase, mnt, threads, cpu, pid)
                r.update({"config": cfg, "rep": rep, "layout": label})
                rows.append(r)
                suite.log(f"{cfg} {phase} {label}: {r['us_per_call']:.2f} µs/call, {r['calls_per_s']:.0f} calls/s, "
                          f"cs/call client {r['client_cs_per_call']:.2f} server {r['server_cs_per_call']:.2f}")
            if rep == 0 and cfg != "ext4":
                per, counts = requests_per_call(args, phase, mnt)
                rows.append({"config": cfg, "rep": rep, "phase": phase, "requests_per_call": per, "requests": counts})
                suite.log(f"{cfg} {phase}: {per:.2f} requests/call {counts}")
        # The spread: many short unpinned runs, where the scheduler's
        # placement of client and server shows as a tail.
        spread = [run_client(args, "getattr", mnt, 1, "none", pid, n=args.spread_n)["us_per_call"]
                  for _ in range(args.spread_runs)]
        rows.append({"config": cfg, "rep": rep, "spread_us": spread})
        suite.log(f"{cfg} getattr spread: {sorted(round(x, 1) for x in spread)}")
        # A whole workload: the suite's untar (8,830 files), into a fresh
        # directory, synced as the suite's phases are.
        dst = os.path.join(mnt, "untar")
        os.makedirs(dst)
        t = time.monotonic()
        suite.sh(f"tar xf {args.tar} -C {dst} && sync -f {dst}")
        secs = time.monotonic() - t
        rows.append({"config": cfg, "rep": rep, "untar_s": secs})
        suite.log(f"{cfg} untar: {secs:.2f} s")
    finally:
        if proto:
            proto.umount()
        else:
            vol.umount()
            vol.detach()
    return rows


def med(runs, key):
    return statistics.median(r[key] for r in runs) if runs else None


def tables(results):
    by = collections.defaultdict(list)
    spreads = collections.defaultdict(list)
    untar = collections.defaultdict(list)
    place = collections.defaultdict(list)
    reqs = {}
    for r in results:
        if "layout" in r:
            by[(r["config"], r["phase"], r["layout"])].append(r)
        elif "spread_us" in r:
            spreads[r["config"]].extend(r["spread_us"])
        elif "client_cpu" in r:
            place[r["config"]].append(r)
        elif "untar_s" in r:
            untar[r["config"]].append(r["untar_s"])
        else:
            reqs[(r["config"], r["phase"])] = r["requests_per_call"]
    out = []
    for phase in ("getattr", "create"):
        out.append(f"\n**{phase}** (µs per call per client thread; in brackets against proto-dev)\n")
        out.append("| clients | " + " | ".join(CONFIGS) + " |")
        out.append("|---|" + "---:|" * len(CONFIGS))
        for label, _, _ in layouts():
            base = med(by[("proto-dev", phase, label)], "us_per_call")
            cells = []
            for c in CONFIGS:
                us = med(by[(c, phase, label)], "us_per_call")
                if us is None:
                    cells.append("–")
                else:
                    ratio = f" ({us / base:.2f}×)" if base and c != "proto-dev" else ""
                    cells.append(f"{us:.2f}{ratio}")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("\n| per call, 1 client unpinned | " + " | ".join(CONFIGS) + " |")
        out.append("|---|" + "---:|" * len(CONFIGS))
        one = "1 client, unpinned"
        two = "2 clients, unpinned"
        rows = [("context switches, client", lambda c: med(by[(c, phase, one)], "client_cs_per_call")),
                ("context switches, server", lambda c: med(by[(c, phase, one)], "server_cs_per_call")),
                ("FUSE requests", lambda c: reqs.get((c, phase))),
                ("calls/s, 2 clients ÷ 1 client", lambda c: (med(by[(c, phase, two)], "calls_per_s") or 0)
                 / (med(by[(c, phase, one)], "calls_per_s") or 1))]
        for name, f in rows:
            out.append(f"| {name} | " + " | ".join("–" if f(c) is None else f"{f(c):.2f}" for c in CONFIGS) + " |")
    out.append("\n**Spread of the getattr loop** (µs per call of each short unpinned run, "
               f"{sum(len(v) for v in spreads.values()) // max(len(spreads), 1)} runs per configuration)\n")
    out.append("| | " + " | ".join(CONFIGS) + " |")
    out.append("|---|" + "---:|" * len(CONFIGS))
    for name, q in (("fastest", 0.0), ("10th percentile", 0.1), ("median", 0.5), ("90th percentile", 0.9),
                    ("slowest", 1.0)):
        cells = []
        for c in CONFIGS:
            v = sorted(spreads.get(c, []))
            cells.append(f"{v[min(int(q * len(v)), len(v) - 1)]:.2f}" if v else "–")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    if place:
        out.append("\n**Where a pinned client's GETATTRs were served** (a fresh mount per run; share served "
                   "by a thread on the other CPU, µs per call; medians)\n")
        out.append("| | share on the other CPU | µs per call |")
        out.append("|---|---:|---:|")
        for c in ("proto-uring", "proto-dev"):
            if place.get(c):
                share = med(place[c], "other_cpu_share")
                out.append(f"| {c} | {share * 100:.1f}% | {med(place[c], 'us_per_call'):.2f} |")
    if untar:
        base = med([{"s": x} for x in untar.get("ext4", [])], "s")
        out.append("\n**untar** (the suite's 8,830 files, then `sync -f`; wall seconds, median; against ext4)\n")
        out.append("| | " + " | ".join(CONFIGS) + " |")
        out.append("|---|" + "---:|" * len(CONFIGS))
        cells = []
        for c in CONFIGS:
            v = med([{"s": x} for x in untar.get(c, [])], "s")
            cells.append("–" if v is None else f"{v:.2f}" + (f" ({v / base:.2f}×)" if base and c != "ext4" else ""))
        out.append("| wall s | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    rel = os.path.join(here, "..", "target", "release")
    ap.add_argument("--dualfs", default=os.path.join(rel, "dualfs"))
    ap.add_argument("--proto", default=os.path.join(rel, "no-work-server"))
    ap.add_argument("--client", default=os.path.join(rel, "rt-client"))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--getattr-n", type=int, default=20_000)
    ap.add_argument("--create-n", type=int, default=5_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spread-runs", type=int, default=10, help="short getattr runs per repeat")
    ap.add_argument("--spread-n", type=int, default=5_000)
    ap.add_argument("--report", nargs="*", help="print the tables of these runs of the store (pooled), run nothing")
    ap.add_argument("--work", default="/var/tmp/dualfs-uring-rt")
    ap.add_argument("--store", default=store.STORE, help="the results store")
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--meta-mib", type=int, default=408)
    args = ap.parse_args()
    if args.report is not None:
        print(tables([row(r) for r in store.load(args.store) if r["tool"] == "uring-rt" and r["run"] in args.report]))
        return
    for k in ("dualfs", "proto", "client"):
        setattr(args, k, os.path.abspath(getattr(args, k)))
    args.dualfs_base = args.dualfs
    args.trace_dir = os.path.join(args.work, "traces")
    args.src, args.smoke = None, False
    _, args.tar = suite.prepare_source(args)
    if os.geteuid() != 0:
        sys.exit("the benchmark needs root (loop devices, mount, enable_uring, perf)")
    if not os.path.exists(PARAM):
        sys.exit(f"{PARAM} is missing: this kernel has no FUSE over io_uring")
    os.makedirs(args.work, exist_ok=True)
    configs = args.configs.split(",")
    lock = open(PARAM_LOCK, "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    old = open(PARAM).read().strip()
    results = []
    load = open("/proc/loadavg").read().strip()
    try:
        with open(PARAM, "w") as f:
            f.write("Y")
        for rep in range(args.repeats):
            for cfg in configs:
                results.extend(run_config(cfg, args, rep))
                if cfg.startswith("proto"):
                    results.extend(placement(args, cfg, rep))
    finally:
        with open(PARAM, "w") as f:
            f.write(old)
    end = open("/proc/loadavg").read().strip()
    run = store.Run("uring-rt", args.store)
    run.append([record(run, r) for r in results])
    print(f"run {run.id} is in {args.store}")
    print(f"{time.strftime('%Y-%m-%d %H:%M')} load average at start {load}, at end {end}; medians of {args.repeats}")
    print(tables(results))


if __name__ == "__main__":
    main()
