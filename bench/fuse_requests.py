#!/usr/bin/env python3
"""The FUSE requests a command sends to a mounted file system, per opcode,
counted by the kernel's tracepoint fuse:fuse_request_send (perf record,
filtered on the mount's connection), so any FUSE server is counted alike.

    bench/fuse_requests.py MOUNTPOINT [--per N] [--sequence K] -- COMMAND...

--per N divides the counts by N (requests per file); --sequence K prints
the first K requests in the order the kernel sent them.
"""

import argparse
import collections
import os
import subprocess
import sys
import tempfile


def record(mnt, cmd):
    """Runs cmd (a shell command) and returns the opcodes sent to mnt, in order."""
    dev = os.stat(mnt).st_dev
    with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
        data = f.name
    try:
        subprocess.run(["perf", "record", "-q", "-a", "-e", "fuse:fuse_request_send", "--filter",
                        f"connection == {dev}", "-o", data, "--", "bash", "-c", cmd], check=True,
                       stdout=subprocess.DEVNULL)
        script = subprocess.run(["perf", "script", "-i", data, "-F", "trace"], check=True, capture_output=True,
                                text=True).stdout
    finally:
        os.unlink(data)
    return [line.split("(FUSE_", 1)[1].split(")", 1)[0] for line in script.splitlines() if "(FUSE_" in line]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mountpoint")
    ap.add_argument("--per", type=float, default=None)
    ap.add_argument("--sequence", type=int, default=0)
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: fuse_requests.py MOUNTPOINT [--per N] [--sequence K] -- COMMAND...")
    cut = argv.index("--")
    a = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    if not cmd:
        sys.exit("no command")
    ops = record(os.path.abspath(a.mountpoint), " ".join(cmd))
    counts = collections.Counter(ops)
    for op, n in counts.most_common():
        print(f"{op:<16} {n:>10}" + (f" {n / a.per:>8.2f}" if a.per else ""))
    print(f"{'total':<16} {len(ops):>10}" + (f" {len(ops) / a.per:>8.2f}" if a.per else ""))
    if a.sequence:
        print(" ".join(ops[:a.sequence]))


if __name__ == "__main__":
    main()
