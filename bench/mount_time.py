#!/usr/bin/env python3
"""Mount time against the data device's size, beside ext4.

For each size, on sparse image files in --dir: mkfs (timed), a clean mount
(timed from `dualfs mount` until it returns, the volume served), unmount;
then a mount after a crash: mount, create files of 1 KiB (inline, so that
only the log grows) until about --log-mib of log is written since the last
checkpoint, commit them by fsyncing the directory, kill -9 the serving
process, and time the next mount (roll-forward included). The page cache
is dropped before every timed mount (cold). ext4 gets the same size on a
loop device: mkfs.ext4, mount, and `e2fsck -f -n`.

Past 16 TiB - 4 KiB an ext4 file cannot hold the image: give --dir on XFS
(a loop-mounted sparse XFS image will do) for the 16T row.

The meta-data image has a fixed size (--meta, 4 GiB by default) whatever
the data device's size, so that the sweep measures what the data device's
size costs. Each row is appended to the results store (bench/results.jsonl,
tool `mount-time`, configuration dualfs or ext4, the size as the phase) and
printed as JSON; run as root.
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

DUALFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "dualfs")


def sh(cmd, check=True):
    r = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.returncode} {r.stderr.decode(errors='replace')}")
    return r.stdout.decode(errors="replace")


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(cmd):
    t = time.monotonic()
    sh(cmd)
    return time.monotonic() - t


def server_pid(mnt):
    out = sh(f"pgrep -f -- 'dualfs mount .* {mnt}$'", check=False).split()
    return int(out[0]) if out else None


def dualfs_row(d, size, meta_size, log_mib):
    meta, data, mnt = f"{d}/m.img", f"{d}/d.img", f"{d}/mnt"
    for p in (meta, data):
        if os.path.exists(p):
            os.remove(p)
    os.makedirs(mnt, exist_ok=True)
    sh(f"truncate -s {meta_size} {meta} && truncate -s {size} {data}")
    row = {"fs": "dualfs", "size": size}
    row["mkfs_s"] = timed(f"{DUALFS} mkfs {meta} {data} >/dev/null")
    row["meta_image_bytes_used"] = os.stat(meta).st_blocks * 512
    drop_caches()
    row["mount_clean_s"] = timed(f"{DUALFS} mount {meta} {data} {mnt}")
    sh(f"{DUALFS} umount {mnt}")
    # Crash with about log_mib MiB of log after the checkpoint.
    sh(f"{DUALFS} mount {meta} {data} {mnt}")
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
    drop_caches()
    row["crash_files"] = n
    row["mount_after_crash_s"] = timed(f"{DUALFS} mount {meta} {data} {mnt}")
    sh(f"{DUALFS} umount {mnt}")
    drop_caches()
    t = time.monotonic()
    r = subprocess.run([DUALFS, "fsck", meta, data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    row["fsck_s"] = time.monotonic() - t
    row["fsck_exit"] = r.returncode
    os.remove(meta)
    os.remove(data)
    return row


def ext4_row(d, size):
    img, mnt = f"{d}/e.img", f"{d}/emnt"
    if os.path.exists(img):
        os.remove(img)
    os.makedirs(mnt, exist_ok=True)
    sh(f"truncate -s {size} {img}")
    row = {"fs": "ext4", "size": size}
    row["mkfs_s"] = timed(f"mkfs.ext4 -q -F {img}")
    loop = sh(f"losetup -f --show {img}").strip()
    try:
        drop_caches()
        row["mount_clean_s"] = timed(f"mount {loop} {mnt}")
        sh(f"umount {mnt}")
        drop_caches()
        row["e2fsck_f_s"] = timed(f"e2fsck -f -n {loop} >/dev/null")
    finally:
        sh(f"umount {mnt}", check=False)
        sh(f"losetup -d {loop}")
    os.remove(img)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/dualfs-mount-time")
    ap.add_argument("--sizes", default="1G,64G,1T,4T,16T")
    ap.add_argument("--meta", default="4G")
    ap.add_argument("--log-mib", type=float, default=2.0)
    ap.add_argument("--no-ext4", action="store_true")
    ap.add_argument("--store", default=store.STORE, help="the results store to append to")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    run = store.Run("mount-time", a.store)
    rows = []
    for s in a.sizes.split(","):
        for make in [dualfs_row] + ([] if a.no_ext4 else [ext4_row]):
            rows.append(make(a.dir, s, a.meta, a.log_mib) if make is dualfs_row else make(a.dir, s))
            run.append(run.record(rows[-1]["fs"], s, {k: v for k, v in rows[-1].items() if k not in ("fs", "size")}))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"uptime": sh("uptime").strip(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
