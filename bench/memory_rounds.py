#!/usr/bin/env python3
"""The serving process's memory over rounds of create-and-delete.

Mounts a fresh volume (sparse images in --dir), then --rounds times creates
--files files of --size bytes (in directories of 1,000) and deletes them
all, reading the server's VmRSS and VmHWM from /proc after each phase.
Extra mount options go in -o. Prints JSON lines, and appends them to the
results store (bench/results.jsonl, tool `memory-rounds`); run as root.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402

DUALFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "dualfs")


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon"):
                out[k] = int(v.split()[0]) // 1024
    return out


def counts(mnt):
    out = subprocess.run([DUALFS, "stats", "--json", mnt], capture_output=True, text=True).stdout
    try:
        v = json.loads(out)
    except ValueError:
        return {}
    keys = ("cache_bytes", "cache_inodes", "cache_objects", "readahead_blocks", "inode_map_entries", "node_map_entries",
            "pages_held", "pages_spare", "inodes_referenced", "bitmap_blocks_loaded")
    flat = v if isinstance(v, dict) else {}
    flat = {**flat, **{k: x for d in flat.values() if isinstance(d, dict) for k, x in d.items()}}
    return {k: flat[k] for k in keys if k in flat}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/dualfs-memory")
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("-o", dest="options", default="")
    ap.add_argument("--hold", type=float, default=0, help="seconds to stay mounted at the end (to look at /proc)")
    ap.add_argument("--store", default=store.STORE, help="the results store to append to")
    a = ap.parse_args()
    run = store.Run("memory-rounds", a.store)
    config = "dualfs" + (f" -o {a.options}" if a.options else "")

    def say(row):
        print(json.dumps(row), flush=True)
        run.append(run.record(config, row["phase"], {k: v for k, v in row.items() if k not in ("phase", "round")},
                              rep=row.get("round")))
    os.makedirs(a.dir, exist_ok=True)
    meta, data, mnt = f"{a.dir}/m.img", f"{a.dir}/d.img", f"{a.dir}/mnt"
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([DUALFS, "mkfs", "--force", "--size", "8G", meta, data], check=True, stdout=subprocess.DEVNULL)
    opts = ["-o", a.options] if a.options else []
    subprocess.run([DUALFS, "mount", *opts, meta, data, mnt], check=True)
    pid = int(subprocess.run(["pgrep", "-f", f"dualfs mount .* {mnt}$"], capture_output=True, text=True).stdout.split()[0])
    blob = b"y" * a.size
    try:
        say({"phase": "mounted", **status(pid)})
        for r in range(a.rounds):
            t = time.monotonic()
            for i in range(a.files):
                d = f"{mnt}/d{i // 1000}"
                if i % 1000 == 0:
                    os.mkdir(d)
                with open(f"{d}/f{i}", "wb") as f:
                    f.write(blob)
            created = time.monotonic() - t
            say({"round": r, "phase": "created", "s": round(created, 2), **status(pid), **counts(mnt)})
            for i in range(0, a.files, 1000):
                shutil.rmtree(f"{mnt}/d{i // 1000}")
            os.sync()
            time.sleep(6)
            say({"round": r, "phase": "deleted", **status(pid), **counts(mnt)})
        time.sleep(a.hold)
    finally:
        subprocess.run([DUALFS, "umount", mnt], check=False, stdout=subprocess.DEVNULL)
        os.remove(meta)
        os.remove(data)


if __name__ == "__main__":
    sys.exit(main())
