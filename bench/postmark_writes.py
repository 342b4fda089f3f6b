#!/usr/bin/env python3
"""What DualFS writes during the suite's PostMark, second by second (issue 10).

Sets up the devices as bench/suite.py does (image files behind loop devices
with direct I/O, 4096 MiB in all, 408 MiB for the meta-data device), makes
a fresh volume, mounts it (noatime, plus -o OPTIONS), runs PostMark with the
suite's settings and reads, every --every seconds, the volume's counters
(`dualfs stats --json`: dirty data, data blocks written and by which kind
of commit, checkpoints, commits) and both loop devices' write requests and
sectors; then unmounts and reads the devices once more (write-back at
unmount is counted, as in the suite). Prints one JSON object: the timeline
and the totals. Run as root; --dualfs picks the build (an A/B of two).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = ("dirty_data_bytes", "data_blocks_written", "data_blocks_by_sync", "data_blocks_by_room",
        "data_blocks_by_periodic", "data_blocks_by_relief", "data_blocks_outgrown_inline", "meta_blocks_written",
        "checkpoints_written", "commits", "partial_segments_written", "log_blocks_since_checkpoint", "fsync_calls",
        "fsync_commits", "fsync_records")


def sh(cmd, capture=False):
    r = subprocess.run(["bash", "-c", cmd], check=True, capture_output=capture, text=True)
    return r.stdout.strip() if capture else None


def dev_stat(dev):
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = [int(x) for x in f.read().split()]
    return {"write_req": v[4], "write_mib": v[6] / 2048.0}


def stats(dualfs, mnt):
    r = subprocess.run([dualfs, "stats", "--json", mnt], capture_output=True, text=True)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return {}
    return {k: j[k] for k in KEYS if k in j}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dualfs", default=os.path.join(HERE, "..", "target", "release", "dualfs"))
    ap.add_argument("--work", default="/var/tmp/dualfs-pmio")
    ap.add_argument("-o", dest="options", default="")
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--postmark", default="20000,150,100000", help="files,dirs,transactions")
    a = ap.parse_args()
    dualfs = os.path.abspath(a.dualfs)
    os.makedirs(a.work, exist_ok=True)
    mnt = os.path.join(a.work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    loops = {}
    try:
        for role, mib in (("meta", 408), ("data", 4096 - 408)):
            img = os.path.join(a.work, f"{role}.img")
            if os.path.exists(img):
                os.unlink(img)
            with open(img, "wb") as f:
                f.truncate(mib << 20)
            loops[role] = sh(f"losetup --direct-io=on -f --show {img}", capture=True)
        sh(f"{dualfs} mkfs -f {loops['meta']} {loops['data']} > /dev/null")
        sh("sync; echo 3 > /proc/sys/vm/drop_caches")
        opts = "noatime" + (f",{a.options}" if a.options else "")
        sh(f"{dualfs} mount -o {opts} {loops['meta']} {loops['data']} {mnt}")
        files, dirs, tx = a.postmark.split(",")
        conf = (f"set location {mnt}\nset number {files}\nset subdirectories {dirs}\nset transactions {tx}\n"
                "set size 512 16384\nset read 512\nset write 512\nset buffering false\nrun\nquit\n")
        base = {r: dev_stat(d) for r, d in loops.items()}
        timeline = []
        t0 = time.monotonic()
        pm = subprocess.Popen(["postmark"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/tmp")
        out = []
        reader = threading.Thread(target=lambda: out.append(pm.communicate(conf)[0]))
        reader.start()
        while reader.is_alive():
            row = {"t": round(time.monotonic() - t0, 1), **stats(dualfs, mnt)}
            for r, d in loops.items():
                s = dev_stat(d)
                row[f"{r}_req"] = s["write_req"] - base[r]["write_req"]
                row[f"{r}_mib"] = round(s["write_mib"] - base[r]["write_mib"], 1)
            timeline.append(row)
            reader.join(a.every)
        wall = time.monotonic() - t0
        final = stats(dualfs, mnt)
        sh(f"{dualfs} umount {mnt} > /dev/null")
        total = {r: {k: round(v - base[r][k], 1) for k, v in dev_stat(d).items()} for r, d in loops.items()}
        tx_s = next((line.split("(")[1].split()[0] for line in out[0].splitlines()
                     if "transactions" in line and "per second" in line), None)
        print(json.dumps({"dualfs": dualfs, "options": opts, "wall_s": round(wall, 1), "tx_s": tx_s,
                          "before_umount": final, "devices": total, "timeline": timeline}, indent=1))
    finally:
        if subprocess.run(["mountpoint", "-q", mnt]).returncode == 0:
            subprocess.run([dualfs, "umount", mnt], check=False)
        for d in loops.values():
            subprocess.run(["losetup", "-d", d], check=False)


if __name__ == "__main__":
    sys.exit(main())
