#!/usr/bin/env python3
"""One-off: the per-run result files of bench/ (results-*.json, micro.json,
engine.json, uring_rt*.json and the scripts' .txt tables) into the store,
bench/results.jsonl. Each record's `run` is the file it came from;
`stored_in` is the commit that stored that file, and `commit` the measured
commit where the page that reported the run named it.

    bench/convert_results.py [--store bench/results.jsonl] FILES...
"""

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402

# The measured commit, where docs/BENCHMARKS.md named it for the run.
KNOWN_COMMITS = {
    "results.json": "a88ccf5", "results-issue10.json": "e0cb6a2", "results-issue10-final.json": "634e15c",
    "results-durability.json": "aa78eec", "results-durability-r2.json": "3dcb25d+1",
    "results-postmark-inline.json": "44ee663", "results-read-path.json": "ffc0d4a",
    "results-uring-3way.json": "2822422", "results-3way-final.json": "2a5ce6c", "results-s24-final.json": "d80f707",
    "results-s27-final.json": "51bdea1", "results-s27-floor.json": "51bdea1",
}
TREE_BUILDS = ("target/release/dualfs", "/work/main/target/release/dualfs")
TOOLS = {"clone-time.txt": ("clone-time", "clone"), "snapshot-time.txt": ("snapshot-time", "snapshot-create"),
         "send-time.txt": ("send-time", None), "snapshot-overwrite.txt": ("snapshot-overwrite", None),
         "resize-data-shrink.txt": ("resize", None)}


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


def stored(path):
    """The commit that stored this version of the file, and its date."""
    line = git("log", "-1", "--format=%h %cI", "--", path)
    sha, date = line.split()
    t = datetime.datetime.fromisoformat(date).astimezone(datetime.timezone.utc)
    return sha, t.strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(ns):
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine(m, load):
    return {"cpu": m.get("cpu", "?"), "cpus": m.get("cpus"), "mem": m.get("mem", "?"), "kernel": m.get("kernel", "?"),
            "load": " ".join((load or "").split()[:3])}


def base(name, path):
    sha, date = stored(path)
    return {"run": name, "stored_in": sha, "commit": KNOWN_COMMITS.get(name)}, date


def option(command, name):
    """The value of --name in the first command of a (;-joined) command line."""
    try:
        words = shlex.split(command.split(";")[0])
    except ValueError:
        return None
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def suite_file(name, path, j):
    head, date = base(name, path)
    cmd = j.get("command", "")
    dualfs, dualfs_base = option(cmd, "--dualfs"), option(cmd, "--dualfs-base")
    m = machine(j.get("machine", {}), j.get("machine", {}).get("loadavg_start"))
    out = []
    for r in j["runs"]:
        rec = dict(head, tool="suite", time=iso(r["window_ns"][0]) if r.get("window_ns") else date, machine=m,
                   command=cmd)
        build = dualfs_base if r["config"].startswith("dualfs-base") else dualfs
        if r["config"].startswith("dualfs") and build and build not in TREE_BUILDS:
            rec["build"] = build
        rec.update(config=r["config"], sequence=r.get("sequence"), phase=r["phase"], rep=r.get("rep"),
                   traced=r.get("traced", False))
        rec["values"] = {k: v for k, v in r.items() if k not in ("config", "sequence", "phase", "rep", "traced")}
        out.append(rec)
    return out


def implied_phase(r):
    """uring_rt.py's rows that name no phase."""
    for key, phase in (("spread_us", "getattr-spread"), ("untar_s", "untar"), ("served_on_cpu", "placement")):
        if key in r:
            return phase
    raise SystemExit(f"a row without a phase: {r}")


def tool_file(name, path, j, tool):
    head, date = base(name, path)
    m = machine(j.get("machine", {}), j.get("loadavg_start") or j.get("machine", {}).get("loadavg_start"))
    out = []
    for r in j["runs"]:
        rec = dict(head, tool=tool, time=date, machine=m, command=j.get("command", ""))
        rec.update(config=r["config"], phase=r.get("phase") or implied_phase(r), rep=r.get("rep"))
        if "layout" in r:
            rec["layout"] = r["layout"]
        rec["values"] = {k: v for k, v in r.items() if k not in ("config", "phase", "rep", "layout")}
        out.append(rec)
    return out


def engine_file(name, path, j):
    head, date = base(name, path)
    return [dict(head, tool="engine-bench", time=date, machine=machine({}, None), command="engine-bench --json",
                 config=r["backend"], phase="engine-bench",
                 values={k: v for k, v in r.items() if k != "backend"}) for r in j]


def table_file(name, path):
    head, date = base(name, path)
    tool, phase = TOOLS[name]
    text = open(path).read()
    # The header's aside would read as a key=value row.
    text = re.sub(r"^(run iops data_write_requests data_MiB_written) \(.*\)$", r"\1", text, flags=re.M)
    first = text.splitlines()[0] if text else ""
    when = re.search(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", first)
    load = re.search(r"load(?: average)?:\s*([\d.]+),?\s+([\d.]+),?\s+([\d.]+)", first)
    m = {"cpu": "?", "cpus": None, "mem": "?", "kernel": "?", "load": " ".join(load.groups()) if load else ""}
    out = []
    for config, ph, rep, values in store.parse_table(text, phase, "dualfs"):
        if config is None:
            continue
        rec = dict(head, tool=tool, time=when.group(1) if when else date, machine=m,
                   command=f"bench/{tool.replace('-', '_')}.sh", config=config, phase=ph)
        if rep is not None:
            rec["rep"] = rep
        rec["values"] = values
        out.append(rec)
    return out


def convert(path):
    name = os.path.basename(path)
    if name.endswith(".txt"):
        return table_file(name, path)
    with open(path) as f:
        j = json.load(f)
    if name == "engine.json":
        return engine_file(name, path, j)
    if name.startswith("uring_rt"):
        return tool_file(name, path, j, "uring-rt")
    if name == "micro.json":
        return tool_file(name, path, j, "micro")
    return suite_file(name, path, j)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--store", default=store.STORE)
    a = ap.parse_args()
    recs = []
    for p in a.files:
        r = convert(p)
        print(f"{p}: {len(r)} records", file=sys.stderr)
        recs += r
    recs.sort(key=lambda r: r["time"])
    store.append(a.store, recs)


if __name__ == "__main__":
    main()
