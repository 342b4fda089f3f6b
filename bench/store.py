#!/usr/bin/env python3
"""The results store: bench/results.jsonl, one JSON object a line, one line
per configuration × phase × repeat of a measurement.

Every record says what ran and where:

    run       the run it belongs to (every record a tool writes in one
              invocation shares it: TOOL-YYYYMMDDTHHMMSSZ)
    tool      suite, micro, uring-rt, engine-bench, mount-time, fuse-scale,
              memory-rounds, snapshot-time, snapshot-overwrite, clone-time,
              send-time, resize, migrate, lone-fsync, scrub-time,
              trees-beside, tree-switch, mirror-ab, disks, discard,
              request-counts
    time      when the record was taken (UTC, ISO 8601)
    commit    the commit of the tree that was measured (`-dirty` when it
              had uncommitted changes); null when not known
    build     the DualFS binary, when it was not the tree's own
    machine   cpu, cpus, mem, kernel, and load (/proc/loadavg's three
              averages when the record was taken)
    command   the command line
    config    the file system or configuration measured
    phase     what was measured (a suite phase, an operation)
    sequence, rep, traced, layout   where the tool has them
    values    the measured values, as the tool reports them

Tools append; nothing rewrites the store. bench/report.py reads it.

    bench/store.py add TOOL [--phase PHASE] [--config CONFIG] [--store FILE] [TABLE]

reads a result table (a script's output: `#` lines are comments, the first
other line names the columns, then one row per measurement; or rows of
`CONFIG PHASE key=value ...`) from TABLE or standard input and appends one
record per row. Columns `fs` or `config` give the configuration, `what` or
`phase` the phase, `run` or `rep` the repeat (a word in `run` is the phase);
a trailing `# comment` is kept as the row's `note`.

    bench/store.py add-json TOOL --config-key KEY --phase PHASE [JSON]

appends a JSON list of objects (engine-bench --json), one record each, its
configuration taken from the object's KEY.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STORE = os.path.join(HERE, "results.jsonl")
IDENTITY = ("run", "tool", "time", "commit", "build", "machine", "command", "config", "sequence", "phase", "rep",
            "traced", "layout")


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def load_average():
    return " ".join(_read("/proc/loadavg").split()[:3])


def machine():
    """The machine, with the load at this moment."""
    cpu = [line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
           if line.startswith("model name")]
    mem = [line for line in _read("/proc/meminfo").splitlines() if line.startswith("MemTotal")]
    return {"cpu": cpu[0] if cpu else "?", "cpus": len(cpu) or os.cpu_count(),
            "mem": mem[0].split(":", 1)[1].strip() if mem else "?", "kernel": os.uname().release,
            "load": load_average()}


def commit():
    """The tree's commit, `-dirty` when tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", "-C", HERE, *args], capture_output=True, text=True, check=False)
    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return None
    dirty = git("diff", "--quiet", "HEAD").returncode != 0
    return head.stdout.strip() + ("-dirty" if dirty else "")


class Run:
    """One invocation of a tool: stamps every record it appends."""

    def __init__(self, tool, store=None, build=None, command=None):
        self.tool = tool
        self.store = store or STORE
        self.id = f"{tool}-{datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
        self.commit = commit()
        self.build = build
        self.command = command or " ".join(sys.argv)

    def record(self, config, phase, values, **identity):
        """A record of this run, taken now."""
        rec = {"run": self.id, "tool": self.tool, "time": now(), "commit": self.commit, "machine": machine(),
               "command": self.command, "config": config, "phase": phase}
        if self.build:
            rec["build"] = self.build
        rec.update({k: v for k, v in identity.items() if v is not None})
        rec["values"] = values
        return rec

    def append(self, records):
        append(self.store, records)


def append(path, records):
    """Appends records, one line each, in one write."""
    if isinstance(records, dict):
        records = [records]
    lines = "".join(json.dumps(r, sort_keys=False, separators=(",", ":")) + "\n" for r in records)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(lines)


def load(path=None):
    """Every record of the store (a missing store is empty)."""
    out = []
    try:
        with open(path or STORE) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except ValueError as e:
                        raise SystemExit(f"{path or STORE}:{n}: not a JSON record: {e}")
    except FileNotFoundError:
        pass
    return out


def number(text):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return None if text in ("-", "–") else text


def parse_table(text, phase=None, config=None):
    """(config, phase, rep, values) for each row of a script's result table."""
    rows, header = [], None
    for line in text.splitlines():
        line, _, note = line.partition("#")
        if not line.strip() or not line[0].isalnum():
            continue  # a comment, or a tool's chatter between the rows
        fields = line.split()
        if any("=" in f for f in fields):
            pos = [f for f in fields if "=" not in f]
            values = {k: number(v) for k, v in (f.split("=", 1) for f in fields if "=" in f)}
            if note.strip():
                values["note"] = note.strip()
            rows.append((pos[0] if pos else config, pos[1] if len(pos) > 1 else phase, None, values))
            continue
        if header is None:
            header = fields
            continue
        if len(fields) != len(header):
            continue  # a tool's chatter between the rows
        row = dict(zip(header, fields))
        cfg = row.pop("fs", None) or row.pop("config", None) or config
        ph = row.pop("what", None) or row.pop("phase", None) or phase
        rep = row.pop("run", None) or row.pop("rep", None)
        if rep is not None and not isinstance(number(rep), int):
            ph, rep = rep, None
        values = {k: number(v) for k, v in row.items()}
        if note.strip():
            values["note"] = note.strip()
        rows.append((cfg, ph, number(rep) if rep is not None else None, values))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    add = sub.add_parser("add", help="append a script's result table")
    add.add_argument("tool")
    add.add_argument("table", nargs="?", help="the table (default: standard input)")
    add.add_argument("--phase", help="the phase of rows that do not name one")
    add.add_argument("--config", default="dualfs", help="the configuration of rows that do not name one")
    add.add_argument("--store", default=STORE)
    add.add_argument("--command", help="the command that produced the table")
    js = sub.add_parser("add-json", help="append a JSON list of measurements")
    js.add_argument("tool")
    js.add_argument("json", nargs="?", help="the JSON (default: standard input)")
    js.add_argument("--config-key", required=True, help="the key that names each object's configuration")
    js.add_argument("--phase", required=True)
    js.add_argument("--store", default=STORE)
    js.add_argument("--command", help="the command that produced the JSON")
    a = ap.parse_args()
    if a.cmd == "add":
        text = open(a.table).read() if a.table else sys.stdin.read()
    else:
        text = open(a.json).read() if a.json else sys.stdin.read()
    run = Run(a.tool, a.store, build=os.environ.get("DUALFS"), command=a.command)
    if a.cmd == "add":
        recs = [run.record(c, p, v, rep=r) for c, p, r, v in parse_table(text, a.phase, a.config)]
    else:
        recs = [run.record(o[a.config_key], a.phase, {k: v for k, v in o.items() if k != a.config_key})
                for o in json.loads(text)]
    run.append(recs)
    print(f"{len(recs)} records appended to {a.store} (run {run.id})", file=sys.stderr)


if __name__ == "__main__":
    main()
