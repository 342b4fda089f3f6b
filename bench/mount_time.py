#!/usr/bin/env python3
"""Mount time against the data device's size, beside ext4 and XFS.

For each size, on sparse image files in --dir: mkfs (timed, and the bytes
it left in the meta-data image), a clean mount (timed from `dualfs mount`
until it returns, the volume served; the serving process's VmRSS then),
unmount; then a mount after a crash: mount, create files of 1 KiB (inline,
so that only the log grows) until about --log-mib of log is written since
the last checkpoint, commit them by fsyncing the directory, kill -9 the
serving process, and time the next mount (roll-forward included). Before
every timed mount the pages of the images (or of the loop device) are
evicted from the page cache (cold), the images' own and nobody else's.
ext4 and XFS get the same size on a loop device: mkfs, mount,
`e2fsck -f -n` for ext4, and a mount after a crash: the same files
written and synced, the image copied while mounted (its journal or log to
replay), the copy mounted cold.

Past 16 TiB - 4 KiB an ext4 file cannot hold the image: give --dir on XFS
(a loop-mounted sparse XFS image will do) for the 16T row.

The meta-data image has a fixed size (--meta, 4 GiB by default) whatever
the data device's size, so that the sweep measures what the data device's
size costs; `--meta 10%` makes it a tenth of the data device instead.
`--groups N` also writes a file of 4 KiB in each of N new directories
after the clean mount (each directory is bound to a group of its own, so
the allocator reads N groups' bitmaps), syncs, waits for the background
writer's turns and takes the serving process's VmRSS again
(`rss_after_groups_kib`); `--cache SIZE` mounts with `-o cache=SIZE`.
`--snapshot` gives every DualFS volume, before its timed mounts, a file
of 1 MiB, a snapshot of it (`dualfs snapshot create`), a writable clone
of that snapshot (`dualfs clone`) and the file deleted from the live
tree (so that the snapshots hold free blocks): the mounts then load what
kept trees cost (the configuration is named NAME+snapshot).
`--dualfs NAME=PATH` (repeatable) times several builds, and `--rounds N`
repeats the whole sweep, every build and file system once per size in
each round (A/B interleaved). Each row is appended to the results store
(bench/results.jsonl, tool `mount-time`, the file system or build as the
configuration, the size as the phase, the round as the repeat) and printed
as JSON; run as root.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402

FSCK = True
DUALFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "dualfs")


def sh(cmd, check=True):
    r = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.returncode} {r.stderr.decode(errors='replace')}")
    return r.stdout.decode(errors="replace")


def evict(*paths):
    """Drops the page cache of these files or block devices only."""
    os.sync()
    for p in paths:
        if p.startswith("/dev/"):
            sh(f"blockdev --flushbufs {p}", check=False)
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def timed(cmd):
    t = time.monotonic()
    sh(cmd)
    return time.monotonic() - t


def server_pid(mnt):
    out = sh(f"pgrep -f -- 'dualfs mount .* {mnt}$'", check=False).split()
    return int(out[0]) if out else None


def bytes_of(size):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(float(size[:-1]) * units[size[-1]]) if size[-1] in units else int(size)


def touch_groups(mnt, pid, n, binary):
    """RSS after writing a file in each of n new directories (n groups:
    each made in the root, so each bound to the emptiest group; a
    subdirectory would share its parent's)."""
    blob = b"y" * 4096
    for i in range(n):
        os.mkdir(f"{mnt}/g{i}")
        with open(f"{mnt}/g{i}/f", "wb") as f:
            f.write(blob)
    # A checkpoint (sync(2) never reaches a FUSE server).
    sh(f"{binary} sync {mnt} >/dev/null")
    # The blocks a checkpoint made clean go at the background writer's
    # next turns (about one a second).
    time.sleep(3)
    return rss_kib(pid)


def keep_trees(binary, meta, data, mnt):
    """A file, a snapshot of it, a writable clone of the snapshot, and
    the file deleted from the live tree."""
    sh(f"{binary} mount {meta} {data} {mnt}")
    try:
        with open(f"{mnt}/kept", "wb") as f:
            f.write(b"k" * (1 << 20))
        sh(f"{binary} snapshot create {mnt} s >/dev/null")
        sh(f"{binary} clone {mnt} s c >/dev/null")
        os.remove(f"{mnt}/kept")
        sh(f"{binary} sync {mnt} >/dev/null")
    finally:
        sh(f"{binary} umount {mnt}")


def dualfs_row(d, size, meta_size, log_mib, name="dualfs", binary=None, groups=0, cache=None, snapshot=False):
    binary = binary or DUALFS
    meta, data, mnt = f"{d}/m.img", f"{d}/d.img", f"{d}/mnt"
    for p in (meta, data):
        if os.path.exists(p):
            os.remove(p)
    os.makedirs(mnt, exist_ok=True)
    if meta_size.endswith("%"):
        meta_size = str(bytes_of(size) * int(meta_size[:-1]) // 100)
    sh(f"truncate -s {meta_size} {meta} && truncate -s {size} {data}")
    row = {"fs": name, "size": size, "meta_size": meta_size}
    row["mkfs_s"] = timed(f"{binary} mkfs {meta} {data} >/dev/null")
    row["meta_image_bytes_used"] = os.stat(meta).st_blocks * 512
    if snapshot:
        row["fs"] = f"{name}+snapshot"
        keep_trees(binary, meta, data, mnt)
    evict(meta, data)
    opts = f"-o cache={cache} " if cache else ""
    row["mount_clean_s"] = timed(f"{binary} mount {opts}{meta} {data} {mnt}")
    pid = server_pid(mnt)
    row["rss_after_mount_kib"] = rss_kib(pid) if pid else None
    if groups and pid:
        row["groups_touched"] = groups
        row["rss_after_groups_kib"] = touch_groups(mnt, pid, groups, binary)
    sh(f"{binary} umount {mnt}")
    # A warm mount: the images' pages as the cold one left them.
    row["mount_warm_s"] = timed(f"{binary} mount {meta} {data} {mnt}")
    sh(f"{binary} umount {mnt}")
    # Crash with about log_mib MiB of log after the checkpoint.
    sh(f"{binary} mount {meta} {data} {mnt}")
    pid = server_pid(mnt)
    n = int(log_mib * 1024 * 1024 / 1300)
    os.makedirs(f"{mnt}/c", exist_ok=True)
    blob = b"x" * 1000
    for i in range(n):
        with open(f"{mnt}/c/f{i}", "wb") as f:
            f.write(blob)
    fd = os.open(f"{mnt}/c", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    sh(f"fusermount3 -u -z {mnt}", check=False)
    for _ in range(50):
        if not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.1)
    evict(meta, data)
    row["crash_files"] = n
    row["mount_after_crash_s"] = timed(f"{binary} mount {meta} {data} {mnt}")
    sh(f"{binary} umount {mnt}")
    if FSCK:
        evict(meta, data)
        t = time.monotonic()
        r = subprocess.run([binary, "fsck", meta, data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        row["fsck_s"] = time.monotonic() - t
        row["fsck_exit"] = r.returncode
    os.remove(meta)
    os.remove(data)
    return row


def ext4_row(d, size, fs="ext4", log_mib=0.0):
    img, mnt = f"{d}/e.img", f"{d}/emnt"
    if os.path.exists(img):
        os.remove(img)
    os.makedirs(mnt, exist_ok=True)
    sh(f"truncate -s {size} {img}")
    row = {"fs": fs, "size": size}
    row["mkfs_s"] = timed(f"mkfs.ext4 -q -F {img}" if fs == "ext4" else f"mkfs.xfs -q -f {img}")
    row["image_bytes_used"] = os.stat(img).st_blocks * 512
    loop = sh(f"losetup -f --show {img}").strip()
    try:
        evict(loop, img)
        row["mount_clean_s"] = timed(f"mount {loop} {mnt}")
        sh(f"umount {mnt}")
        row["mount_warm_s"] = timed(f"mount {loop} {mnt}")
        sh(f"umount {mnt}")
        if fs == "ext4":
            evict(loop, img)
            row["e2fsck_f_s"] = timed(f"e2fsck -f -n {loop} >/dev/null")
        if log_mib:
            row.update(kernel_crash(d, img, loop, mnt, log_mib))
    finally:
        sh(f"umount {mnt}", check=False)
        sh(f"losetup -d {loop}")
    os.remove(img)
    return row


def kernel_crash(d, img, loop, mnt, log_mib):
    """A mount of a kernel file system after a crash: the same files as
    DualFS's crash, synced (the journal holds them, the home locations
    need not), the image copied while still mounted (what a power cut
    leaves: the journal to replay), the copy mounted cold."""
    copy = f"{d}/crash.img"
    sh(f"mount {loop} {mnt}")
    try:
        n = int(log_mib * 1024 * 1024 / 1300)
        os.makedirs(f"{mnt}/c", exist_ok=True)
        blob = b"x" * 1000
        for i in range(n):
            with open(f"{mnt}/c/f{i}", "wb") as f:
                f.write(blob)
        sh(f"sync -f {mnt}/c")
        sh(f"cp --sparse=always {img} {copy}")
    finally:
        sh(f"umount {mnt}")
    loop2 = sh(f"losetup -f --show {copy}").strip()
    try:
        evict(loop2, copy)
        secs = timed(f"mount {loop2} {mnt}")
        sh(f"umount {mnt}")
    finally:
        sh(f"losetup -d {loop2}")
        os.remove(copy)
    return {"crash_files": n, "mount_after_crash_s": secs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/dualfs-mount-time")
    ap.add_argument("--sizes", default="1G,64G,1T,4T,16T")
    ap.add_argument("--meta", default="4G")
    ap.add_argument("--log-mib", type=float, default=2.0)
    ap.add_argument("--no-ext4", action="store_true")
    ap.add_argument("--xfs", action="store_true", help="an XFS row beside ext4's")
    ap.add_argument("--dualfs", action="append", default=[], help="NAME=PATH of a build to time (repeatable)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--groups", type=int, default=0, help="directories (groups) written to after the clean mount")
    ap.add_argument("--cache", help="-o cache= for DualFS's mounts")
    ap.add_argument("--no-fsck", action="store_true")
    ap.add_argument("--no-kernel-crash", action="store_true", help="no mount after a crash for ext4 and XFS")
    ap.add_argument("--snapshot", action="store_true", help="DualFS volumes keep a snapshot and a writable clone")
    ap.add_argument("--store", default=store.STORE, help="the results store to append to")
    a = ap.parse_args()
    run = store.Run("mount-time", a.store)

    def stored(row):
        """A row into the store, and on stderr as it comes."""
        values = {k: v for k, v in row.items() if k not in ("fs", "size", "round")}
        run.append(run.record(row.get("fs", "dualfs"), row.get("size"), values, rep=row.get("round")))
        print(json.dumps(row), file=sys.stderr, flush=True)

    global FSCK
    FSCK = not a.no_fsck
    os.makedirs(a.dir, exist_ok=True)
    builds = [b.split("=", 1) for b in a.dualfs] or [["dualfs", DUALFS]]
    rows = []
    uptimes = [sh("uptime").strip()]
    for r in range(a.rounds):
        for s in a.sizes.split(","):
            for name, binary in builds:
                rows.append({"round": r, **dualfs_row(a.dir, s, a.meta, a.log_mib, name, binary, a.groups, a.cache, a.snapshot)})
                stored(rows[-1])
            for fs in (["ext4"] if not a.no_ext4 else []) + (["xfs"] if a.xfs else []):
                rows.append({"round": r, **ext4_row(a.dir, s, fs, 0.0 if a.no_kernel_crash else a.log_mib)})
                stored(rows[-1])
        uptimes.append(sh("uptime").strip())
    print(json.dumps({"uptime": uptimes, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
