#!/usr/bin/env python3
"""FUSE requests per unit of work, DualFS beside the no-work server: an
untar (per archive entry), PostMark (per transaction) and `ls -l` of a
directory of empty files, cold and warm (per entry). Counted by the
kernel's tracepoint (bench/fuse_requests.py), so every server is counted
alike; the counts do not depend on the machine's load.

    bench/request_counts.py --tar ARCHIVE [--configs dualfs,dualfs-nosecurity_xattr,floor]
        [--dualfs BIN] [--no-work BIN] [--work DIR] [--postmark FILES,DIRS,TX] [--ls-files N]
        | bench/store.py add request-counts

Prints one row per configuration and phase (`CONFIG PHASE key=value ...`):
requests in all, per unit, and the three largest opcodes per unit.
`dualfs-OPTION` mounts DualFS with -o OPTION; `floor` is the no-work server
(`--default-permissions`, as DualFS's mount), whose counts are what the
kernel sends to a server that answers everything at once.
"""

import argparse
import collections
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuse_requests  # noqa: E402


def sh(cmd, check=True):
    return subprocess.run(cmd, shell=True, check=check, stdout=subprocess.PIPE, text=True).stdout


class Mount:
    """A fresh file system of one configuration at DIR/mnt."""

    def __init__(self, cfg, args, work):
        self.cfg, self.args, self.work = cfg, args, work
        self.mnt = os.path.join(work, "mnt")
        self.loops, self.proc = [], None

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        if self.cfg == "floor":
            self.proc = subprocess.Popen([self.args.no_work, self.mnt, "--transport", "dev", "--default-permissions"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(200):
                if subprocess.run(["mountpoint", "-q", self.mnt]).returncode == 0:
                    return self
                time.sleep(0.05)
            raise RuntimeError("the no-work server did not mount")
        for name, size in (("data", "1536M"), ("meta", "192M")):
            img = os.path.join(self.work, name + ".img")
            sh(f"truncate -s {size} {img}")
            self.loops.append(sh(f"losetup --direct-io=on -f --show {img}").strip())
        data, meta = self.loops
        opts = "noatime" + ("," + self.cfg.split("-", 1)[1] if "-" in self.cfg else "")
        sh(f"{self.args.dualfs} mkfs -f {meta} {data} >/dev/null")
        sh(f"{self.args.dualfs} mount -o {opts},log={self.work}/dualfs.log {meta} {data} {self.mnt}")
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            sh(f"umount {self.mnt}", check=False)
            self.proc.wait(timeout=60)
        else:
            sh(f"{self.args.dualfs} umount {self.mnt} >/dev/null", check=False)
            for dev in self.loops:
                sh(f"losetup -d {dev}", check=False)
        sh(f"rm -rf {self.work}", check=False)


def row(cfg, phase, mnt, per, cmd):
    ops = fuse_requests.record(mnt, cmd)
    counts = collections.Counter(ops)
    top = ",".join(f"{op}:{n / per:.2f}" for op, n in counts.most_common(3))
    print(f"{cfg} {phase} requests={len(ops)} per_unit={len(ops) / per:.3f} units={per} top={top}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tar", required=True, help="the archive to untar")
    ap.add_argument("--configs", default="dualfs,dualfs-nosecurity_xattr,floor")
    ap.add_argument("--dualfs", default=os.path.join(HERE, "..", "target", "release", "dualfs"))
    ap.add_argument("--no-work", default=os.path.join(HERE, "..", "target", "release", "no-work-server"))
    ap.add_argument("--work", default="/var/tmp/dualfs-request-counts")
    ap.add_argument("--postmark", default="2000,15,10000", help="files,dirs,transactions")
    ap.add_argument("--ls-files", type=int, default=5000)
    a = ap.parse_args()
    a.dualfs, a.no_work = os.path.abspath(a.dualfs), os.path.abspath(a.no_work)
    entries = int(sh(f"tar tf {a.tar} | wc -l"))
    files, dirs, tx = (int(x) for x in a.postmark.split(","))
    print(f"# load {open('/proc/loadavg').read().split()[:3]}; {entries} archive entries")
    for cfg in a.configs.split(","):
        with Mount(cfg, a, os.path.join(a.work, cfg)) as m:
            row(cfg, "untar", m.mnt, entries, f"tar xf {a.tar} -C {m.mnt}")
            pm, many = os.path.join(m.mnt, "pm"), os.path.join(m.mnt, "many")
            os.makedirs(pm)
            conf = f"set location {pm}\\nset number {files}\\nset subdirectories {dirs}\\nset transactions {tx}\\nrun\\nquit\\n"
            row(cfg, "postmark", m.mnt, tx, f'printf "{conf}" | postmark >/dev/null')
            os.makedirs(many)
            sh(f"cd {many} && seq -f f%06.0f 1 {a.ls_files} | xargs touch")
            row(cfg, "ls-l-first", m.mnt, a.ls_files, f"ls -l {many} >/dev/null")
            row(cfg, "ls-l-again", m.mnt, a.ls_files, f"ls -l {many} >/dev/null")


if __name__ == "__main__":
    main()
