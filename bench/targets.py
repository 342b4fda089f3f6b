#!/usr/bin/env python3
"""Issue 10's targets from a run of bench/suite.py (DualFS and ext4 at
least): medians of the repeats, ratios to ext4 of the same run, met or
missed. Prints Markdown. With the suite's `floor` configuration in the run
(a FUSE server that does no work), each target also gets the floor's own
ratio to ext4: what no FUSE file system can beat on that machine.

    bench/targets.py bench/results-issue10.json

Write requests are the loop devices' counters less their flushes (the
block layer counts an empty flush as a write request too); meta-data bytes
are DualFS's meta-data device against all of ext4's bytes less the file
data DualFS wrote to its data device (as report.py).
"""

import json
import statistics
import sys

WALL = [("untar", "untar"), ("find", "find"), ("grep", "grep"), ("tar", "tar"),
        ("rw-data-meta", "cp -a inside (rw-data-meta)"), ("rm", "rm -rf"),
        ("bonnie-small-files", "bonnie++ small files"), ("ls-l-cold", "ls -l, 50,000 entries, cold"),
        ("ls-l-warm", "ls -l, 50,000 entries, warm")]
# The sizes come from the run's arguments (--fsync, --read-mib).
RATES = [("postmark", "postmark_tx_s", "PostMark transactions/s", 0.5),
         ("seq-write-fsync", "bw_mib_s", "{seq} MiB sequential write + fsync, MiB/s", 0.9),
         ("seq-read-cold", "bw_mib_s", "{read} MiB sequential read, cold, MiB/s", 0.9)]
PAIRS = [("find", "find-4p"), ("grep", "grep-4p"), ("write-meta", "write-meta-4p"), ("rw-data-meta", "rw-data-meta-4p")]
IO = ["untar", "write-meta", "rw-meta", "rm", "bonnie-small-files"]


def load(path):
    with open(path) as f:
        d = json.load(f)
    runs = {}
    for r in d["runs"]:
        if r.get("traced"):
            continue
        runs.setdefault((r["config"], r["phase"]), []).append(r)
    return d, runs


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def wall(runs, cfg, phase):
    return med([r["wall_s"] for r in runs.get((cfg, phase), [])])


def fastest(runs, cfg, phase):
    """The least disturbed repeat: other tenants of the machine only ever
    add time."""
    xs = [r["wall_s"] for r in runs.get((cfg, phase), [])]
    return min(xs) if xs else None


def rate(runs, cfg, phase, key):
    return med([float(r["extra"][key]) for r in runs.get((cfg, phase), []) if key in r.get("extra", {})])


def writes(r):
    return sum(d["write_req"] - d["flush_req"] for d in r["devices"].values())


def bytes_written(r, role=None):
    return sum(d["write_sectors"] * 512 for k, d in r["devices"].items() if role is None or k == role)


def ab(runs):
    """DualFS against the build it started from (dualfs-base), both as
    ratios to ext4 of the same repeats."""
    lines = ["| phase | ext4 s | before s (÷ ext4) | after s (÷ ext4) | after ÷ before |", "|---|---:|---:|---:|---:|"]
    phases = []
    for (c, p) in runs:
        if c == "dualfs-base" and p not in phases:
            phases.append(p)
    for p in phases:
        e, b, f = wall(runs, "ext4", p), wall(runs, "dualfs-base", p), wall(runs, "dualfs", p)
        if e and b and f:
            lines.append(f"| {p} | {e:.2f} | {b:.2f} ({b / e:.2f}) | {f:.2f} ({f / e:.2f}) | {f / b:.2f} |")
    return "\n".join(lines)


def requests(runs):
    """DualFS's FUSE requests per phase (suite runs that recorded them):
    medians of the repeats, the opcodes that took most serving time first."""
    lines = ["| phase | wall s | requests | served µs (sum) | top opcodes: count, mean µs |", "|---|---:|---:|---:|---|"]
    for (c, p), rs in runs.items():
        rs = [r for r in rs if r.get("fuse_requests")]
        if c != "dualfs" or not rs:
            continue
        ops = {}
        for op in {op for r in rs for op in r["fuse_requests"]}:
            n = med([r["fuse_requests"].get(op, {}).get("count", 0) for r in rs])
            us = med([r["fuse_requests"].get(op, {}).get("total_us", 0) for r in rs])
            ops[op] = (n, us)
        total_n, total_us = sum(n for n, _ in ops.values()), sum(us for _, us in ops.values())
        top = sorted(ops.items(), key=lambda kv: -kv[1][1])[:5]
        cells = ", ".join(f"{op} {n:,.0f} ({us / max(n, 1):.0f})" for op, (n, us) in top if n)
        lines.append(f"| {p} | {wall(runs, c, p):.2f} | {total_n:,.0f} | {total_us / 1e6:.2f} s | {cells} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def mark(ok):
    return "✅ met" if ok else "❌ missed"


def main():
    d, runs = load(sys.argv[1])
    if any(k[0] == "dualfs-base" for k in runs):
        print(ab(runs) + "\n")
    m = d.get("machine", {})
    out = [f"Load average at start: {m.get('loadavg_start', '?')}; command: `{d.get('command', '?')}`.", ""]
    out += ["Medians of the repeats; for wall times, the ratio of the fastest repeats as well (less of the "
            "other tenants in it).", ""]
    floor = any(c == "floor" for c, _ in runs)

    def at_floor(x):
        """The floor's ratio cell, when the run has one."""
        if not floor:
            return ""
        return f" {x:.2f} |" if x is not None else " |"

    out += ["| target | ext4 | DualFS | ratio |" + (" floor (no-work server) ÷ ext4 |" if floor else "") + " |",
            "|---|---:|---:|---:|" + ("---:|" if floor else "") + "---|"]
    for phase, label in WALL:
        e, f = wall(runs, "ext4", phase), wall(runs, "dualfs", phase)
        if e and f:
            fe, ff = fastest(runs, "ext4", phase), fastest(runs, "dualfs", phase)
            fl = wall(runs, "floor", phase)
            out.append(f"| {label}: wall s (≤ 1.5× ext4) | {e:.2f} | {f:.2f} | {f / e:.2f} (fastest: {ff / fe:.2f}) |"
                       + at_floor(fl / e if fl else None) + f" {mark(f / e <= 1.5)} |")
    a = d.get("args", {})
    sizes = {"seq": str(a.get("fsync", "256")).split(",")[0], "read": a.get("read_mib", 1024)}
    for phase, key, label, limit in RATES:
        label = label.format(**sizes)
        e, f = rate(runs, "ext4", phase, key), rate(runs, "dualfs", phase, key)
        if e and f:
            fl = rate(runs, "floor", phase, key)
            out.append(f"| {label} (≥ {limit}× ext4) | {e:,.0f} | {f:,.0f} | {f / e:.2f} |"
                       + at_floor(fl / e if fl else None) + f" {mark(f / e >= limit)} |")
    for one, four in PAIRS:
        e1, e4, f1, f4 = (wall(runs, c, p) for c, p in
                          (("ext4", one), ("ext4", four), ("dualfs", one), ("dualfs", four)))
        if all((e1, e4, f1, f4)):
            se, sf = e1 / e4, f1 / f4
            l1, l4 = wall(runs, "floor", one), wall(runs, "floor", four)
            out.append(f"| {four}: speed-up over 1 process (≥ ext4's) | {se:.2f}× | {sf:.2f}× | {sf / se:.2f} |"
                       + at_floor(l1 / l4 / se if l1 and l4 else None) + f" {mark(sf >= se)} |")
    pe, pf = runs.get(("ext4", "postmark"), []), runs.get(("dualfs", "postmark"), [])
    if pe and pf:
        we, wf = med([writes(r) for r in pe]), med([writes(r) for r in pf])
        be, bf = med([bytes_written(r) for r in pe]), med([bytes_written(r) for r in pf])
        out.append(f"| PostMark write requests (≤ 1.5× ext4) | {we:,.0f} | {wf:,.0f} | {wf / max(we, 1):.2f} |"
                   + at_floor(None) + f" {mark(wf <= 1.5 * we)} |")
        out.append(f"| PostMark MiB written (≤ 1.5× ext4) | {be / 2**20:,.0f} | {bf / 2**20:,.0f} | "
                   f"{bf / max(be, 1):.2f} |" + at_floor(None) + f" {mark(bf <= 1.5 * be)} |")
    out += ["", "| phase | write requests ÷ ext4 (≤ 0.5) | meta-data bytes ÷ ext4 (≤ 0.5) |", "|---|---:|---:|"]
    for p in IO:
        e, f = runs.get(("ext4", p), []), runs.get(("dualfs", p), [])
        if not (e and f):
            continue
        wr = med([writes(r) for r in f]) / max(med([writes(r) for r in e]), 1)
        data = med([bytes_written(r, "data") for r in f])
        meta_f = med([bytes_written(r, "meta") for r in f])
        meta_e = max(med([bytes_written(r) for r in e]) - data, 1)
        out.append(f"| {p} | {wr:.2f} {'✅' if wr <= 0.5 else '❌'} | {meta_f / meta_e:.2f} "
                   f"{'✅' if meta_f / meta_e <= 0.5 else '❌'} |")
    reqs = requests(runs)
    if reqs:
        out += ["", "FUSE requests DualFS served per phase (`dualfs stats --json`, medians):", "", reqs]
    print("\n".join(out))


if __name__ == "__main__":
    main()
