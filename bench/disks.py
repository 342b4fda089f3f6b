#!/usr/bin/env python3
"""Emulated disks for the suite (bench/suite.py --disks), their calibration
and the report of the runs on them.

A disk is an image file served by `dualfs trace serve --model M` (every
request answered when the modelled disk would have completed it) with a
loop device over each of its partitions, each served as a file of its own
(`--parts`), so that both partitions of one disk share its head. The file system is made with the images served
without a model (mkfs is not what is measured, and zeroing inode tables at
10 MB/s would take minutes), then they are served again through their
models and the file system is mounted on the emulated disks.

    python3 bench/disks.py calibrate [--store bench/results.jsonl]
    python3 bench/disks.py report [--store bench/results.jsonl] [--plot docs/bench-disks.png]

Both keep their results in the results store (bench/store.py): the suite's
runs on emulated disks as tool `disks`, the calibration as tool
`disk-calibration` (configuration: the model, phase: `RW BS qdQD`).
bench/report.py puts the report in docs/BENCHMARKS.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402

# Where each role's device goes: disks by name and model, then the disk of
# the meta-data (journal, log, XFS's main section when its data is on the
# realtime device) role and of the data role. A disk holding both has the
# meta-data partition first (the outer tracks, as in the paper).
LAYOUTS = {
    "hdd5400": {"disks": {"a": "hdd5400"}, "meta": "a", "data": "a"},
    "hdd5400-2d": {"disks": {"a": "hdd5400", "b": "hdd5400"}, "meta": "a", "data": "b"},
    "hdd7200": {"disks": {"a": "hdd7200"}, "meta": "a", "data": "a"},
    "hdd7200-2d": {"disks": {"a": "hdd7200", "b": "hdd7200"}, "meta": "a", "data": "b"},
    "tiered": {"disks": {"a": "ssd", "b": "hdd7200"}, "meta": "a", "data": "b"},
}
# The server's threads wake at the modelled times; on a shared machine a
# runnable thread can wait milliseconds for a CPU, so they run SCHED_FIFO
# (they sleep nearly all the time: BENCHMARKS.md, "The emulation's own cost").
RT = ["chrt", "-f", "5"]


def sh(cmd, capture=False):
    r = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {cmd}\n{r.stderr.decode(errors='replace')}")
    return r.stdout.decode(errors="replace") if capture else ""


def partitions(layout, two, total_mib, meta_mib):
    """role -> (disk, offset MiB, size MiB); disk -> size MiB."""
    lay = LAYOUTS[layout]
    parts = {}
    if two:
        parts["meta"] = (lay["meta"], 0, meta_mib)
        same = lay["meta"] == lay["data"]
        parts["data"] = (lay["data"], meta_mib if same else 0, total_mib - meta_mib)
    else:
        parts["data"] = (lay["data"], 0, total_mib)
    sizes = {}
    for disk, off, size in parts.values():
        model = lay["disks"][disk]
        # An SSD is as large as its partition; a disk is always the whole
        # size, so that a seek's share of the stroke means the same in
        # every layout.
        sizes[disk] = max(sizes.get(disk, 0), off + size if model == "ssd" else total_mib)
    return parts, sizes


def set_queue(dev, model):
    """A disk's loop device: rotational, and no discard (a disk has none:
    its file system then never punches holes but writes zeros)."""
    q = f"/sys/block/{os.path.basename(dev)}/queue"
    with open(f"{q}/rotational", "w") as f:
        f.write("0" if model == "ssd" else "1")
    if model != "ssd":
        with open(f"{q}/discard_max_bytes", "w") as f:
            f.write("0")


class Disks:
    """The emulated disks of one volume."""

    def __init__(self, layout, dualfs, workdir, two, total_mib, meta_mib, write_cache=True):
        self.layout, self.dualfs, self.dir = layout, dualfs, workdir
        self.parts, self.sizes = partitions(layout, two, total_mib, meta_mib)
        self.models = LAYOUTS[layout]["disks"]
        self.write_cache = write_cache
        self.servers = {}   # disk -> (process, mountpoint)
        self.loops = {}     # role -> loop device

    def image(self, disk):
        return os.path.join(self.dir, f"disk-{disk}.img")

    def create(self):
        """Fresh sparse images, served without a model (for mkfs); returns
        role -> loop device."""
        os.makedirs(self.dir, exist_ok=True)
        for disk, mib in self.sizes.items():
            img = self.image(disk)
            if os.path.exists(img):
                os.unlink(img)
            with open(img, "wb") as f:
                f.truncate(mib << 20)
        return self.serve(False)

    def emulate(self, trace_prefix=None):
        """Serves the images again, now through their models; returns
        role -> loop device."""
        self.detach()
        return self.serve(True, trace_prefix)

    def serve(self, model_on, trace_prefix=None):
        """One server per disk, its partitions as files p0, p1, ... (a loop
        device over each: two partitions of one disk are not one file,
        which DualFS would refuse as a device given twice)."""
        for disk, model in self.models.items():
            if disk not in self.sizes:
                continue
            mnt = os.path.join(self.dir, f"serve-{disk}")
            os.makedirs(mnt, exist_ok=True)
            parts = sorted((off, size, role) for role, (d, off, size) in self.parts.items() if d == disk)
            argv = RT + [self.dualfs, "trace", "serve", self.image(disk), mnt,
                         "--parts", ",".join(f"{size}M" for _, size, _ in parts)]
            if model_on and model:
                argv += ["--model", model]
                if not self.write_cache:
                    argv.append("--no-write-cache")
            if trace_prefix:
                argv += ["--out", f"{trace_prefix}-{disk}.trace",
                         "--device", "m" if self.parts.get("meta", ("",))[0] == disk else "d"]
            log = open(os.path.join(self.dir, f"serve-{disk}.log"), "w")
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
            for _ in range(200):
                if os.path.exists(os.path.join(mnt, "p0")):
                    break
                if p.poll() is not None:
                    raise RuntimeError(f"trace serve for disk {disk} exited: see {self.dir}/serve-{disk}.log")
                time.sleep(0.05)
            self.servers[disk] = (p, mnt)
            for i, (_, _, role) in enumerate(parts):
                dev = sh(f"losetup --direct-io=on -f --show {mnt}/p{i}", capture=True).strip()
                if model_on and model:
                    set_queue(dev, model)
                self.loops[role] = dev
        return dict(self.loops)

    def stats(self):
        """Each served disk's `stats`: disk -> JSON."""
        out = {}
        for disk, (_, mnt) in self.servers.items():
            with open(os.path.join(mnt, "stats")) as f:
                out[disk] = json.load(f)
        return out

    def detach_loops(self):
        for dev in self.loops.values():
            subprocess.run(["losetup", "-d", dev], check=False)
        self.loops = {}

    def detach(self):
        self.detach_loops()
        for p, mnt in self.servers.values():
            subprocess.run(["fusermount3", "-u", mnt], check=False)
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.terminate()
        self.servers = {}


def stats_diff(before, after):
    """What each disk did between two `stats` readings."""
    out = {}
    for disk, a in after.items():
        b = before.get(disk, {})
        ea, eb = a.get("emulation") or {}, b.get("emulation") or {}
        da, db = ea.get("drive", {}), eb.get("drive", {})
        d = {"model": ea.get("model"), "cpu_s": a["cpu_s"] - b.get("cpu_s", 0.0)}
        for k in ("answered", "response_ms", "late_ms"):
            d[k] = ea.get(k, 0) - eb.get(k, 0)
        d["late_max_ms"] = ea.get("late_max_ms", 0)
        for k, v in da.items():
            d[k] = v - db.get(k, 0)
        out[disk] = d
    return out


# --- calibration -----------------------------------------------------------

CAL = [("randread", "4k"), ("randwrite", "4k"), ("read", "1M"), ("write", "1M")]


def fio(dev, rw, bs, qd, ios):
    """fio on the raw device: `ios` requests at queue depth `qd`, writes
    ending with an fsync (as the prediction ends with a flush)."""
    cmd = (f"fio --name=cal --filename={dev} --direct=1 --ioengine=libaio --rw={rw} --bs={bs} --iodepth={qd} "
           f"--number_ios={ios} --size=4G --output-format=json --randrepeat=1")
    if "write" in rw:
        cmd += " --end_fsync=1"
    j = json.loads(sh(cmd, capture=True))["jobs"][0]
    side = j["write" if "write" in rw else "read"]
    secs = (j["job_runtime"] or 1) / 1e3
    return {"iops": side["total_ios"] / secs, "mb_s": side["io_bytes"] / secs / 1e6,
            "lat_ms": side["lat_ns"]["mean"] / 1e6}


def predict(dualfs, model, rw, bs, qd, ios):
    j = json.loads(sh(f"{dualfs} trace predict --json --model {model} --rw {rw} --bs {bs} --qd {qd} --ios {ios}",
                      capture=True))
    return {"iops": j["iops"], "mb_s": j["mb_s"], "lat_ms": j["mean_latency_ms"]}


def calibrate(args):
    run = store.Run("disk-calibration", args.store)
    results = []
    # "bare": the same FUSE file and loop device with no model, what the
    # path itself costs; then each model.
    cases = [(None, "bare")] + [(m, "emulated") for m in args.models.split(",")]
    for model, label in cases:
        d = Disks("hdd7200", args.dualfs, os.path.join(args.work, "cal"), False, 4096, 0)
        d.models = {"a": model}
        d.create()
        try:
            dev = d.emulate()["data"]
            for rw, bs in CAL:
                for qd in (1, 32):
                    ios = args.ios if bs == "4k" else args.ios // 8
                    if model == "ssd" or label == "bare":
                        ios *= 10
                    s0 = d.stats()
                    load = os.getloadavg()[0]
                    got = fio(dev, rw, bs, qd, ios)
                    cost = stats_diff(s0, d.stats())["a"]
                    row = {"model": model or "none", "path": label, "rw": rw, "bs": bs, "qd": qd, "ios": ios,
                           "measured": got, "load": load, "server": cost}
                    if label == "emulated":
                        row["predicted"] = predict(args.dualfs, model, rw, bs, qd, ios)
                    results.append(row)
                    run.append(run.record(row["model"], f"{rw} {bs} qd{qd}", row))
                    p = row.get("predicted", {})
                    print(f"{model or 'none':8} {label:8} {rw:9} {bs:>3} qd{qd:<2} {got['iops']:9.1f} IOPS "
                          f"{got['lat_ms']:8.3f} ms  model {p.get('iops', 0):9.1f} IOPS {p.get('lat_ms', 0):8.3f} ms"
                          f"  load {load:.1f}", file=sys.stderr, flush=True)
        finally:
            d.detach()
    return results


# --- report ----------------------------------------------------------------

PHASES = ["untar", "find", "grep", "tar", "cp-a", "web", "rm", "postmark"]
META_HEAVY = ["untar", "find", "cp-a", "rm", "postmark"]


def medians(runs, key):
    """(disk, config, phase) -> median of `key` (a field, or a function of a
    run) over the runs, and the runs."""
    get = key if callable(key) else (lambda r: r[key])
    groups = {}
    for r in runs:
        if not r.get("disk") or (callable(key) and r.get("timed_out")):
            continue
        groups.setdefault((r["disk"], r["config"], r["phase"]), []).append(r)
    return {k: (statistics.median(get(x) for x in v), v) for k, v in groups.items()}


def busy_s(r):
    """Seconds the emulated disks' heads (or the SSD's channels) worked."""
    return sum(e.get("busy_ms", 0.0) for e in (r.get("emulation") or {}).values()) / 1e3


def base_of(med, disk, phase):
    return med.get((disk, "ext4", phase)) or med.get((disk, "ext4-extjournal", phase))


def table(med, disk, configs, title):
    cs = [c for c in configs if any(k[0] == disk and k[1] == c for k in med)]
    md = [f"\n**{title}, s, on {disk}** (median of {max(len(v[1]) for v in med.values())}; "
          "in brackets the ratio to ext4, or to ext4 with its journal on the other device where ext4 did not run)\n",
          "| phase | " + " | ".join(cs) + " |", "|---|" + "---:|" * len(cs)]
    for ph in PHASES:
        if not any((disk, c, ph) in med for c in cs):
            continue
        base = base_of(med, disk, ph)
        cells = []
        for c in cs:
            v = med.get((disk, c, ph))
            if v is None:
                cells.append("")
                continue
            same = base is not None and v is base
            ratio = f" ({v[0] / base[0]:.2f})" if base and base[0] > 0 and not same else ""
            cells.append(f"{v[0]:.1f}{ratio}")
        md.append(f"| {ph} | " + " | ".join(cells) + " |")
    return md


def targets(med, disks):
    """DualFS against ext4 (and, tiered, against ext4 with an SSD journal
    and XFS with an SSD log) on the meta-data-heavy phases."""
    md = ["\n**Targets** (until unmounted, medians): DualFS ÷ the peer; below 1 is met\n",
          "| disk | peer | " + " | ".join(META_HEAVY) + " |", "|---|---|" + "---:|" * len(META_HEAVY)]
    for disk in disks:
        peers = ["ext4", "ext4-extjournal", "xfs-extlog", "xfs-rt"]
        for peer in peers:
            cells = []
            for ph in META_HEAVY:
                d, p = med.get((disk, "dualfs", ph)), med.get((disk, peer, ph))
                if not d or not p or p[0] <= 0:
                    cells.append("")
                    continue
                r = d[0] / p[0]
                cells.append(f"{r:.2f} {'met' if r < 1 else '**missed**'}")
            if any(cells):
                md.append(f"| {disk} | {peer} | " + " | ".join(cells) + " |")
    return md


def cost(runs, disks):
    """The emulation's own cost beside the modelled service: per request,
    the server's CPU and how late its answers went out."""
    md = ["\n**The emulation's own cost** (all phases of all runs, per disk)\n",
          "| layout | disk | model | requests | modelled response, ms/request | server CPU, ms/request | "
          "answered late by, ms/request (mean) | worst |",
          "|---|---|---|---:|---:|---:|---:|---:|"]
    for disk in disks:
        acc = {}
        for r in runs:
            if r.get("disk") != disk:
                continue
            for name, e in (r.get("emulation") or {}).items():
                a = acc.setdefault(name, {"model": e.get("model"), "n": 0, "resp": 0.0, "cpu": 0.0, "late": 0.0,
                                          "worst": 0.0})
                a["n"] += e.get("answered", 0)
                a["resp"] += e.get("response_ms", 0.0)
                a["cpu"] += e.get("cpu_s", 0.0) * 1e3
                a["late"] += e.get("late_ms", 0.0)
                a["worst"] = max(a["worst"], e.get("late_max_ms", 0.0))
        for name, a in sorted(acc.items()):
            n = max(1, a["n"])
            md.append(f"| {disk} | {name} | {a['model']} | {a['n']:,} | {a['resp'] / n:.3f} | {a['cpu'] / n:.3f} | "
                      f"{a['late'] / n:.3f} | {a['worst']:.1f} |")
    return md


def calibration(rows):
    """fio on each emulated disk beside the model's own figures."""
    md = ["\n**Calibration**: fio on the emulated device (direct I/O, libaio) against `dualfs trace predict` "
          "for the same run; writes end with an fsync, counted in the time; `none` is the same path with no model\n",
          "| model | fio | bs | QD | requests | measured IOPS | model IOPS | measured ÷ model | "
          "latency ms, measured | model | load |",
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m, p = r["measured"], r.get("predicted")
        ratio = f"{m['iops'] / p['iops']:.2f}" if p and p["iops"] else ""
        md.append(f"| {r['model']} | {r['rw']} | {r['bs']} | {r['qd']} | {r['ios']} | {m['iops']:,.1f} | "
                  f"{p['iops']:,.1f} | {ratio} | {m['lat_ms']:.3f} | {p['lat_ms']:.3f} | {r['load']:.1f} |"
                  if p else
                  f"| {r['model']} | {r['rw']} | {r['bs']} | {r['qd']} | {r['ios']} | {m['iops']:,.1f} | | | "
                  f"{m['lat_ms']:.3f} | | {r['load']:.1f} |")
    return md


def flat(rec):
    """A store record as the suite wrote it: its values with its identity."""
    out = dict(rec["values"])
    out.update(config=rec["config"], phase=rec["phase"], rep=rec.get("rep"), run=rec["run"])
    return out


def run_tables(runs):
    """One run's tables: per layout, until unmounted, the command alone and
    the disks' busy time; the targets where DualFS and a peer both ran."""
    until = medians(runs, "wall_umount_s")
    wall = medians(runs, "wall_s")
    busy = medians(runs, busy_s)
    disks = [d for d in LAYOUTS if any(k[0] == d for k in until)]
    configs = []
    for (_, c, _) in until:
        if c not in configs:
            configs.append(c)
    md = []
    for disk in disks:
        md += table(until, disk, configs, "Until unmounted")
        md += table(wall, disk, configs, "The command alone")
        md += table(busy, disk, configs, "The disks' busy time (modelled)")
    if "dualfs" in configs and len(configs) > 1:
        md += targets(until, disks)
    return md, until, busy, disks, configs


# A median load average below this on 2 CPUs counts as a quiet machine.
QUIET_LOAD = 3.0


def section(records, plot_path=None, label=lambda run: run):
    """The runs on emulated disks in the store, as Markdown: each run's
    tables (runs on a quiet machine first, then the largest first), the
    emulation's own cost, the newest calibration; and the plot of the
    first run."""
    by_run = {}
    for r in records:
        if r["tool"] == "disks":
            by_run.setdefault(r["run"], []).append(r)
    if not by_run:
        return ""

    def loaded(run):
        # FUSE round trips stretch with the machine's load, the disks' times
        # do not: a run on a shared machine says less about wall time.
        loads = sorted(x for r in by_run[run] for x in r["values"].get("loadavg", []))
        return bool(loads) and loads[len(loads) // 2] >= QUIET_LOAD

    order = sorted(by_run, key=lambda run: (loaded(run), -len(by_run[run]), run))
    md = []
    every = []
    for run in order:
        recs = by_run[run]
        runs = [flat(r) for r in recs]
        every += runs
        loads = [x for r in runs for x in r.get("loadavg", [])]
        load = f"; load {min(loads):.0f}–{max(loads):.0f}" if loads else ""
        layouts = ", ".join(d for d in LAYOUTS if any(r.get("disk") == d for r in runs))
        md.append(f"\n### Run [{label(run)}]: {layouts}\n\n`{recs[0]['command']}`{load.replace('; ', ' (', 1) + ')' if load else ''}")
        tables, until, busy, disks, configs = run_tables(runs)
        md += tables
        if run == order[0] and plot_path:
            plot([("until unmounted ÷ ext4's", until), ("disks' busy time ÷ ext4's", busy)], disks, configs,
                 plot_path)
            md.append(f"\n![Wall time and disk time on emulated disks, against ext4]({os.path.basename(plot_path)})")
    md += cost(every, [d for d in LAYOUTS if any(r.get("disk") == d for r in every)])
    cal = [r for r in records if r["tool"] == "disk-calibration"]
    if cal:
        newest = max(r["run"] for r in cal)
        md.append(f"\nRun [{label(newest)}].")
        md += calibration([r["values"] for r in cal if r["run"] == newest])
    return "\n".join(md) + "\n"


def plot(rows, disks, configs, path):
    """One column per layout; a row per measure (`rows`: (title, medians)),
    each bar a file system's median over ext4's (or ext4 with its journal on
    the other device where ext4 did not run), on a log scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {c: f"C{i}" for i, c in enumerate(configs)}
    fig, axes = plt.subplots(len(rows), len(disks), figsize=(5 * len(disks), 3.6 * len(rows)), squeeze=False)
    for row, (title, med) in zip(axes, rows):
        for ax, disk in zip(row, disks):
            cs = [c for c in configs if any(k[0] == disk and k[1] == c for k in med)]
            phs = [p for p in PHASES if any((disk, c, p) in med for c in cs)]
            width = 0.8 / max(1, len(cs))
            for i, c in enumerate(cs):
                base = [base_of(med, disk, p) for p in phs]
                ys = [(med[(disk, c, p)][0] / b[0]) if (disk, c, p) in med and b and b[0] > 0 else 0
                      for p, b in zip(phs, base)]
                ax.bar([x + i * width for x in range(len(phs))], ys, width, label=c, color=colors[c])
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(phs))])
            ax.set_xticklabels(phs, rotation=30, ha="right")
            ax.axhline(1.0, color="black", linewidth=0.5)
            ax.set_title(f"{disk}: {title}", fontsize=10)
            ax.set_yscale("log")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[c]) for c in configs]
    fig.legend(handles, configs, loc="upper center", ncol=len(configs), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=100)


def web(args):
    """SpecWeb-like reads: `reads` whole files drawn from the tree by a Zipf
    law (a file's chance falls as 1/rank, the ranks a seeded shuffle), as
    a web server's requests for its pages; later draws of a popular file
    come from the page cache, as they would."""
    import random
    files = []
    for d, _, names in os.walk(args.root):
        files += [os.path.join(d, n) for n in names]
    files.sort()
    rng = random.Random(2007)
    rng.shuffle(files)
    weights = [1.0 / (i + 1) for i in range(len(files))]
    total = 0
    for path in rng.choices(files, weights=weights, k=args.reads):
        with open(path, "rb") as f:
            total += len(f.read())
    print(f"{args.reads} reads, {total} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("calibrate", help="fio on each emulated disk against the model's own figures")
    c.add_argument("--dualfs", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "dualfs"))
    c.add_argument("--models", default="hdd5400,hdd7200,ssd")
    c.add_argument("--ios", type=int, default=400, help="4 KiB requests per run (1 MiB runs: an eighth)")
    c.add_argument("--work", default="/var/tmp/dualfs-disks")
    c.add_argument("--store", default=store.STORE)
    r = sub.add_parser("report", help="tables (and a plot) of the suite's runs on emulated disks")
    r.add_argument("--store", default=store.STORE)
    r.add_argument("--plot", help="write the plot here (PNG)")
    w = sub.add_parser("web", help="the suite's SpecWeb-like phase")
    w.add_argument("--root", required=True)
    w.add_argument("--reads", type=int, default=2000)
    args = ap.parse_args()
    if args.what == "web":
        web(args)
    elif args.what == "calibrate":
        args.dualfs = os.path.abspath(args.dualfs)
        calibrate(args)
    else:
        print(section(store.load(args.store), args.plot))


if __name__ == "__main__":
    main()
