#!/usr/bin/env python3
"""docs/BENCHMARKS.md and its plots, from the results store.

    bench/report.py [--store bench/results.jsonl] [--docs docs] [--run RUN ...] [--no-plots]

The page is generated whole: the runs it draws on (machine, commit, load),
the findings (bench/findings.md, whose {{...}} figures are filled in from
the store), the tables and plots, and how to reproduce them. Do not edit
docs/BENCHMARKS.md; edit bench/findings.md or this script.

Which measurements: for each configuration and phase of the suite, the
newest run that measured it on a quiet machine (load below 3; else the
newest on any) (and, for any configuration but ext4, measured
ext4 in the same run, so that every ratio compares two file systems of one
run); --run restricts the choice to the named runs. The traced run (disk
models, block classes) is chosen the same way among traced records. The
other tools' tables take their newest run. Medians over the repeats.

The runs on emulated disks (tools `disks`, `disk-calibration`) are drawn by
bench/disks.py where findings.md says {{disks}}.

A figure in bench/findings.md is `{{KEY CONFIG PHASE}}` (the median of
KEY, as in the tables) or `{{KEY CONFIG/BASE PHASE}}` (CONFIG's value
divided by BASE's of the same run), with an optional number of decimals,
and `@RUN` last to take the figure from that run. KEY is wall_s, wall_min_s, wall_umount_s, write_req, write_mib,
meta_write_mib, data_write_mib, read_req, read_mib, flushes, writes
(write requests less flushes), trace_write_req, trace_write_kib,
fuse_requests, served_s (the time DualFS spent serving them), a disk
model (hdd5400/one-disk, ...), or x_NAME for a figure the phase's tool
reported (x_postmark_tx_s, x_bw_mib_s, x_iops,
x_tx_s, x_median_ms, x_p99_ms, x_sync_p99_ms, ...).
"""

import argparse
import collections
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402
import disks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ["dualfs", "floor", "ext2", "ext4", "ext4-extjournal", "xfs-extlog", "xfs", "btrfs", "fuse2fs",
           "dualfs-strict"]
META_HEAVY = ["untar", "rm", "write-meta", "write-meta-4p", "rw-meta", "postmark", "bonnie-small-files"]
SEMANTIC_PHASES = ["untar", "grep", "write-meta", "rm", "write-del", "write-del-20", "postmark", "rand-fsync-1",
                   "seq-write-fsync", "bonnie-small-files"]
MODEL_KEYS = ["hdd5400/one-disk", "hdd5400/two-disks", "hdd7200/one-disk", "ssd/one-disk"]
DURABILITY = [("tangle-", [("x_median_ms", "fsync median, ms"), ("x_p99_ms", "fsync p99, ms")]),
              ("fio-", [("x_iops", "IOPS"), ("x_sync_mean_ms", "sync mean, ms"), ("x_sync_p99_ms", "sync p99, ms")]),
              ("sqlite-", [("x_tx_s", "transactions/s"), ("x_p99_ms", "p99 per transaction, ms")])]
# The suite's goals against ext4, as the targets table shows them.
WALL_GOALS = [("untar", "untar"), ("find", "find"), ("grep", "grep"), ("tar", "tar"),
              ("rw-data-meta", "cp -a inside (rw-data-meta)"), ("rm", "rm -rf"),
              ("bonnie-small-files", "bonnie++ small files"), ("ls-l-cold", "ls -l, 50,000 entries, cold"),
              ("ls-l-warm", "ls -l, 50,000 entries, warm")]
RATE_GOALS = [("postmark", "x_postmark_tx_s", "PostMark transactions/s", 0.5),
              ("seq-write-fsync", "x_bw_mib_s", "sequential write + fsync, MiB/s", 0.9),
              ("seq-read-cold", "x_bw_mib_s", "sequential read, cold, MiB/s", 0.9)]
SCALING = [("find", "find-4p"), ("grep", "grep-4p"), ("write-meta", "write-meta-4p"),
           ("rw-data-meta", "rw-data-meta-4p")]


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


# --- selection -------------------------------------------------------------

# The kernel file systems a table compares DualFS with.
PEERS = ("ext4", "xfs", "btrfs", "ext2")

# A load average below this on the machine's 2 CPUs counts as quiet.
QUIET_LOAD = 3.0


class Suite:
    """The suite's records, by run, and the run chosen for each
    configuration and phase."""

    def __init__(self, records, only_runs=None):
        recs = [r for r in records if r["tool"] == "suite" and (not only_runs or r["run"] in only_runs)]
        self.by = collections.defaultdict(list)      # (run, config, phase, traced) -> records
        self.order = []                              # phases in the order runs measured them
        self.run_time = {}
        self.run_info = {}
        loads = collections.defaultdict(list)
        for r in recs:
            self.by[(r["run"], r["config"], r["phase"], bool(r.get("traced")))].append(r)
            self.run_time[r["run"]] = max(self.run_time.get(r["run"], ""), r["time"])
            self.run_info.setdefault(r["run"], r)
            load = (r.get("machine") or {}).get("load") or ""
            if load.split():
                loads[r["run"]].append(float(load.split()[0]))
        # A run on a quiet machine is preferred to a newer one on a loaded
        # machine: FUSE round trips stretch with the load, a kernel file
        # system's calls much less, so a loaded run's ratios say more about
        # the load than about the file systems.
        quiet = {run: bool(v) and sorted(v)[len(v) // 2] < QUIET_LOAD for run, v in loads.items()}
        self.quiet = quiet

        def rank(run):
            return (quiet.get(run, False), self.run_time[run])
        for r in sorted(recs, key=lambda r: (r["time"], r.get("rep") or 0)):
            if r["phase"] not in self.order:
                self.order.append(r["phase"])
        self.chosen = {}
        for traced in (False, True):
            for (run, config, phase, t) in self.by:
                if t != traced:
                    continue
                if config != "ext4" and (run, "ext4", phase, traced) not in self.by:
                    continue
                # ext4 alone beside configurations the tables do not show
                # (an A/B of builds or transports) compares nothing here.
                if config == "ext4" and not any((run, c, phase, traced) in self.by for c in CONFIGS if c != "ext4"):
                    continue
                k = (config, phase, traced)
                if k not in self.chosen or rank(run) > rank(self.chosen[k]):
                    self.chosen[k] = run
        self._stats = {}

    def configs(self):
        seen = {c for (c, _, _) in self.chosen}
        return [c for c in CONFIGS if c in seen]

    def phases(self):
        seen = {p for (_, p, _) in self.chosen}
        return [p for p in self.order if p in seen]

    def run_of(self, config, phase, traced=False):
        return self.chosen.get((config, phase, traced))

    def stats(self, config, phase, run=None):
        """Medians of the chosen (or the given) run's repeats, with the
        traced run's replay and trace figures; None when not measured."""
        run = run or self.run_of(config, phase)
        trun = self.run_of(config, phase, True) if run == self.run_of(config, phase) else run
        key = (run, trun, config, phase)
        if key not in self._stats:
            timed = self.by.get((run, config, phase, False), [])
            traced = self.by.get((trun, config, phase, True), [])
            self._stats[key] = summarise(timed, traced[-1] if traced else None)
        return self._stats[key]

    def newest_with(self, configs, phase):
        """The newest run that measured every one of `configs` in `phase`."""
        runs = [run for run in self.run_time if all((run, c, phase, False) in self.by for c in configs)]
        return max(runs, key=lambda r: self.run_time[r], default=None)

    def value(self, key, config, phase, base=None):
        """A figure, or its ratio to `base` in the same run."""
        s = self.stats(config, phase)
        if s is None:
            return None
        if base is None:
            return s.get(key)
        run = self.run_of(config, phase, True) if key in MODEL_KEYS or key.startswith("trace_") else \
            self.run_of(config, phase)
        b = self.stats(base, phase, run) if run else None
        return ratio(s.get(key), (b or {}).get(key))


def counters(values):
    d = values["devices"]
    return {"write_req": sum(x["write_req"] for x in d.values()),
            "write_mib": sum(x["write_sectors"] for x in d.values()) / 2048,
            "read_req": sum(x["read_req"] for x in d.values()),
            "read_mib": sum(x["read_sectors"] for x in d.values()) / 2048,
            "flushes": sum(x["flush_req"] for x in d.values()),
            "writes": sum(x["write_req"] - x["flush_req"] for x in d.values()),
            "meta_write_mib": d.get("meta", {}).get("write_sectors", 0) / 2048,
            "data_write_mib": d.get("data", {}).get("write_sectors", 0) / 2048,
            "meta_write_req": d.get("meta", {}).get("write_req", 0) - d.get("meta", {}).get("flush_req", 0),
            "data_write_req": d.get("data", {}).get("write_req", 0) - d.get("data", {}).get("flush_req", 0)}


def summarise(timed, traced):
    runs = [r["values"] for r in timed] or ([traced["values"]] if traced else [])
    if not runs:
        return None
    walls = [r["values"]["wall_s"] for r in timed]
    out = {"n": len(timed), "wall_s": med(walls), "wall_min_s": min(walls, default=None),
           "wall_umount_s": med([r["values"]["wall_umount_s"] for r in timed])}
    cs = [counters(v) for v in runs]
    for k in cs[0]:
        out[k] = med([c[k] for c in cs])
    fr = [v.get("fuse_requests") for v in runs if v.get("fuse_requests")]
    if fr:
        out["fuse_requests"] = med([sum(op["count"] for op in f.values()) for f in fr])
        out["served_s"] = med([sum(op["total_us"] for op in f.values()) / 1e6 for f in fr])
        out["fuse_ops"] = fr
    t = traced["values"] if traced else None
    if t and "replay" in t:
        for m in MODEL_KEYS:
            if m in t["replay"]:
                out[m] = t["replay"][m]["total_s"]
    if t and "trace_summary" in t:
        devs = t["trace_summary"]["devices"].values()
        out["trace_write_req"] = sum(d.get("write", {}).get("requests", 0) for d in devs)
        w = [d["write"] for d in devs if "write" in d]
        out["trace_write_kib"] = (sum(x["bytes"] for x in w) / 1024 / max(1, sum(x["requests"] for x in w))) if w \
            else None
    if t:
        out["semantic"] = t.get("semantic")
        out["semantic_replay"] = t.get("semantic_replay")
    extras = [v.get("extra", {}) for v in runs]
    for k in (extras[0] if extras else {}):
        try:
            out["x_" + k] = med([float(e[k]) for e in extras if k in e])
        except (TypeError, ValueError):
            pass
    return out


# --- tables ----------------------------------------------------------------

class Labels:
    """A short label per run, in the order the page first cites them."""

    def __init__(self):
        self.labels = {}

    def __call__(self, run):
        if run not in self.labels:
            self.labels[run] = chr(ord("A") + len(self.labels)) if len(self.labels) < 26 else f"R{len(self.labels)}"
        return self.labels[run]


def phase_table(su, lab, phases, configs, key, title, conv=lambda x: x, digits=2, traced=False):
    """One row per phase, one column per configuration, the ratio to ext4
    (same run) in brackets. A column names the run most of its cells come
    from; a cell from another run names its own."""
    cols, majority = [], {}
    for c in configs:
        runs = [su.run_of(c, p, traced) for p in phases if (su.stats(c, p) or {}).get(key) is not None]
        if runs:
            cols.append(c)
            majority[c] = collections.Counter(runs).most_common(1)[0][0]
    if not cols:
        return ""
    lines = [f"**{title}** (ratio to ext4 of the same run in brackets; [X]: the run, as listed above)", "",
             "| phase | " + " | ".join(f"{c} [{lab(majority[c])}]" for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for p in phases:
        cells, any_value = [], False
        for c in cols:
            s = su.stats(c, p)
            v = (s or {}).get(key)
            if v is None:
                cells.append("–")
                continue
            any_value = True
            r = su.value(key, c, p, "ext4") if c != "ext4" else None
            run = su.run_of(c, p, traced)
            mark = "" if run == majority[c] else f" [{lab(run)}]"
            cells.append(fmt(conv(v), digits) + ("" if r is None else f" ({r:.2f})") + mark)
        if any_value:
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


TRANSPORTS = [("dualfs-fuser", "fuser (removed)"), ("dualfs-devfuse", "/dev/fuse"), ("dualfs-uring", "io_uring"),
              ("ext4", "ext4")]


def transports_table(su, lab):
    """The newest run that set DualFS's transports beside each other and
    ext4: medians of the wall time, PostMark in transactions per second."""
    have = collections.defaultdict(set)
    for (run, config, phase, traced) in su.by:
        if not traced:
            have[run].add(config)
    runs = [r for r, cs in have.items() if "ext4" in cs and sum(c in cs for c, _ in TRANSPORTS[:3]) >= 2]
    if not runs:
        return ""
    run = max(runs, key=lambda r: su.run_time[r])
    cols = [(c, name) for c, name in TRANSPORTS if c in have[run]]
    phases = [p for p in su.order if any((run, c, p, False) in su.by for c, _ in cols)]
    lines = [f"Run [{lab(run)}], one build, the transports and ext4 interleaved (DESIGN.md, \"FUSE adapter\").", "",
             "| phase | " + " | ".join(name for _, name in cols) + " |", "|---|" + "---:|" * len(cols)]
    for p in phases:
        key = "x_postmark_tx_s" if p == "postmark" else "wall_s"
        cells = [fmt((su.stats(c, p, run) or {}).get(key)) for c, _ in cols]
        lines.append(f"| {p}{' (transactions/s)' if key != 'wall_s' else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def goals_table(su, lab):
    """DualFS against ext4 and the floor (a FUSE server that does no work)
    in one run: a quiet one first, then the one that measured the most of
    the goals (a run of a few phases does not hide a whole one), then the
    newest."""
    goals = [p for p, _ in WALL_GOALS] + [p for p, _, _, _ in RATE_GOALS]
    runs = {run for (run, c, _, t) in su.by if c == "dualfs" and not t}
    if not runs:
        return ""

    def covered(run):
        return sum((run, "dualfs", p, False) in su.by and (run, "ext4", p, False) in su.by for p in goals)
    run = max(runs, key=lambda r: (su.quiet.get(r, False), covered(r), su.run_time[r]))
    if not covered(run):
        return ""

    def v(key, config, phase):
        return (su.stats(config, phase, run) or {}).get(key)

    floor = any(v("wall_s", "floor", p) for p, _ in WALL_GOALS)
    out = [f"Run [{lab(run)}]: medians of the repeats; for wall times, the ratio of the fastest repeats as well "
           "(the run least disturbed by other work on the machine)." + (
               " The floor column is the no-work server's own ratio to ext4 (for the 4-process rows, its "
               "speed-up against ext4's): what no FUSE file system beats on this machine." if floor else ""), "",
           "| goal | ext4 | DualFS | DualFS ÷ ext4 |" + (" floor ÷ ext4 |" if floor else "") + " |",
           "|---|---:|---:|---:|" + ("---:|" if floor else "") + "---|"]

    def mark(ok):
        return "✅" if ok else "❌"

    def fl(x):
        return (f" {fmt(x)} |" if x is not None else " – |") if floor else ""

    for phase, label in WALL_GOALS:
        e, d = v("wall_s", "ext4", phase), v("wall_s", "dualfs", phase)
        if e and d:
            fe, fd = v("wall_min_s", "ext4", phase), v("wall_min_s", "dualfs", phase)
            out.append(f"| {label}: wall s (≤ 1.5× ext4) | {e:.2f} | {d:.2f} | {d / e:.2f} (fastest: {fd / fe:.2f}) |"
                       + fl(ratio(v("wall_s", "floor", phase), e)) + f" {mark(d / e <= 1.5)} |")
    for phase, key, label, limit in RATE_GOALS:
        e, d = v(key, "ext4", phase), v(key, "dualfs", phase)
        if e and d:
            out.append(f"| {label} (≥ {limit}× ext4) | {fmt(e)} | {fmt(d)} | {d / e:.2f} |"
                       + fl(ratio(v(key, "floor", phase), e)) + f" {mark(d / e >= limit)} |")
    for one, four in SCALING:
        e1, e4, d1, d4 = v("wall_s", "ext4", one), v("wall_s", "ext4", four), v("wall_s", "dualfs", one), \
            v("wall_s", "dualfs", four)
        if all((e1, e4, d1, d4)):
            se, sd = e1 / e4, d1 / d4
            l1, l4 = v("wall_s", "floor", one), v("wall_s", "floor", four)
            out.append(f"| {four}: speed-up over 1 process (≥ ext4's) | {se:.2f}× | {sd:.2f}× | {sd / se:.2f} |"
                       + fl(l1 / l4 / se if l1 and l4 else None) + f" {mark(sd >= se)} |")
    for key, label in (("writes", "write requests"), ("write_mib", "MiB written")):
        e, d = v(key, "ext4", "postmark"), v(key, "dualfs", "postmark")
        if e and d:
            out.append(f"| PostMark {label} (≤ 1.5× ext4) | {fmt(e)} | {fmt(d)} | {d / e:.2f} |" + fl(None)
                       + f" {mark(d <= 1.5 * e)} |")
    return "\n".join(out) + "\n"


def io_goals_table(su, lab, phases):
    """The meta-data-heavy phases against ext4: requests, bytes, the disk
    models, wall time against fuse2fs and ext4."""
    lines = ["| phase | write requests ÷ ext4 (≤ 0.5) | meta-data bytes ÷ ext4's meta-data and journal (≤ 0.5) | "
             "HDD I/O time ÷ ext4, 5,400 rpm (≤ 0.3) [traced run] | the same, 7,200 rpm | wall ÷ fuse2fs (≤ 0.5) |",
             "|---|---:|---:|---:|---:|---:|"]

    def mark(v, limit):
        if v is None:
            return "–"
        return f"{v:.2f} {'✅' if v <= limit else '❌'}"

    for p in phases:
        d, e = su.stats("dualfs", p), su.stats("ext4", p, su.run_of("dualfs", p))
        if not d or not e:
            continue
        meta_e = max(e["write_mib"] - d["data_write_mib"], 0)
        t = su.run_of("dualfs", p, True)
        fr = su.newest_with(["dualfs", "fuse2fs"], p)
        wall_fuse2fs = ratio(su.stats("dualfs", p, fr)["wall_s"], su.stats("fuse2fs", p, fr)["wall_s"]) if fr else None
        lines.append("| " + " | ".join([
            p, mark(ratio(d["writes"], e["writes"]), 0.5),
            mark(ratio(d["meta_write_mib"], meta_e) if meta_e else None, 0.5),
            mark(su.value("hdd5400/one-disk", "dualfs", p, "ext4"), 0.3) + (f" [{lab(t)}]" if t else ""),
            mark(su.value("hdd7200/one-disk", "dualfs", p, "ext4"), 0.3),
            mark(wall_fuse2fs, 0.5) + (f" [{lab(fr)}]" if fr else "")]) + " |")
    return "\n".join(lines) + "\n"


def per_device_table(su, lab, phases, configs):
    """Write requests (less flushes) and MiB written, device by device."""
    cols = []
    for c in configs:
        devs = set()
        for p in phases:
            run = su.run_of(c, p)
            for r in su.by.get((run, c, p, False), []):
                devs |= set(r["values"]["devices"])
        for dev in sorted(devs, key=lambda x: (x != "meta", x)):
            cols.append((c, dev))
    if not cols:
        return ""
    lines = ["| phase | " + " | ".join(f"{c} {d}" for c, d in cols) + " |", "|---|" + "---:|" * len(cols)]
    for p in phases:
        cells = []
        for c, dev in cols:
            run = su.run_of(c, p)
            recs = su.by.get((run, c, p, False), [])
            ds = [r["values"]["devices"].get(dev) for r in recs if dev in r["values"]["devices"]]
            if not ds:
                cells.append("–")
                continue
            w = med([x["write_req"] - x["flush_req"] for x in ds])
            mib = med([x["write_sectors"] / 2048 for x in ds])
            cells.append(f"{fmt(w)} / {fmt(mib, 1)}")
        if any(c != "–" for c in cells):
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def requests_table(su, lab):
    """DualFS's FUSE requests per phase (`dualfs stats --json`)."""
    lines = ["| phase | run | wall s | requests | served (sum) | top opcodes: count (mean µs) |",
             "|---|---|---:|---:|---:|---|"]
    for p in su.phases():
        s = su.stats("dualfs", p)
        if durable(p) or not s or not s.get("fuse_ops"):
            continue
        ops = {}
        for op in sorted({op for f in s["fuse_ops"] for op in f}):
            n = med([f.get(op, {}).get("count", 0) for f in s["fuse_ops"]])
            us = med([f.get(op, {}).get("total_us", 0) for f in s["fuse_ops"]])
            ops[op] = (n, us)
        total_n, total_us = sum(n for n, _ in ops.values()), sum(us for _, us in ops.values())
        top = sorted(ops.items(), key=lambda kv: -kv[1][1])[:5]
        cells = ", ".join(f"{op} {n:,.0f} ({us / max(n, 1):.0f})" for op, (n, us) in top if n)
        lines.append(f"| {p} | {lab(su.run_of('dualfs', p))} | {fmt(s['wall_s'])} | {total_n:,.0f} | "
                     f"{total_us / 1e6:.2f} s | {cells} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def rates_table(su, lab, configs):
    lines = ["| configuration | PostMark tx/s | seq write + fsync MiB/s | seq read, cold, MiB/s | 4 KiB random "
             "writes/s, fsync every 256 | 4 KiB random writes/s, fsync each |", "|---|---:|---:|---:|---:|---:|"]
    for c in configs:
        if not any((su.stats(c, p) or {}).get(k) is not None for p, k in (
                ("postmark", "x_postmark_tx_s"), ("seq-write-fsync", "x_bw_mib_s"), ("seq-read-cold", "x_bw_mib_s"),
                ("rand-fsync-256", "x_iops"), ("rand-fsync-1", "x_iops"))):
            continue

        def g(p, k):
            s = su.stats(c, p)
            return fmt((s or {}).get(k)) + (f" [{lab(su.run_of(c, p))}]" if s and s.get(k) is not None else "")
        lines.append(f"| {c} | {g('postmark', 'x_postmark_tx_s')} | {g('seq-write-fsync', 'x_bw_mib_s')} | "
                     f"{g('seq-read-cold', 'x_bw_mib_s')} | {g('rand-fsync-256', 'x_iops')} | "
                     f"{g('rand-fsync-1', 'x_iops')} |")
    return "\n".join(lines) + "\n"


def durability_table(su, lab, configs):
    phases = [p for p in su.phases() if durable(p)]
    cols = [c for c in configs if any(su.stats(c, p) for p in phases)]
    if not phases or not cols:
        return ""
    runs = {su.run_of(c, p) for c in cols for p in phases} - {None}
    lines = [f"Run {', '.join(f'[{lab(r)}]' for r in sorted(runs, key=lambda r: su.run_time[r]))}; ratio to "
             "ext4 in brackets.", "",
             "| phase | figure | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for p in phases:
        keys = next(k for pre, k in DURABILITY if p.startswith(pre))
        for key, label in keys:
            cells = []
            for c in cols:
                v = (su.stats(c, p) or {}).get(key)
                r = su.value(key, c, p, "ext4") if c != "ext4" else None
                cells.append(fmt(v) + ("" if r is None else f" ({r:.2f})"))
            if any(x != "–" for x in cells):
                lines.append(f"| {p} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def semantic_table(su, phases):
    lines = ["| phase | class | write req | MiB written | mean KiB | read req | MiB read |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for p in phases:
        s = su.stats("dualfs", p)
        sem = (s or {}).get("semantic")
        if not sem:
            continue
        rows = {}
        for dev, ops in sem["devices"].items():
            for op in ("write", "read"):
                for cls, c in ops.get(op, {}).get("classes", {}).items():
                    rows.setdefault(f"{dev}/{cls}", {})[op] = c
        for cls in sorted(rows):
            w, r = rows[cls].get("write", {}), rows[cls].get("read", {})
            mib = (lambda b: None if b is None else b / (1 << 20))
            lines.append(f"| {p} | {cls} | {fmt(w.get('requests'))} | {fmt(mib(w.get('bytes')))} | "
                         f"{fmt(w.get('mean_kib'), 1)} | {fmt(r.get('requests'))} | {fmt(mib(r.get('bytes')))} |")
        fl = ", ".join(f"{dev} {ops.get('flushes', 0)}" for dev, ops in sem["devices"].items())
        lines.append(f"| {p} | flushes | {fl} | | | | |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def class_time_table(su, phases):
    classes = ["data", "inode", "dir", "extent", "xattr", "blob", "descriptor", "ifile", "ifile-index", "checkpoint",
               "superblock", "unknown"]
    rows = [(p, su.stats("dualfs", p)["semantic_replay"]) for p in phases
            if (su.stats("dualfs", p) or {}).get("semantic_replay")]
    used = [c for c in classes if any(r["classes"].get(c, 0) > 0 for _, r in rows)]
    if not rows:
        return ""
    lines = ["| phase | total s | " + " | ".join(used) + " |", "|---|---:|" + "---:|" * len(used)]
    for p, r in rows:
        tot = r["total_s"] or 1.0
        cells = [f"{r['classes'][c]:.2f} ({100 * r['classes'][c] / tot:.0f}%)" if r["classes"].get(c) else "–"
                 for c in used]
        lines.append(f"| {p} | {r['total_s']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --- the other tools -------------------------------------------------------

def newest_run(records, tool):
    runs = collections.defaultdict(list)
    for r in records:
        if r["tool"] == tool:
            runs[r["run"]].append(r)
    if not runs:
        return None, []
    # A run beside a peer first: an A/B of two builds alone (configs such
    # as before/after) compares nothing the table's readers look for. Then
    # a run on a quiet machine, as for the suite.
    def quiet(k):
        loads = sorted(float(r["machine"]["load"].split()[0]) for r in runs[k] if r.get("machine", {}).get("load"))
        return bool(loads) and loads[len(loads) // 2] < QUIET_LOAD

    run = max(runs, key=lambda k: (any(r["config"] in PEERS for r in runs[k]), quiet(k), max(r["time"] for r in runs[k])))
    return run, runs[run]


def grouped(recs, keys, value):
    """Medians of `value` over the repeats, by `keys`."""
    g = collections.defaultdict(list)
    for r in recs:
        g[tuple(keys(r))].append(value(r))
    return {k: med(v) for k, v in g.items()}


def tool_table(recs, columns, key=lambda r: (r["config"], r["phase"]), header=("configuration", "phase")):
    """Medians of each column by configuration and phase, in the order measured."""
    order = []
    for r in recs:
        if key(r) not in order:
            order.append(key(r))
    lines = ["| " + " | ".join(header) + " | " + " | ".join(label for _, label in columns) + " |",
             "|" + "---|" * len(header) + "---:|" * len(columns)]
    for k in order:
        rs = [r for r in recs if key(r) == k]
        cells = []
        for name, _ in columns:
            vals = [r["values"].get(name) for r in rs if isinstance(r["values"].get(name), (int, float))]
            cells.append(fmt(med(vals)) if vals else "–")
        lines.append("| " + " | ".join(str(x) for x in k) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def micro_table(recs):
    by = collections.defaultdict(list)
    for r in recs:
        by[(r["config"], r["phase"])].append(r["values"])
    configs = [c for c in ("ext4", "dualfs", "fuse2fs") if any(k[0] == c for k in by)]
    phases = []
    for r in recs:
        if r["phase"] not in phases:
            phases.append(r["phase"])
    head = "| operation | " + " | ".join(f"{c} µs/op | {c} req/op" if c != "ext4" else "ext4 µs/op"
                                       for c in configs) + " |"
    lines = [head, "|---|" + "---:|" * sum(1 if c == "ext4" else 2 for c in configs)]
    for p in phases:
        base = med([x["us_per_op"] for x in by.get(("ext4", p), [])])
        cells = []
        for c in configs:
            xs = by.get((c, p), [])
            us = med([x["us_per_op"] for x in xs])
            cells.append(fmt(us) + (f" ({us / base:.1f}×)" if base and us and c != "ext4" else ""))
            if c != "ext4":
                cells.append(fmt(med([sum(x["requests"].values()) / max(x["ops"], 1) for x in xs])))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def other_tools(records, lab):
    """The tables of the tools beside the suite, each from its newest run."""
    out = []
    sections = [
        ("micro", "System calls through the mount (`bench/micro.py`)",
         "µs per system call, medians of the repeats, ratio to ext4 in brackets; FUSE requests per call "
         "counted by the kernel's `fuse:fuse_request_send` tracepoint.", micro_table),
        ("engine-bench", "The engine alone (`engine-bench`, no FUSE, no kernel)",
         "100,000 creates in directories of 1,000 and a sync; the names looked up warm and after a remount; "
         "50,000 random 4 KiB writes over 512 MiB and an fsync; 512 MiB written and read in 1 MiB calls.",
         lambda rs: tool_table(rs, [("creates_per_s", "creates/s"), ("lookups_per_s_warm", "lookups/s warm"),
                                    ("lookups_per_s_cold", "lookups/s cold"),
                                    ("random_4k_writes_per_s", "4 KiB random writes/s"),
                                    ("seq_write_mib_s", "seq write MiB/s"), ("seq_read_mib_s", "seq read MiB/s"),
                                    ("meta_bytes_per_created_file", "meta-data bytes per created file")],
                               key=lambda r: (r["config"],), header=("backend",))),
        ("mount-time", "Mount time against the data device's size (`bench/mount_time.py`)",
         "Cold cache before every timed mount; \"after a crash\": about 2 MiB of log since the checkpoint; "
         "a configuration named after a build is DualFS as that build (`--dualfs NAME=PATH`).",
         lambda rs: tool_table(rs, [("mkfs_s", "mkfs s"), ("meta_image_bytes_used", "bytes mkfs left"),
                                    ("mount_clean_s", "mount clean s"), ("mount_warm_s", "mount warm s"),
                                    ("mount_after_crash_s", "mount after crash s"),
                                    ("rss_after_mount_kib", "server KiB after mount"), ("fsck_s", "fsck s"),
                                    ("e2fsck_f_s", "e2fsck -f -n s")], header=("file system", "data device"))),
        ("snapshot-time", "Snapshot creation (`bench/snapshot_time.sh`)",
         "A volume holding the Linux tree; the request alone (`strace -T`) and the whole command, ms.",
         lambda rs: tool_table(rs, [("create_ms", "create ms"), ("command_ms", "command ms")],
                               key=lambda r: (r["config"], r["values"].get("data_GiB")),
                               header=("file system", "data GiB"))),
        ("snapshot-overwrite", "Overwrites around a snapshot (`bench/snapshot_overwrite.sh`)",
         "32,768 random 4 KiB overwrites of a 1 GiB file (128 MiB), then fsync; the data device's counters.",
         lambda rs: tool_table(rs, [("iops", "IOPS"), ("data_write_requests", "data write requests"),
                                    ("data_MiB_written", "data MiB written")], key=lambda r: (r["phase"],),
                               header=("run",))),
        ("clone-time", "Clones (`bench/clone_time.sh`)",
         "Making a clone, mounting it, switching the live tree to it and back, ms; btrfs: a writable "
         "snapshot and its mount.",
         lambda rs: tool_table(rs, [("clone_ms", "clone ms"), ("mount_ms", "mount ms"), ("switch_ms", "switch ms"),
                                    ("switch_meta_KiB", "meta-data written by the switch, KiB"),
                                    ("back_ms", "back ms")], key=lambda r: (r["config"], r["values"].get("data_GiB")),
                               header=("file system", "data GiB"))),
        ("send-time", "Send and receive (`bench/send_time.sh`)",
         "The Linux tree, a full stream, then increments after changing some files; seconds and stream bytes.",
         lambda rs: tool_table(rs, [("seconds", "seconds"), ("stream_bytes", "stream bytes")])),
        ("resize", "Resize (`bench/resize.sh`)",
         "While a tar of the tree is extracted into the volume (\"idle\": without it); bytes are the loop "
         "devices' written sectors during the command.",
         lambda rs: tool_table(rs, [("resize_s", "resize s"), ("resize_MiB_written", "MiB written"),
                                    ("tar_s", "tar s"), ("moved_MiB", "MiB moved")])),
        ("migrate", "Migrate (`bench/migrate.sh`)",
         "One device of a mounted volume moved, idle or while a tar runs into it; btrfs replace for reference.",
         lambda rs: tool_table(rs, [("secs", "seconds"), ("new_MiB", "MiB to the new device"),
                                    ("copied", "MiB copied"), ("mirrored", "MiB mirrored"), ("tar_s", "tar s")])),
        ("memory-rounds", "Memory over rounds of create-and-delete (`bench/memory_rounds.py`)",
         "The serving process's VmRSS and VmHWM (MiB) after each phase.",
         lambda rs: tool_table(rs, [("VmRSS", "RSS MiB"), ("VmHWM", "peak MiB")],
                               key=lambda r: (r["config"], r.get("rep"), r["phase"]),
                               header=("configuration", "round", "phase"))),
        ("fuse-scale", "Many files through the mount (`bench/fuse_scale.py`)",
         "Mount times after the files were made (medians of the timed mounts), s.",
         lambda rs: tool_table(rs, [("mount_clean_s", "mount clean s"),
                                    ("mount_after_crash_s", "mount after crash s")])),
    ]
    for tool, title, note, table in sections:
        run, recs = newest_run(records, tool)
        if not recs:
            continue
        out.append(f"\n### {title}\n\nRun [{lab(run)}]. {note}\n\n{table(recs)}")
    run, recs = newest_run(records, "uring-rt")
    if recs:
        import uring_rt
        out.append(f"\n### Round trips over io_uring and /dev/fuse (`bench/uring_rt.py`)\n\nRun [{lab(run)}].\n"
                   + uring_rt.tables([uring_rt.row(r) for r in recs]))
    return "".join(out)


# --- plots -----------------------------------------------------------------

def plot(su, phases, configs, key, title, path, unit="", traced=False):
    """Grouped bars per phase, each configuration normalised to ext4 of
    its run; ext4's value under each group's name."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ph = [p for p in phases if (su.stats("ext4", p) or {}).get(key)]
    cf = [c for c in configs if any(su.value(key, c, p, "ext4") is not None for p in ph) or c == "ext4"]
    if not ph:
        return False
    top = 3.0
    fig, ax = plt.subplots(figsize=(min(18, 0.8 * len(ph) + 2.5), 5.2))
    w = 0.84 / len(cf)
    colors = ["#d62728", "#8c564b", "#7f7f7f", "#1f77b4", "#aec7e8", "#2ca02c", "#98df8a", "#ff7f0e", "#9467bd",
              "#e377c2"]
    for i, c in enumerate(cf):
        xs, ys = [], []
        for j, p in enumerate(ph):
            r = 1.0 if c == "ext4" else su.value(key, c, p, "ext4")
            if r is not None:
                xs.append(j + (i - len(cf) / 2 + 0.5) * w)
                ys.append(r)
        ax.bar(xs, [min(y, top) for y in ys], w, label=c, color=colors[CONFIGS.index(c) % len(colors)])
        for x, y in zip(xs, ys):
            if c == "dualfs" or y > top:
                ax.text(x, min(y, top) + 0.03, f"{y:.2f}" if y < 10 else f"{y:.0f}", ha="center", va="bottom",
                        fontsize=6, rotation=90, color="#d62728" if c == "dualfs" else "black")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(ph)))
    ax.set_xticklabels([f"{p}\n{fmt(su.stats('ext4', p)[key])}{unit}" for p in ph], rotation=45, ha="right",
                       fontsize=7)
    ax.set_xlim(-0.6, len(ph) - 0.4)
    ax.set_ylim(0, top + 0.45)
    ax.set_ylabel("normalised to ext4 (= 1)")
    ax.set_title(f"{title}: bars normalised to ext4 of the same run (ext4's value under each phase; "
                 f"clipped at {top:g})", fontsize=9)
    ax.legend(fontsize=7, ncol=len(cf), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- the page --------------------------------------------------------------

FIGURE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")


def fill(text, su, warn):
    """The findings' {{KEY CONFIG[/BASE] PHASE [DIGITS]}} figures."""
    def one(m):
        if m.group(1) in ("runs", "tables", "disks"):
            return m.group(0)
        words = m.group(1).split()
        run = words.pop()[1:] if words[-1].startswith("@") else None
        if len(words) not in (3, 4):
            raise SystemExit(f"bench/findings.md: cannot read {{{{{m.group(1)}}}}}")
        key, config, phase = words[:3]
        digits = int(words[3]) if len(words) == 4 else 2
        config, _, base = config.partition("/")
        if run:
            s, b = su.stats(config, phase, run), su.stats(base, phase, run) if base else None
            v = (s or {}).get(key) if not base else ratio((s or {}).get(key), (b or {}).get(key))
        else:
            v = su.value(key, config, phase, base or None)
        if v is None:
            warn.append(m.group(0))
            return "–"
        return fmt(float(v), digits)
    return FIGURE.sub(one, text)


def runs_table(records, lab, su):
    """Every run the page cites: when, which commit, on what machine."""
    by = collections.defaultdict(list)
    for r in records:
        by[r["run"]].append(r)
    lines = ["| | run | tool | time (UTC) | commit | machine | load at start | configurations |",
             "|---|---|---|---|---|---|---|---|"]
    for run, label in sorted(lab.labels.items(), key=lambda kv: kv[1]):
        rs = sorted(by[run], key=lambda r: r["time"])
        first = rs[0]
        m = first.get("machine", {})
        commit = first.get("commit") or (f"≤ {first['stored_in']}" if first.get("stored_in") else "?")
        builds = sorted({r["build"] for r in rs if r.get("build")})
        if builds:
            commit += " (DualFS built elsewhere: " + ", ".join(f"`{b}`" for b in builds) + ")"
        cpu = f"{m.get('cpus') or '?'} × {m.get('cpu', '?')}, Linux {m.get('kernel', '?')}" if m.get("cpu", "?") != "?" \
            else "–"
        configs = ", ".join(sorted({r["config"] for r in rs}))
        lines.append(f"| [{label}] | `{run}` | {first['tool']} | {first['time'][:16].replace('T', ' ')} | {commit} | "
                     f"{cpu} | {m.get('load') or '–'} | {configs} |")
    return "\n".join(lines) + "\n"


def durable(phase):
    return any(phase.startswith(pre) for pre, _ in DURABILITY)


def tables(su, lab, records, docs, no_plots):
    configs = su.configs()
    # The durability phases run for a fixed time: their own table, not the per-phase ones.
    phases = [p for p in su.phases() if not durable(p)]
    io = [c for c in configs if c != "floor"]  # the floor does no I/O
    heavy = [p for p in phases if p in META_HEAVY]
    md = ["## DualFS, ext4 and the floor\n", goals_table(su, lab),
          "\n### Meta-data-heavy phases: requests, bytes and disk time against ext4\n",
          "Write requests less flushes (the block layer counts an empty flush as a write request too); meta-data "
          "bytes: DualFS's meta-data device against everything ext4 wrote less the file data DualFS wrote to its "
          "data device in the same phase.\n", io_goals_table(su, lab, heavy),
          "\n### FUSE requests DualFS served per phase\n",
          "`dualfs stats --json` read before and after each phase, medians.\n", requests_table(su, lab),
          "\n### DualFS's transports\n", transports_table(su, lab),
          "\n## Wall time\n",
          phase_table(su, lab, phases, configs, "wall_s", "Seconds, the phase's command (the page cache may hold "
                      "dirty data)"),
          "\n" + phase_table(su, lab, phases, configs, "wall_umount_s", "Seconds until unmounted (everything on "
                             "disk)"),
          "\n## Requests and bytes\n",
          "Loop-device counters from before the phase until after the unmount that follows it, both devices.\n",
          phase_table(su, lab, phases, io, "writes", "Write requests less flushes"),
          "\n" + phase_table(su, lab, phases, io, "write_mib", "MiB written", digits=1),
          "\n**Write requests less flushes / MiB written, per device** (the newest run of each)\n\n"
          + per_device_table(su, lab, phases, [c for c in configs if c in ("dualfs", "ext4", "ext4-extjournal",
                                                                          "xfs-extlog")]),
          "\n" + phase_table(su, lab, phases, io, "read_req", "Read requests"),
          "\n" + phase_table(su, lab, phases, io, "read_mib", "MiB read", digits=1),
          "\n" + phase_table(su, lab, phases, io, "flushes", "Flush requests"),
          "\n" + phase_table(su, lab, phases, io, "trace_write_req", "Write requests carrying data (the traced "
                             "run's exact count)", traced=True),
          "\n" + phase_table(su, lab, phases, io, "trace_write_kib", "Mean write request, KiB (traced run)",
                             digits=1, traced=True),
          "\n## Rates the tools report\n", rates_table(su, lab, configs),
          "\n## Durability: fsync beside other writes, fio, SQLite\n", durability_table(su, lab, configs),
          "\n## Total I/O time under the disk models\n",
          "The traced run's requests replayed through `dualfs trace replay` (seconds).\n"]
    for mk in MODEL_KEYS:
        md.append("\n" + phase_table(su, lab, phases, io, mk, f"Total I/O time, s: {mk}", digits=3,
                                     traced=True))
    sem = [p for p in phases if p in SEMANTIC_PHASES]
    md += ["\n## What DualFS wrote and read, by block class\n",
           "Its own trace (`-o trace=`) of the traced run, from mount to unmount, in the engine's requests (before "
           "the kernel's block-device cache).\n", semantic_table(su, sem),
           "\nThe same requests replayed on the 5,400 rpm model (one disk): seconds of I/O time per class of block "
           "(a request's time shared among its blocks) and the share of the phase's total.\n",
           class_time_table(su, sem),
           "\n## The other tools\n", other_tools(records, lab), "\n## Plots\n"]
    os.makedirs(docs, exist_ok=True)
    for key, title, name, unit, traced in [
            ("trace_write_req", "Write requests carrying data", "bench-write-requests.png", "", True),
            ("hdd5400/one-disk", "Total I/O time, 5,400 rpm disk, one disk", "bench-io-time-hdd5400.png", " s", True),
            ("hdd5400/two-disks", "Total I/O time, 5,400 rpm disks, two disks", "bench-io-time-hdd5400-2d.png", " s",
             True),
            ("hdd7200/one-disk", "Total I/O time, 7,200 rpm disk, one disk", "bench-io-time-hdd7200.png", " s", True),
            ("wall_s", "Wall time", "bench-wall.png", " s", False)]:
        if not no_plots and plot(su, phases, configs if key == "wall_s" else io, key, title,
                                 os.path.join(docs, name), unit, traced):
            md.append(f"![{title}]({name})\n")
    return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=store.STORE)
    ap.add_argument("--docs", default=os.path.join(HERE, "..", "docs"))
    ap.add_argument("--findings", default=os.path.join(HERE, "findings.md"),
                    help="the page's hand-written part: {{runs}} and {{tables}} mark where the generated parts go")
    ap.add_argument("--run", action="append", help="only this run (repeat for more)")
    ap.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    a = ap.parse_args()
    records = store.load(a.store)
    if a.run:
        records = [r for r in records if r["run"] in a.run]
    if not records:
        raise SystemExit(f"{a.store} holds no results{' of those runs' if a.run else ''}")
    su = Suite(records)
    lab = Labels()
    with open(a.findings) as f:
        template = f.read()
    warn = []
    findings = fill(template, su, warn)
    generated = tables(su, lab, records, a.docs, a.no_plots)
    on_disks = disks.section(records, None if a.no_plots else os.path.join(a.docs, "bench-disks.png"), lab)
    page = findings.replace("{{tables}}", generated).replace("{{disks}}", on_disks).replace("{{runs}}", runs_table(records, lab, su))
    for w in warn:
        print(f"bench/report.py: no figure in the store for {w}", file=sys.stderr)
    path = os.path.join(a.docs, "BENCHMARKS.md")
    with open(path, "w") as f:
        f.write(page)
    print(f"{path}: {len(lab.labels)} runs cited", file=sys.stderr)


if __name__ == "__main__":
    main()
