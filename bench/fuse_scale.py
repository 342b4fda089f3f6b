#!/usr/bin/env python3
"""Ten million files through the mount, the FUSE side of
`tests/many_files.rs`: sparse images in --dir, `dualfs mount`, then
--files files of 0 bytes in directories of 100 (in top directories of
10,000) made by --procs processes
(each its own directories), reporting per million: creates/s, the serving
process's VmRSS and `dualfs stats`' cache. Then `find` over all of them
(time, peak RSS), a clean unmount and --mount-runs timed mounts (cold
cache: the program's pages dropped too, and again with only the volume's
dropped), and as many mounts after a kill -9 with fsync'd files in the
log. JSON on stdout, and one record in the results store (bench/results.jsonl,
tool `fuse-scale`, phase `files-N`); root.

The runs take the machine for a long time: behind DUALFS_SCALE_FUSE=1, so
that nothing runs it by accident (never in CI).
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


def sh(cmd):
    return subprocess.run(["bash", "-c", cmd], check=True, stdout=subprocess.PIPE).stdout.decode()


def server_pid(mnt):
    return int(sh(f"pgrep -f -- 'dualfs mount .* {mnt}$'").split()[0])


def memory(pid):
    """VmRSS, its anonymous part, VmHWM (MiB)."""
    return {"rss_mib": rss_mib(pid), "anon_mib": rss_mib(pid, "RssAnon"), "hwm_mib": rss_mib(pid, "VmHWM")}


def reset_peak(pid):
    """Starts VmHWM again from the current RSS (proc(5), clear_refs 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5\n")


def engine_counts(dualfs, mnt):
    """What the engine holds, from `dualfs stats`."""
    stats = json.loads(sh(f"{dualfs} stats --json {mnt}"))
    keep = ("cache", "_map_", "pages_", "inodes_referenced", "readahead_blocks", "bitmap_blocks")
    return {k: v for k, v in stats.items() if any(w in k for w in keep)}


def timed_mount(dualfs, mount_opts, meta, data, mnt, warm_program):
    """Seconds `dualfs mount` takes with the page cache dropped; with
    warm_program the binary is read back first (the volume stays cold)."""
    drop_caches()
    if warm_program:
        sh(f"cat {dualfs} > /dev/null && {dualfs} --version > /dev/null")
    t = time.monotonic()
    sh(f"{dualfs} mount{mount_opts} {meta} {data} {mnt}")
    return time.monotonic() - t


def crash(mnt, name):
    """fsync'd files in the log (about 2 MiB), then kill -9 of the server."""
    pid = server_pid(mnt)
    os.mkdir(f"{mnt}/{name}")
    for i in range(1600):
        with open(f"{mnt}/{name}/f{i}", "wb") as f:
            f.write(b"x" * 1000)
    fd = os.open(f"{mnt}/{name}", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
    time.sleep(1)


def rss_mib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def make(mnt, first_dir, dirs, per):
    """One worker: directories first_dir.. of `per` empty files each, in
    top directories of 10,000 (a directory holds at most 65,000)."""
    for d in range(first_dir, first_dir + dirs):
        path = f"{mnt}/t{d // 10_000}/d{d}"
        os.mkdir(path)
        for i in range(per):
            os.close(os.open(f"{path}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/dualfs-fuse-scale")
    ap.add_argument("--files", type=int, default=10_000_000)
    ap.add_argument("--per", type=int, default=100)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--step", type=int, default=1_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the images (to look at the mount again)")
    ap.add_argument("--opts", default="", help="mount options, e.g. cache=64M (passed as -o)")
    ap.add_argument("--dualfs", default=DUALFS, help="the dualfs binary (another build, to compare)")
    ap.add_argument("--mount-runs", type=int, default=3, help="timed mounts of each kind")
    ap.add_argument("--store", default=store.STORE, help="the results store to append to")
    a = ap.parse_args()
    if os.environ.get("DUALFS_SCALE_FUSE") != "1":
        sys.exit("fuse_scale.py takes the machine for a long time: set DUALFS_SCALE_FUSE=1 to run it")
    dualfs = a.dualfs
    mount_opts = f" -o {a.opts}" if a.opts else ""
    os.makedirs(f"{a.dir}/mnt", exist_ok=True)
    meta, data, mnt = f"{a.dir}/m.img", f"{a.dir}/d.img", f"{a.dir}/mnt"
    for p in (meta, data):
        if os.path.exists(p):
            os.remove(p)
    sh(f"truncate -s 9G {meta} && truncate -s 16G {data} && {dualfs} mkfs {meta} {data} >/dev/null")
    sh(f"{dualfs} mount{mount_opts} {meta} {data} {mnt}")
    pid = server_pid(mnt)
    rows = []
    dirs_per_step = a.step // a.per
    made = 0
    next_dir = 0
    while made < a.files:
        t = time.monotonic()
        share = dirs_per_step // a.procs
        for top in range(next_dir // 10_000, (next_dir + share * a.procs - 1) // 10_000 + 1):
            os.makedirs(f"{mnt}/t{top}", exist_ok=True)
        kids = []
        for w in range(a.procs):
            k = os.fork()
            if k == 0:
                make(mnt, next_dir + w * share, share, a.per)
                os._exit(0)
            kids.append(k)
        for k in kids:
            os.waitpid(k, 0)
        next_dir += share * a.procs
        made += share * a.procs * a.per
        secs = time.monotonic() - t
        row = {"files": made, "creates_s": share * a.procs * a.per / secs, "load": os.getloadavg()[0], **memory(pid),
               "cache": engine_counts(dualfs, mnt)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    sh("sync")
    drop_caches()
    # The find's own peak, not the creates'.
    reset_peak(pid)
    t = time.monotonic()
    found = int(sh(f"find {mnt} | wc -l"))
    find = {"entries": found, "seconds": time.monotonic() - t, "load": os.getloadavg()[0], **memory(pid)}
    find["peak_mib"] = find["hwm_mib"]
    find["cache"] = engine_counts(dualfs, mnt)
    print(json.dumps(find), file=sys.stderr, flush=True)
    t = time.monotonic()
    sh(f"{dualfs} umount {mnt}")
    umount_s = time.monotonic() - t
    mounts = {"cold": [], "program_warm": []}
    for _ in range(a.mount_runs):
        for kind in ("cold", "program_warm"):
            mounts[kind].append(timed_mount(dualfs, mount_opts, meta, data, mnt, kind == "program_warm"))
            sh(f"{dualfs} umount {mnt}")
    print(json.dumps(mounts), file=sys.stderr, flush=True)
    crash_mounts = []
    back = []
    sh(f"{dualfs} mount{mount_opts} {meta} {data} {mnt}")
    for k in range(a.mount_runs):
        crash(mnt, f"crash{k}")
        crash_mounts.append(timed_mount(dualfs, mount_opts, meta, data, mnt, True))
        back.append(len(os.listdir(f"{mnt}/crash{k}")))
    sh(f"{dualfs} umount {mnt}")
    clean_mount = sorted(mounts["program_warm"])[len(mounts["program_warm"]) // 2]
    crash_mount = sorted(crash_mounts)[len(crash_mounts) // 2]
    out = {"uptime": sh("uptime").strip(), "rows": rows, "find": find, "umount_after_find_s": umount_s,
           "mounts_clean_s": mounts, "mounts_after_crash_s": crash_mounts, "mount_clean_s": clean_mount,
           "mount_after_crash_s": crash_mount, "crash_files_back": back}
    print(json.dumps(out, indent=1))
    run = store.Run("fuse-scale", a.store, build=None if a.dualfs == DUALFS else a.dualfs)
    run.append(run.record("dualfs" + (f" -o {a.opts}" if a.opts else ""), f"files-{a.files}",
                          {k: v for k, v in out.items() if k != "uptime"}))
    if not a.keep:
        for p in (meta, data):
            os.remove(p)


if __name__ == "__main__":
    main()
