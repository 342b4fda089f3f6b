#!/usr/bin/env python3
"""Turns bench/suite.py's results into docs/BENCHMARKS.md's tables and plots.

    bench/report.py RESULTS.json [MORE.json ...] [--docs docs] [--engine engine.json]

Later files win: for each configuration and phase, the untimed (traced)
and timed runs are taken from the last file that has them. Medians over
repeats. Ratios are to ext4.
"""

import argparse
import json
import os
import statistics

CONFIGS = ["dualfs", "ext2", "ext4", "ext4-extjournal", "xfs-extlog", "btrfs", "fuse2fs"]
META_HEAVY = ["untar", "rm", "write-meta", "write-meta-4p", "rw-meta", "postmark", "bonnie-small-files"]
SEMANTIC_PHASES = ["untar", "grep", "write-meta", "rm", "write-del", "postmark", "rand-fsync-1", "seq-write-fsync",
                   "bonnie-small-files"]
MODEL_KEYS = ["hdd5400/one-disk", "hdd5400/two-disks", "hdd7200/one-disk", "ssd/one-disk"]


def load(files):
    """{(config, phase): {"timed": [runs], "traced": run or None}} and the run order of phases."""
    table, order, meta = {}, [], {}
    for fn in files:
        with open(fn) as f:
            j = json.load(f)
        meta = j
        seen = {}
        for r in j["runs"]:
            key = (r["config"], r["phase"])
            kind = "traced" if r["traced"] else "timed"
            seen.setdefault((key, kind), []).append(r)
            if r["phase"] not in order:
                order.append(r["phase"])
        for (key, kind), runs in seen.items():
            e = table.setdefault(key, {"timed": [], "traced": None})
            if kind == "timed":
                e["timed"] = runs
            else:
                e["traced"] = runs[-1]
    return table, order, meta


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def counters(run):
    d = run["devices"]
    w = sum(x["write_req"] for x in d.values())
    wb = sum(x["write_sectors"] for x in d.values()) * 512
    r = sum(x["read_req"] for x in d.values())
    rb = sum(x["read_sectors"] for x in d.values()) * 512
    fl = sum(x["flush_req"] for x in d.values())
    meta_wb = d.get("meta", {}).get("write_sectors", 0) * 512
    data_wb = d.get("data", {}).get("write_sectors", 0) * 512
    return {"write_req": w, "write_bytes": wb, "read_req": r, "read_bytes": rb, "flushes": fl,
            "meta_write_bytes": meta_wb, "data_write_bytes": data_wb}


def stats(entry):
    """Medians of the timed runs (counters fall back to the traced run)."""
    runs = entry["timed"] or ([entry["traced"]] if entry["traced"] else [])
    if not runs:
        return None
    out = {"n": len(entry["timed"]), "wall_s": med([r["wall_s"] for r in entry["timed"]]),
           "wall_min_s": min([r["wall_s"] for r in entry["timed"]], default=None),
           "wall_umount_s": med([r["wall_umount_s"] for r in entry["timed"]])}
    cs = [counters(r) for r in runs]
    for k in cs[0]:
        out[k] = med([c[k] for c in cs])
    t = entry["traced"]
    if t and "replay" in t:
        for m in MODEL_KEYS:
            out[m] = t["replay"][m]["total_s"]
            out[m + " meta"] = t["replay"][m]["meta_s"]
    if t and "trace_summary" in t:
        devs = t["trace_summary"]["devices"].values()
        out["trace_write_req"] = sum(d.get("write", {}).get("requests", 0) for d in devs)
        out["trace_read_req"] = sum(d.get("read", {}).get("requests", 0) for d in devs)
        w = [d["write"] for d in devs if "write" in d]
        out["trace_write_kib"] = (sum(x["bytes"] for x in w) / 1024 / max(1, sum(x["requests"] for x in w))) if w else None
    extras = [r.get("extra", {}) for r in entry["timed"]]
    for k in (extras[0] if extras else {}):
        try:
            out["x_" + k] = med([float(e[k]) for e in extras if k in e])
        except (TypeError, ValueError):
            pass
    return out


def fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    return f"{v:,}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def mib(b):
    return None if b is None else b / (1 << 20)


def phase_table(S, phases, configs, key, title, conv=lambda x: x, digits=2):
    lines = [f"**{title}** (ratio to ext4 in brackets)", "",
             "| phase | " + " | ".join(configs) + " |", "|---|" + "---:|" * len(configs)]
    for p in phases:
        base = S.get(("ext4", p), {}) or {}
        cells = []
        for c in configs:
            s = S.get((c, p))
            if not s or s.get(key) is None:
                cells.append("–")
                continue
            v = conv(s[key])
            r = ratio(s[key], base.get(key))
            cells.append(fmt(v, digits) + ("" if c == "ext4" or r is None else f" ({r:.2f})"))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def dualfs_meta_journal_bytes(S, p):
    """Meta-data + journal bytes written: DualFS's meta-data device; for a
    peer, everything it wrote less the file data DualFS put on its data
    device in the same phase (the same files' contents)."""
    d = S.get(("dualfs", p))
    e = S.get(("ext4", p))
    if not d or not e:
        return None, None
    return d["meta_write_bytes"], max(e["write_bytes"] - d["data_write_bytes"], 0)


def targets(S, phases):
    lines = ["| phase | write req ÷ ext4 (≤ 0.5) | meta+journal bytes ÷ ext4 (≤ 0.5) | HDD I/O time ÷ ext4, "
             "5,400 rpm (≤ 0.3) | the same, 7,200 rpm | wall ÷ fuse2fs (≤ 0.5) | wall ÷ ext4 (≤ 1.5) |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def mark(v, limit):
        if v is None:
            return "–"
        if v == float("inf"):
            return "∞ ❌"
        return f"{v:.2f} {'✅' if v <= limit else '❌'}"

    for p in phases:
        d, e, f = S.get(("dualfs", p)), S.get(("ext4", p)), S.get(("fuse2fs", p))
        if not d or not e:
            continue
        dm, em = dualfs_meta_journal_bytes(S, p)
        wkey = "trace_write_req" if d.get("trace_write_req") is not None else "write_req"
        lines.append("| " + " | ".join([
            p,
            mark(ratio(d.get(wkey), e.get(wkey)), 0.5),
            mark(float("inf") if em == 0 and dm else ratio(dm, em), 0.5),
            mark(ratio(d.get("hdd5400/one-disk"), e.get("hdd5400/one-disk")), 0.3),
            mark(ratio(d.get("hdd7200/one-disk"), e.get("hdd7200/one-disk")), 0.3),
            mark(ratio(d["wall_s"], (f or {}).get("wall_s")), 0.5),
            mark(ratio(d["wall_s"], e["wall_s"]), 1.5),
        ]) + " |")
    return "\n".join(lines) + "\n"


def semantic_table(table, phases):
    lines = ["| phase | class | write req | MiB written | mean KiB | read req | MiB read |", "|---|---|---:|---:|---:|---:|---:|"]
    for p in phases:
        e = table.get(("dualfs", p))
        t = e and e["traced"]
        if not t or "semantic" not in t:
            continue
        devs = t["semantic"]["devices"]
        rows = {}
        for dev, ops in devs.items():
            for op in ("write", "read"):
                for cls, c in ops.get(op, {}).get("classes", {}).items():
                    r = rows.setdefault(f"{dev}/{cls}", {})
                    r[op] = c
        for cls in sorted(rows):
            w, r = rows[cls].get("write", {}), rows[cls].get("read", {})
            lines.append(f"| {p} | {cls} | {fmt(w.get('requests'))} | {fmt(mib(w.get('bytes')))} | "
                         f"{fmt(w.get('mean_kib'), 1)} | {fmt(r.get('requests'))} | {fmt(mib(r.get('bytes')))} |")
        fl = ", ".join(f"{dev} {ops.get('flushes', 0)}" for dev, ops in devs.items())
        lines.append(f"| {p} | flushes | {fl} | | | | |")
    return "\n".join(lines) + "\n"


def class_time_table(table, phases):
    """DualFS's own requests replayed on the 5,400 rpm model, time split by block class."""
    classes = ["data", "inode", "dir", "extent", "xattr", "blob", "descriptor", "ifile", "ifile-index", "checkpoint",
               "superblock", "unknown"]
    rows = []
    for p in phases:
        e = table.get(("dualfs", p))
        t = e and e["traced"]
        if t and "semantic_replay" in t:
            rows.append((p, t["semantic_replay"]))
    used = [c for c in classes if any(r["classes"].get(c, 0) > 0 for _, r in rows)]
    lines = ["| phase | total s | " + " | ".join(used) + " |", "|---|---:|" + "---:|" * len(used)]
    for p, r in rows:
        tot = r["total_s"] or 1.0
        cells = [f"{r['classes'][c]:.2f} ({100 * r['classes'][c] / tot:.0f}%)" if r["classes"].get(c) else "–"
                 for c in used]
        lines.append(f"| {p} | {r['total_s']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(S, phases, configs, key, title, path, unit=""):
    """Grouped bars per phase, each configuration normalised to ext4 (the
    paper's figures); ext4's absolute value is under each group's name."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ph = [p for p in phases if S.get(("ext4", p)) and S[("ext4", p)].get(key)]
    if not ph:
        return False
    top = 3.0
    fig, ax = plt.subplots(figsize=(min(18, 0.8 * len(ph) + 2.5), 5.2))
    w = 0.84 / len(configs)
    colors = ["#d62728", "#7f7f7f", "#1f77b4", "#aec7e8", "#2ca02c", "#ff7f0e", "#9467bd"]
    for i, c in enumerate(configs):
        xs, ys = [], []
        for j, p in enumerate(ph):
            s = S.get((c, p))
            r = ratio(s.get(key) if s else None, S[("ext4", p)][key])
            if r is not None:
                xs.append(j + (i - len(configs) / 2 + 0.5) * w)
                ys.append(r)
        ax.bar(xs, [min(y, top) for y in ys], w, label=c, color=colors[i % len(colors)])
        for x, y in zip(xs, ys):
            if c == "dualfs" or y > top:
                ax.text(x, min(y, top) + 0.03, f"{y:.2f}" if y < 10 else f"{y:.0f}", ha="center", va="bottom",
                        fontsize=6, rotation=90, color="#d62728" if c == "dualfs" else "black")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(ph)))
    ax.set_xticklabels([f"{p}\n{fmt(S[('ext4', p)][key])}{unit}" for p in ph], rotation=45, ha="right", fontsize=7)
    ax.set_xlim(-0.6, len(ph) - 0.4)
    ax.set_ylim(0, top + 0.45)
    ax.set_ylabel("normalised to ext4 (= 1)")
    ax.set_title(f"{title}: bars normalised to ext4 (ext4's value under each phase; bars clipped at {top:g})",
                 fontsize=9)
    ax.legend(fontsize=7, ncol=7, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--docs", default="docs")
    ap.add_argument("--engine", help="engine-bench --json output")
    ap.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    ap.add_argument("--notes", help="a Markdown file inserted after the summary (analysis written by people)")
    a = ap.parse_args()
    table, order, meta = load(a.results)
    S = {k: stats(v) for k, v in table.items()}
    configs = [c for c in CONFIGS if any(k[0] == c for k in S)]
    phases = [p for p in order if any(k[1] == p for k in S)]
    heavy = [p for p in phases if p in META_HEAVY]
    md = []
    m = meta.get("machine", {})
    md.append("# Benchmarks\n")
    md.append("Generated by `make bench-report` (bench/report.py) from the results of `make bench` "
              "(bench/suite.py); do not edit the tables by hand.\n")
    md.append(f"Machine: {m.get('cpus')} × {m.get('cpu')}, {m.get('mem')}, Linux {m.get('kernel')}; "
              f"load average at start {m.get('loadavg_start')}. Command: `{meta.get('command')}`.\n")
    md.append("## Targets (issue 6), DualFS against ext4\n")
    md.append("Wall-time ratios use medians; the fastest-of-repeats table below shows the same ratios with less "
              "CPU contention in them.\n")
    md.append("Meta-data-heavy phases. ✅ met, ❌ missed. Meta+journal bytes: DualFS's meta-data device; for ext4 "
              "all bytes written less the file data DualFS wrote to its data device in the same phase.\n")
    md.append(targets(S, heavy))
    if a.notes and os.path.exists(a.notes):
        with open(a.notes) as f:
            md.append("\n" + f.read())
    md.append("\n## Wall time\n")
    md.append(phase_table(S, phases, configs, "wall_s", "Seconds, phase command only (page cache may hold dirty data)"))
    md.append("\n" + phase_table(S, phases, configs, "wall_min_s",
                                  "Seconds, fastest of the repeats (the run least disturbed by the other tenants)"))
    md.append("\n" + phase_table(S, phases, configs, "wall_umount_s", "Seconds until unmounted (everything on disk)"))
    md.append("\n## Requests and bytes (loop-device counters, both devices)\n")
    md.append("The block layer counts an empty flush (fsync of a block device, as DualFS and ext2 issue it) as a "
              "write request as well as a flush; a flush carried by a journal commit write (ext4, XFS) is not. "
              "The traced run's count of write requests that carry data is exact, and is what the targets use.\n")
    md.append(phase_table(S, phases, configs, "trace_write_req", "Write requests carrying data (traced run)"))
    md.append("\n" + phase_table(S, phases, configs, "trace_write_kib", "Mean write request, KiB (traced run)", digits=1))
    md.append("\n" + phase_table(S, phases, configs, "write_req", "Write requests (counters)"))
    md.append("\n" + phase_table(S, phases, configs, "write_bytes", "MiB written", conv=mib))
    md.append("\n" + phase_table(S, phases, configs, "read_req", "Read requests"))
    md.append("\n" + phase_table(S, phases, configs, "read_bytes", "MiB read", conv=mib))
    md.append("\n" + phase_table(S, phases, configs, "flushes", "Flush requests"))
    md.append("\n## Rates the tools report (medians)\n")
    md.append("| configuration | PostMark tx/s | seq write + fsync MiB/s | 4 KiB random writes/s, fsync every 256 "
              "| 4 KiB random writes/s, fsync each |\n|---|---:|---:|---:|---:|")
    for c in configs:
        g = lambda p, k: (S.get((c, p)) or {}).get(k)  # noqa: E731
        md.append(f"| {c} | {fmt(g('postmark', 'x_postmark_tx_s'))} | {fmt(g('seq-write-fsync', 'x_bw_mib_s'))} | "
                  f"{fmt(g('rand-fsync-256', 'x_iops'))} | {fmt(g('rand-fsync-1', 'x_iops'))} |")
    md.append("")
    md.append("\n## Total I/O time under the disk models (traced run, `dualfs trace replay`)\n")
    for mk in MODEL_KEYS:
        md.append("\n" + phase_table(S, phases, configs, mk, f"Total I/O time, s: {mk}", digits=3))
    md.append("\n## What DualFS wrote and read, by block class (its own trace, `-o trace=`)\n")
    md.append("From mount to unmount (so the mount's reads of the IFile are included), in the engine's own requests "
              "(before the kernel's block-device cache); selected phases, all of them in bench/results.json.\n")
    md.append(semantic_table(table, [p for p in phases if p in SEMANTIC_PHASES]))
    md.append("\nThe same requests replayed on the 5,400 rpm model (one disk): seconds of total I/O time per class "
              "of block (a request's time shared among its blocks), and the share of the phase's total.\n")
    md.append(class_time_table(table, [p for p in phases if p in SEMANTIC_PHASES or p == "write-del-20"]))
    if a.engine and os.path.exists(a.engine):
        with open(a.engine) as f:
            eng = json.load(f)
        md.append("\n## The engine alone (issue 2: `engine-bench`)\n")
        md.append("| backend | creates/s | lookups/s warm | lookups/s cold | 4 KiB random writes/s | seq write MiB/s "
                  "| seq read MiB/s | meta-data bytes per created file |\n|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in eng:
            md.append(f"| {r['backend']} | {fmt(r['creates_per_s'])} | {fmt(r['lookups_per_s_warm'])} | "
                      f"{fmt(r['lookups_per_s_cold'])} | {fmt(r['random_4k_writes_per_s'])} | "
                      f"{fmt(r['seq_write_mib_s'])} | {fmt(r['seq_read_mib_s'])} | "
                      f"{fmt(r['meta_bytes_per_created_file'])} |")
        md.append("")
    md.append("\n## Plots\n")
    os.makedirs(a.docs, exist_ok=True)
    for key, title, name, unit in [
            ("trace_write_req", "Write requests carrying data", "bench-write-requests.png", ""),
            ("hdd5400/one-disk", "Total I/O time, 5,400 rpm disk, one disk", "bench-io-time-hdd5400.png", " s"),
            ("hdd5400/two-disks", "Total I/O time, 5,400 rpm disks, two disks", "bench-io-time-hdd5400-2d.png", " s"),
            ("hdd7200/one-disk", "Total I/O time, 7,200 rpm disk, one disk", "bench-io-time-hdd7200.png", " s"),
            ("wall_s", "Wall time", "bench-wall.png", " s")]:
        if not a.no_plots and plot(S, phases, configs, key, title, os.path.join(a.docs, name), unit):
            md.append(f"![{title}]({name})\n")
    with open(os.path.join(a.docs, "BENCHMARKS.md"), "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    main()
