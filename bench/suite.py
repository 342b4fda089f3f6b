#!/usr/bin/env python3
"""DualFS against the file systems users would pick instead, on loop devices.

Method (as ../shared/PEERS.md): every file system lives on image files of
the same total size, each behind a loop device with direct I/O; the
meta-data / journal / log device of two-device configurations is about
10% of the total. Between phases the file system is unmounted, caches
are dropped and it is mounted again (cold cache). The loop devices'
/sys/block/loopN/stat counters are read before a phase and after the
unmount that follows it, so write-back at unmount is counted. Every file
system is mounted noatime (DualFS never updates atime on read).

With --trace, each image is served through `dualfs trace serve` (a FUSE
file recording every request) under its loop device, so that every
configuration is traced identically; the per-phase slices of the traces
are replayed through the disk models (`dualfs trace replay`). DualFS runs
additionally record their own semantic trace (`-o trace=`).

Every phase's record is appended to the results store, bench/results.jsonl
(bench/store.py: one record per configuration, phase and repeat, with the
commit, the machine and its load); bench/report.py turns the store into
docs/BENCHMARKS.md and its plots.
"""

import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store  # noqa: E402
import disks as emulated  # noqa: E402

CONFIGS = ["dualfs", "ext2", "ext4", "ext4-extjournal", "xfs-extlog", "btrfs", "fuse2fs"]
# Also known: "xfs" (one device), "dualfs-strict" (DualFS mounted -o order=strict),
# "dualfs-uring" (DualFS over io_uring: transport=uring, enable_uring set for the mount),
# "dualfs-base-uring" (the --dualfs-base build so, for an A/B over io_uring) and
# "dualfs-devfuse" (DualFS over /dev/fuse: transport=devfuse), "xfs-rt" (XFS with its data on a
# realtime device: the main device, meta-data and log, is the meta-data device; every file
# inherits the realtime flag). "dualfs" mounts as a user
# would: io_uring if the machine's enable_uring allows it, /dev/fuse otherwise.
MODELS = [("hdd5400", "one-disk"), ("hdd5400", "two-disks"), ("hdd7200", "one-disk"), ("ssd", "one-disk")]
GREP_PATTERN = "dualfs_no_such_pattern_x"
TREE_DUALFS = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "dualfs"))
DUALFS_CONFIGS = ("dualfs", "dualfs-base", "dualfs-strict", "dualfs-uring", "dualfs-base-uring", "dualfs-devfuse",
                  "dualfs-mirror")
# "dualfs-mirror": DualFS with its meta-data device mirrored (mkfs --meta-mirror, mounted -o mirror=) on a
# third loop device as large as the meta-data one, beside "dualfs" for mirrored against unmirrored.
# "floor": a FUSE server that does no work (`no-work-server --transport dev --default-permissions`, built
# beside the DualFS binary: a tree of names and sizes in memory, no data), mounted with the permission
# checks DualFS asks for. What any FUSE file system pays on this machine for the same requests.


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd, check=True, capture=False, timeout=3600):
    # In a session of its own: a command that runs past its timeout is
    # stopped with everything it started (PostMark under bash), so that the
    # file system can be unmounted.
    p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        raise
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {cmd}\n{r.stderr.decode(errors='replace')}")
    return r.stdout.decode(errors="replace") if capture else r.returncode


def stat(dev):
    """Reads /sys/block/loopN/stat: requests, sectors and flushes."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = [int(x) for x in f.read().split()]
    return {"read_req": v[0], "read_sectors": v[2], "write_req": v[4], "write_sectors": v[6],
            "flush_req": v[15] if len(v) > 15 else 0}


def diff(a, b):
    return {k: b[k] - a[k] for k in a}


def drop_caches():
    sh("sync; echo 3 > /proc/sys/vm/drop_caches")


class Volume:
    """One configuration's devices (loop devices over image files, optionally
    through trace servers) and how to make, mount and unmount it."""

    def __init__(self, cfg, args, workdir, disk=None):
        self.cfg, self.args, self.dir = cfg, args, workdir
        self.mnt = os.path.join(workdir, "mnt")
        self.two = cfg in DUALFS_CONFIGS + ("ext4-extjournal", "xfs-extlog", "xfs-rt")
        # On emulated disks (--disks): the layout's name and its servers.
        self.disk = disk
        self.disks = None
        # dualfs-base: another build of DualFS (--dualfs-base), for an A/B
        # comparison in one run; dualfs-strict: DualFS with -o order=strict.
        self.dualfs = args.dualfs_base if cfg in ("dualfs-base", "dualfs-base-uring") else args.dualfs
        self.loops = {}      # role -> /dev/loopN
        self.servers = []    # trace serve processes
        self.fuse_proc = None
        self.trace_files = {}
        self.sem_trace = None  # DualFS's own semantic trace of the next mount

    # --- devices -------------------------------------------------------
    def attach(self, trace_tag=None):
        os.makedirs(self.dir, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        total, meta = self.args.size_mib, self.args.meta_mib
        if self.disk:
            # Served without a model for mkfs; emulate() turns the models on.
            self.disks = emulated.Disks(self.disk, self.args.dualfs, self.dir, self.two, total, meta,
                                        write_cache=not self.args.no_write_cache)
            self.trace_tag = trace_tag
            self.loops = self.disks.create()
            return
        sizes = {"data": total - meta, "meta": meta} if self.two else {"data": total}
        if self.cfg == "dualfs-mirror":
            sizes["mirror"] = meta
        for role, mib in sizes.items():
            img = os.path.join(self.dir, f"{role}.img")
            if os.path.exists(img):
                os.unlink(img)
            with open(img, "wb") as f:
                f.truncate(mib << 20)
            backing = img
            if trace_tag is not None:
                tmnt = os.path.join(self.dir, f"trace-{role}")
                os.makedirs(tmnt, exist_ok=True)
                out = os.path.join(self.args.trace_dir, f"{self.cfg}-{trace_tag}-{role}.trace")
                p = subprocess.Popen([self.args.dualfs, "trace", "serve", img, tmnt, "--out", out,
                                      "--device", "m" if role == "meta" else "d"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.servers.append((p, tmnt))
                backing = os.path.join(tmnt, "image")
                for _ in range(100):
                    if os.path.exists(backing):
                        break
                    time.sleep(0.05)
                self.trace_files[role] = out
            self.loops[role] = sh(f"losetup --direct-io=on -f --show {backing}", capture=True).strip()

    def emulate(self):
        """On emulated disks: the file system, made, moves onto them."""
        if not self.disks:
            return
        prefix = None
        if self.trace_tag is not None:
            prefix = os.path.join(self.args.trace_dir, f"{self.cfg}-{self.disk}-{self.trace_tag}")
        self.loops = self.disks.emulate(prefix)

    def emulation_stats(self):
        return self.disks.stats() if self.disks and self.disks.servers else None

    def detach(self):
        if self.disks:
            self.disks.detach()
            self.loops = {}
            return
        for dev in self.loops.values():
            sh(f"losetup -d {dev}", check=False)
        self.loops = {}
        for p, tmnt in self.servers:
            sh(f"fusermount3 -u {tmnt}", check=False)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.terminate()
        self.servers = []

    # --- file system ---------------------------------------------------
    def mkfs(self):
        d, m = self.loops["data"], self.loops.get("meta")
        c = self.cfg
        if c == "dualfs-mirror":
            sh(f"{self.dualfs} mkfs -f --meta-mirror {self.loops['mirror']} {m} {d}")
        elif c in DUALFS_CONFIGS:
            sh(f"{self.dualfs} mkfs -f {m} {d}")
        elif c == "ext2":
            sh(f"mkfs.ext2 -q -F {self.ext4_opts()} {d}")
        elif c in ("ext4", "fuse2fs"):
            sh(f"mkfs.ext4 -q -F {self.ext4_opts()} {d}")
        elif c == "ext4-extjournal":
            sh(f"mkfs.ext4 -q -F -O journal_dev -b 4096 {m}")
            sh(f"mkfs.ext4 -q -F -b 4096 {self.ext4_opts()} -J device={m} {d}")
        elif c == "xfs-rt":
            # Reflink is not available with a realtime device in this mkfs.
            sh(f"mkfs.xfs -q -f -m reflink=0 -d rtinherit=1 -r rtdev={d} {m}")
        elif c == "xfs-extlog":
            sh(f"mkfs.xfs -q -f -l logdev={m},size={self.args.meta_mib - 8}m {d}")
        elif c == "xfs":
            sh(f"mkfs.xfs -q -f {d}")
        elif c == "btrfs":
            sh(f"mkfs.btrfs -q -f {d}")

    def ext4_opts(self):
        """On emulated disks the inode tables are zeroed by mkfs (before the
        model is on), not by ext4's lazy init in the background of the
        measured phases."""
        return "-E lazy_itable_init=0,lazy_journal_init=0" if self.disk else ""

    def mount(self):
        d, m = self.loops["data"], self.loops.get("meta")
        c = self.cfg
        if c in DUALFS_CONFIGS:
            opts = "noatime" + (f",trace={self.sem_trace}" if self.sem_trace else "")
            if c == "dualfs-strict":
                opts += ",order=strict"
            if c == "dualfs-mirror":
                opts += f",mirror={self.loops['mirror']}"
            transport = {"dualfs-uring": "uring", "dualfs-base-uring": "uring", "dualfs-devfuse": "devfuse"}.get(c)
            if transport:
                opts += f",transport={transport}"
            mount = f"{self.dualfs} mount -o {opts},log={self.dir}/dualfs.log {m} {d} {self.mnt}"
            if transport == "uring":
                # io_uring needs the fuse module's enable_uring (the whole
                # machine's) at the mount: set under the lock the mount
                # tests share, and put back.
                lock = "/run/lock/dualfs-enable-uring.lock"
                param = "/sys/module/fuse/parameters/enable_uring"
                sh(f"( flock 9; old=$(cat {param}); echo Y > {param}; {mount}; rc=$?; "
                   f"echo $old > {param}; exit $rc ) 9>{lock}")
            else:
                sh(mount)
            # The background process logs its transport just after it is ready.
            time.sleep(0.2)
            said = sh(f"grep 'serving over' {self.dir}/dualfs.log | tail -1", check=False, capture=True)
            log(f"{c}: {said.strip()}")
        elif c == "floor":
            # One server for the whole sequence: its tree is the state the
            # next phase finds (caches are dropped between phases as for
            # the others; the server keeps nothing else).
            if self.fuse_proc is not None and self.fuse_proc.poll() is None:
                return
            proto = os.path.join(os.path.dirname(self.args.dualfs), "no-work-server")
            self.serve([proto, self.mnt, "--transport", "dev", "--default-permissions"])
        elif c == "fuse2fs":
            self.serve(["fuse2fs", "-f", "-o", "noatime,allow_other", d, self.mnt])
        elif c == "xfs-extlog":
            sh(f"mount -o noatime,logdev={m} {d} {self.mnt}")
        elif c == "xfs-rt":
            sh(f"mount -o noatime,rtdev={d} {m} {self.mnt}")
        else:
            sh(f"mount -o noatime {d} {self.mnt}")

    def serve(self, argv):
        """Starts a FUSE server in the foreground of its own process and
        waits until it has mounted."""
        self.fuse_proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if sh(f"mountpoint -q {self.mnt}", check=False) == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{os.path.basename(argv[0])} did not mount")

    def fuse_requests(self):
        """DualFS's FUSE requests since mount (`dualfs stats --json`):
        opcode -> {count, total_us, mean_us}; None for the others, or for a
        build without the counters."""
        if self.cfg not in DUALFS_CONFIGS:
            return None
        r = subprocess.run([self.dualfs, "stats", "--json", self.mnt], capture_output=True, text=True)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout).get("fuse_requests") or None
        except ValueError:
            return None

    def umount(self, last=False):
        if self.cfg == "floor" and not last:
            return
        if self.cfg in DUALFS_CONFIGS:
            # A process of the machine's passing through the mount (a scan
            # of every mount point) makes it busy for a moment: try again.
            for _ in range(20):
                if sh(f"{self.dualfs} umount {self.mnt}", check=False) == 0:
                    break
                time.sleep(0.5)
            else:
                sh(f"{self.dualfs} umount {self.mnt}")
        else:
            sh(f"umount {self.mnt}")
            if self.fuse_proc is not None:
                self.fuse_proc.wait(timeout=600)
                self.fuse_proc = None

    def counters(self):
        return {role: stat(dev) for role, dev in self.loops.items()}


# --- workloads -----------------------------------------------------------

def copy_files_cmd(src, dst, procs, empty):
    """Recreates src's tree under dst: directories first, then the files
    split among `procs` processes (the paper's 1- and 4-process runs)."""
    mk = f"cd {src} && find . -type d -print0 | (cd {dst} && xargs -0 mkdir -p)"
    if empty:
        files = f"cd {src} && find . -type f -print0 | (cd {dst} && xargs -0 -P {procs} -n 128 touch)"
    else:
        files = f"cd {src} && find . -type f -print0 | xargs -0 -P {procs} -n 128 cp --parents -t {dst}"
    return f"mkdir -p {dst} && {mk} && {files}"


def per_dir_cmd(root, procs, what):
    """Runs `what DIR` on each top-level directory, `procs` at a time."""
    return f"cd {root} && ls -d */ | xargs -P {procs} -I{{}} {what}"


def seq_micro(src, tar, procs_list):
    """The paper's micro-benchmarks and LinLogFS's un-tar/tar/find/rm, on one
    file system, in order; yFS's extraction then deletion after remount is
    untar ... rm."""
    m = "$MNT"
    phases = [("untar", f"tar xf {tar} -C {m}", None)]
    for p in procs_list:
        sfx = "" if p == 1 else f"-{p}p"
        phases.append((f"find{sfx}", per_dir_cmd(f"{m}/linux", p, "find {} -size +2k") + " > /dev/null", None))
        phases.append((f"grep{sfx}", per_dir_cmd(f"{m}/linux", p, f"grep -r {GREP_PATTERN} {{}}") + " > /dev/null || true", None))
    phases.append(("tar", f"tar cf - -C {m} linux | cat > /dev/null", None))
    for p in procs_list:
        sfx = "" if p == 1 else f"-{p}p"
        phases.append((f"write-meta{sfx}", copy_files_cmd(src, f"{m}/wm{p}", p, True), None))
        phases.append((f"write-data-meta{sfx}", copy_files_cmd(src, f"{m}/wdm{p}", p, False), None))
        phases.append((f"rw-meta{sfx}", copy_files_cmd(f"{m}/linux", f"{m}/rwm{p}", p, True), None))
        phases.append((f"rw-data-meta{sfx}", copy_files_cmd(f"{m}/linux", f"{m}/rwdm{p}", p, False), None))
    # Untimed: remove the copies, so that rm deletes exactly the extracted archive.
    phases.append(("rm", f"rm -rf {m}/linux", f"rm -rf {m}/wm* {m}/wdm* {m}/rwm* {m}/rwdm*"))
    return phases


def seq_disks(tar, web_reads):
    """The paper's workloads on emulated disks, each on a cold cache: untar,
    find (read-meta), grep (read-data-meta), tar, a copy inside the volume
    (`cp -a`, copying: XFS and btrfs would otherwise clone), SpecWeb-like
    reads (files drawn by a seeded Zipf law, as a web server's), and `rm -rf`
    of both trees after a remount."""
    m = "$MNT"
    web = (f"python3 {os.path.join(os.path.dirname(os.path.abspath(__file__)), 'disks.py')} web "
           f"--root {m}/linux --reads {web_reads}")
    return [
        ("untar", f"tar xf {tar} -C {m}", None),
        ("find", f"find {m}/linux -size +2k > /dev/null", None),
        ("grep", f"grep -r {GREP_PATTERN} {m}/linux > /dev/null || true", None),
        ("tar", f"tar cf - -C {m} linux | cat > /dev/null", None),
        ("cp-a", f"cp -a --reflink=never {m}/linux {m}/copy", None),
        ("web", web, None),
        ("rm", f"rm -rf {m}/linux {m}/copy", None),
    ]


def seq_write_del(src, rounds):
    """Paper §4.4: copy the tree, delete 7/8 of its regular files; repeat."""
    cmds = []
    for i in range(rounds):
        d = f"$MNT/wd{i}"
        cmds.append(f"cp -a {src} {d}")
        cmds.append(f"find {d} -type f | awk 'NR % 8 != 0' | tr '\\n' '\\0' | xargs -0 rm -f")
    return [("write-del" if rounds == 5 else f"write-del-{rounds}", " && ".join(cmds), None)]


def seq_postmark(files, dirs, transactions):
    conf = (f"set location $MNT\\nset number {files}\\nset subdirectories {dirs}\\n"
            f"set transactions {transactions}\\nset size 512 16384\\nset read 512\\nset write 512\\n"
            "set buffering false\\nrun\\nquit\\n")
    return [("postmark", f'cd /tmp && printf "{conf}" | postmark > $OUT/postmark.txt', None)]


def seq_fsync(seq_mib, rand_ios, sync_ios):
    fio = "fio --output-format=json --directory=$MNT --ioengine=psync --bs=4k"
    return [
        ("seq-write-fsync", f"fio --output-format=json --directory=$MNT --ioengine=psync --name=seq --rw=write "
                            f"--bs=1M --size={seq_mib}M --end_fsync=1 > $OUT/fio-seq.json", None),
        ("rand-fsync-256", f"{fio} --name=r256 --rw=randwrite --size=64M --number_ios={rand_ios} --fsync=256 "
                           "> $OUT/fio-r256.json",
         f"{fio} --name=r256 --rw=randwrite --size=64M --create_only=1 > /dev/null"),
        ("rand-fsync-1", f"{fio} --name=r1 --rw=randwrite --size=64M --number_ios={sync_ios} --fsync=1 "
                         "> $OUT/fio-r1.json",
         f"{fio} --name=r1 --rw=randwrite --size=64M --create_only=1 > /dev/null"),
    ]


def seq_read(mib):
    """A file written and synced in one mount, read in the next with a cold
    cache."""
    fio = f"fio --output-format=json --directory=$MNT --ioengine=psync --name=seqr --bs=1M --size={mib}M"
    return [("seq-read-cold", f"{fio} --rw=read > $OUT/fio-seqr.json", f"{fio} --rw=write --end_fsync=1 > /dev/null")]


def seq_ls(files):
    """`ls -l` of one directory of `files` empty files, cold, then again in
    the same mount (warm: the second listing is what the kernel's caches
    save)."""
    mk = f"mkdir -p $MNT/many && cd $MNT/many && seq -f f%06.0f 1 {files} | xargs touch"
    ls = "ls -l $MNT/many > /dev/null"
    return [("ls-l-cold", ls, mk), ("ls-l-warm", ls, None, ls)]


def seq_durability(args):
    """Durability: an fsync beside other dirty data, fio random
    writes with an fsync (or fdatasync) each, 1 and 4 jobs, and SQLite
    inserts of one transaction each, alone and beside a 1 GiB copy."""
    probe = f"python3 {os.path.join(os.path.dirname(os.path.abspath(__file__)), 'durability.py')}"
    fio = ("fio --output-format=json --directory=$MNT --ioengine=psync --bs=4k --rw=randwrite --size=64M "
           "--group_reporting")
    run = f"--time_based --runtime={args.durability_seconds}"
    phases = []
    for mib in (0, 64, 256):
        phases.append((f"tangle-{mib}", f'{probe} tangle --mnt $MNT --devs "$DEVS" --dirty-mib {mib} --n 200 '
                                        f"> $OUT/tangle-{mib}.json", None))
    for name, sync, jobs in (("fio-fsync-1j", "fsync", 1), ("fio-fsync-4j", "fsync", 4),
                             ("fio-fdatasync-1j", "fdatasync", 1)):
        phases.append((name, f"{fio} --name=f --numjobs={jobs} --{sync}=1 {run} > $OUT/{name}.json",
                       f"{fio} --name=f --numjobs={jobs} --create_only=1 > /dev/null"))
    for mode in ("wal", "delete"):
        phases.append((f"sqlite-{mode}", f'{probe} sqlite --mnt $MNT --devs "$DEVS" --mode {mode} '
                                         f"--seconds {args.durability_seconds} > $OUT/sqlite-{mode}.json", None))
        phases.append((f"sqlite-{mode}-copy", f'{probe} sqlite --mnt $MNT --devs "$DEVS" --mode {mode} '
                                              f"--seconds {args.durability_seconds} --copy {args.copy_src} "
                                              f"> $OUT/sqlite-{mode}-copy.json", None))
    return phases


def seq_bonnie(n):
    return [("bonnie-small-files", f"bonnie++ -d $MNT -s 0 -n {n}:0:0:16 -u root -q > $OUT/bonnie.csv 2>/dev/null", None)]


# --- running -------------------------------------------------------------

def run_sequence(vol, name, phases, args, rep, results, trace_tag):
    """One fresh file system, then each phase with a cold cache."""
    log(f"{vol.cfg} rep {rep}: {name}" + (f" on {vol.disk}" if vol.disk else ""))
    vol.attach(trace_tag)
    try:
        vol.mkfs()
        vol.emulate()
        outdir = os.path.join(args.work, "out")
        os.makedirs(outdir, exist_ok=True)
        devs = " ".join(f"{role}={dev}" for role, dev in vol.loops.items())
        env = f"export MNT={vol.mnt} OUT={outdir} DEVS='{devs}'; "
        for phase, cmd, prep, *warm in phases:
            if prep:
                vol.mount()
                sh(env + prep)
                vol.umount()
            drop_caches()
            if trace_tag is not None and vol.cfg == "dualfs":
                vol.sem_trace = os.path.join(args.trace_dir, f"dualfs-{phase}-semantic.trace")
            vol.mount()
            vol.sem_trace = None
            if warm and warm[0]:
                # Untimed, in the same mount: the phase measures a warm cache.
                sh(env + warm[0])
            fuse0 = vol.fuse_requests() or {}
            e0 = vol.emulation_stats()
            load0 = os.getloadavg()[0]
            c0 = vol.counters()
            ns0 = time.time_ns()
            t0 = time.monotonic()
            try:
                sh(env + cmd, timeout=args.phase_timeout)
            except subprocess.TimeoutExpired:
                # Recorded as what it is; the sequence ends here.
                log(f"  {phase}: stopped after {args.phase_timeout} s")
                vol.umount()
                args.run.append(stored(args, {"config": vol.cfg, "phase": phase, "sequence": name, "rep": rep,
                                              "traced": trace_tag is not None, "timed_out": True,
                                              "wall_s": float(args.phase_timeout),
                                              "wall_umount_s": float(args.phase_timeout),
                                              "window_ns": [ns0, time.time_ns()], "disk": vol.disk}))
                break
            t1 = time.monotonic()
            # The FUSE requests the phase sent, per opcode with their serving
            # time; read before the unmount, and not timed.
            fuse = vol.fuse_requests()
            t1b = time.monotonic()
            vol.umount()
            t2 = time.monotonic()
            ns1 = time.time_ns()
            c1 = vol.counters()
            rec = {"config": vol.cfg, "phase": phase, "sequence": name, "rep": rep, "traced": trace_tag is not None,
                   "wall_s": t1 - t0, "wall_umount_s": t2 - t0 - (t1b - t1), "window_ns": [ns0, ns1],
                   "devices": {role: diff(c0[role], c1[role]) for role in c0}}
            rec["extra"] = extra_output(phase, outdir)
            if e0 is not None:
                # What each emulated disk did until after the unmount, and
                # what serving it cost.
                rec["disk"] = vol.disk
                rec["emulation"] = emulated.stats_diff(e0, vol.emulation_stats())
                rec["loadavg"] = [load0, os.getloadavg()[0]]
            if fuse:
                rec["fuse_requests"] = fuse_diff(fuse0, fuse)
            log(f"  {phase}: {rec['wall_s']:.2f} s (+umount {rec['wall_umount_s'] - rec['wall_s']:.2f} s), "
                + ", ".join(f"{r} {d['write_req']} wr/{d['write_sectors'] / 2048:.1f} MiB"
                            for r, d in rec["devices"].items()))
            if rec["traced"]:
                results.append(rec)  # stored once its traces are replayed (slice_traces)
            else:
                args.run.append(stored(args, rec))
    finally:
        if sh(f"mountpoint -q {vol.mnt}", check=False) == 0:
            try:
                vol.umount(last=True)
            except Exception as e:  # noqa: BLE001 - clean-up must go on
                log(f"umount failed: {e}")
        vol.detach()


def fuse_diff(before, after):
    """The requests served between two `dualfs stats` readings (a warm
    phase's untimed first run is in the mount's counters too)."""
    out = {}
    for op, v in after.items():
        b = before.get(op, {})
        n, us = v.get("count", 0) - b.get("count", 0), v.get("total_us", 0) - b.get("total_us", 0)
        if n > 0:
            out[op] = {"count": n, "total_us": us}
            if "lock_wait_us" in v:
                out[op]["lock_wait_us"] = v["lock_wait_us"] - b.get("lock_wait_us", 0)
    return out


def extra_output(phase, outdir):
    """Rates the tools themselves report."""
    try:
        if phase == "postmark":
            with open(os.path.join(outdir, "postmark.txt")) as f:
                txt = f.read()
            for line in txt.splitlines():
                if "transactions" in line and "per second" in line:
                    return {"postmark_tx_s": float(line.split("(")[1].split()[0])}
        if phase.startswith("rand-fsync") or phase.startswith("seq-write") or phase == "seq-read-cold":
            name = {"seq-write-fsync": "fio-seq", "rand-fsync-256": "fio-r256", "rand-fsync-1": "fio-r1",
                    "seq-read-cold": "fio-seqr"}[phase]
            with open(os.path.join(outdir, f"{name}.json")) as f:
                j = json.load(f)
            w = j["jobs"][0]["read" if phase == "seq-read-cold" else "write"]
            return {"iops": w["iops"], "bw_mib_s": w["bw"] / 1024.0, "ios": w["total_ios"]}
        if phase.startswith("tangle-") or phase.startswith("sqlite-"):
            with open(os.path.join(outdir, f"{phase}.json")) as f:
                return json.load(f)
        if phase.startswith("fio-"):
            with open(os.path.join(outdir, f"{phase}.json")) as f:
                j = json.load(f)
            job = j["jobs"][0]
            w, sy = job["write"], job.get("sync", {})
            def p99(section):
                pc = section.get("lat_ns", section.get("clat_ns", {})).get("percentile", {})
                return pc.get("99.000000", 0) / 1e6
            return {"iops": w["iops"], "ios": w["total_ios"], "write_p99_ms": p99(w),
                    "sync_p99_ms": p99(sy) if sy else 0.0,
                    "sync_mean_ms": sy.get("lat_ns", {}).get("mean", 0) / 1e6 if sy else 0.0}
        if phase == "bonnie-small-files":
            with open(os.path.join(outdir, "bonnie.csv")) as f:
                row = f.read().strip().splitlines()[-1].split(",")
            # bonnie++ 2.x CSV: seq create/read/delete, random create/read/delete per second.
            names = ["seq_create", "seq_stat", "seq_delete", "rand_create", "rand_stat", "rand_delete"]
            vals = [row[i] for i in (24, 26, 28, 30, 32, 34)]
            return {n: v for n, v in zip(names, vals)}
    except (OSError, ValueError, KeyError, IndexError) as e:
        return {"error": str(e)}
    return {}


def stored(args, rec):
    """A phase's measurement as a record of the store."""
    identity = ("config", "phase", "sequence", "rep", "traced")
    out = args.run.record(rec["config"], rec["phase"], {k: v for k, v in rec.items() if k not in identity},
                          sequence=rec["sequence"], rep=rec["rep"], traced=rec["traced"])
    out["time"] = datetime.datetime.fromtimestamp(rec["window_ns"][0] / 1e9, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    build = args.dualfs_base if rec["config"].startswith("dualfs-base") else args.dualfs
    if rec["config"].startswith("dualfs") and build != TREE_DUALFS:
        out["build"] = build
    return out


def slice_traces(args, results):
    """Per phase: the traced run's records inside its window, replayed."""
    for rec in results:
        if not rec["traced"]:
            continue
        if rec.get("disk"):
            # On emulated disks each disk's server traced it (Volume.emulate).
            stem = f"{rec['config']}-{rec['disk']}-{rec['sequence']}"
            files = sorted(glob.glob(os.path.join(args.trace_dir, f"{stem}-*.trace")))
            part = os.path.join(args.trace_dir, f"{rec['config']}-{rec['disk']}-{rec['phase']}.slice")
        else:
            files = [os.path.join(args.trace_dir, f"{rec['config']}-{rec['sequence']}-{role}.trace")
                     for role in rec["devices"]]
            part = os.path.join(args.trace_dir, f"{rec['config']}-{rec['phase']}.slice")
        lo, hi = rec["window_ns"]
        with open(part, "w") as out:
            out.write("# dualfs-trace 1\n")
            for fn in files:
                with open(fn) as f:
                    for line in f:
                        if line.startswith("#"):
                            if line.startswith("# device"):
                                out.write(line)
                            continue
                        t = int(line.split(" ", 1)[0])
                        if lo <= t <= hi:
                            out.write(line)
        rec["replay"] = {}
        for model, layout in MODELS:
            j = json.loads(sh(f"{args.dualfs} trace replay --json --model {model} --layout {layout} {part}",
                              capture=True))
            rec["replay"][f"{model}/{layout}"] = {"total_s": j["total_s"], "meta_s": j["meta_s"], "data_s": j["data_s"]}
        rec["trace_summary"] = json.loads(sh(f"{args.dualfs} trace summary --json {part}", capture=True))
        sem = os.path.join(args.trace_dir, f"dualfs-{rec['phase']}-semantic.trace")
        if rec["config"] == "dualfs" and os.path.exists(sem):
            rec["semantic"] = json.loads(sh(f"{args.dualfs} trace summary --json {sem}", capture=True))
            # The engine's own requests, replayed: which classes of block the I/O time goes to.
            j = json.loads(sh(f"{args.dualfs} trace replay --json --model hdd5400 {sem}", capture=True))
            rec["semantic_replay"] = {"total_s": j["total_s"], "classes": j["classes"]}
        if not args.keep_traces:
            os.unlink(part)
    args.run.append([stored(args, rec) for rec in results])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dualfs", default=TREE_DUALFS)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--dualfs-base", help="another DualFS binary, run as configuration dualfs-base (A/B in one run)")
    ap.add_argument("--sequences", default="micro,write-del,postmark,fsync,bonnie,read,ls,durability")
    ap.add_argument("--work", default="/var/tmp/dualfs-bench")
    ap.add_argument("--store", help="the results store to append to (default: bench/results.jsonl; "
                    "with --smoke, results.jsonl in --work)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--meta-mib", type=int, default=408)
    ap.add_argument("--procs", default="1,4")
    ap.add_argument("--write-del-rounds", type=int, default=5)
    ap.add_argument("--postmark", default="20000,150,100000", help="files,dirs,transactions")
    ap.add_argument("--fsync", default="256,4096,2000", help="seq MiB, random ios (fsync/256), random ios (fsync/1)")
    ap.add_argument("--bonnie-files", type=int, default=16, help="bonnie++ -n, in 1024s")
    ap.add_argument("--read-mib", type=int, default=1024, help="the cold sequential read's file")
    ap.add_argument("--ls-files", type=int, default=50_000, help="entries of the ls -l directory")
    ap.add_argument("--phases", help="only the phases whose names are in this comma-separated list")
    ap.add_argument("--durability-seconds", type=int, default=20, help="fio and SQLite runs of the durability sequence")
    ap.add_argument("--trace", action="store_true", help="one extra traced run per configuration and sequence")
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument("--src", help="the source tree (default: Linux 6.1 from linux-source-6.1, prepared)")
    ap.add_argument("--phase-timeout", type=int, default=3600)
    ap.add_argument("--smoke", action="store_true", help="tiny inputs, dualfs and ext4 only: checks the harness")
    ap.add_argument("--disks", help="run on emulated disks (bench/disks.py LAYOUTS: hdd5400, hdd5400-2d, hdd7200, "
                                    "hdd7200-2d, tiered), comma-separated; each configuration runs on each")
    ap.add_argument("--no-write-cache", action="store_true", help="emulated disks without a write cache")
    ap.add_argument("--web-reads", type=int, default=2000, help="files read by the SpecWeb-like phase")
    args = ap.parse_args()
    args.dualfs = os.path.abspath(args.dualfs)
    if args.dualfs_base:
        args.dualfs_base = os.path.abspath(args.dualfs_base)
    if os.geteuid() != 0:
        sys.exit("the benchmark needs root (loop devices, mount)")
    if args.smoke:
        args.configs, args.repeats, args.size_mib, args.meta_mib = "dualfs,ext4", 1, 256, 32
        args.sequences, args.procs, args.write_del_rounds = "micro,write-del,read,ls", "1", 1
        args.read_mib, args.ls_files = 16, 500
    if "xfs-rt" in args.configs.split(",") and not kernel_has("CONFIG_XFS_RT=y"):
        log("xfs-rt left out: this kernel is built without XFS's realtime device (CONFIG_XFS_RT)")
        args.configs = ",".join(c for c in args.configs.split(",") if c != "xfs-rt")
    os.makedirs(args.work, exist_ok=True)
    args.trace_dir = os.path.join(args.work, "traces")
    os.makedirs(args.trace_dir, exist_ok=True)
    src, tar = prepare_source(args)
    procs = [int(p) for p in args.procs.split(",")]
    pm = [int(x) for x in args.postmark.split(",")]
    fs = [int(x) for x in args.fsync.split(",")]
    args.copy_src = os.path.join(args.work, "copy-src")
    if "durability" in args.sequences and not os.path.exists(args.copy_src):
        sh(f"dd if=/dev/urandom of={args.copy_src} bs=1M count=1024 status=none")
    seqs = {
        "micro": seq_micro(src, tar, procs),
        "write-del": seq_write_del(src, args.write_del_rounds),
        "postmark": seq_postmark(*pm),
        "fsync": seq_fsync(*fs),
        "bonnie": seq_bonnie(args.bonnie_files),
        "read": seq_read(args.read_mib),
        "ls": seq_ls(args.ls_files),
        "durability": seq_durability(args),
        "disks": seq_disks(tar, args.web_reads),
    }
    if args.phases:
        keep = set(args.phases.split(","))
        seqs = {name: [p for p in phases if p[0] in keep] for name, phases in seqs.items()}
    if args.store is None:
        args.store = os.path.join(args.work, "results.jsonl") if args.smoke else store.STORE
    # Runs on emulated disks are a tool of their own: their phases take
    # seconds of modelled disk, not comparable with the loop devices' runs.
    args.run = store.Run("disks" if args.disks else "suite", args.store)
    log(f"run {args.run.id}, appending to {args.store}")
    results = []
    for rep in range(args.repeats + (1 if args.trace else 0)):
        traced = args.trace and rep == args.repeats
        for disk in (args.disks.split(",") if args.disks else [None]):
            for cfg in args.configs.split(","):
                if disk and not disk_fits(cfg, disk):
                    continue
                for name in args.sequences.split(","):
                    vol = Volume(cfg, args, os.path.join(args.work, cfg), disk)
                    run_sequence(vol, name, seqs[name], args, rep, results, name if traced else None)
    if args.trace:
        slice_traces(args, results)
    log(f"run {args.run.id} is in {args.store}")


def kernel_has(option):
    """Whether the running kernel's build configuration has `option`
    (unknown: assumed so)."""
    path = f"/boot/config-{os.uname().release}"
    if not os.path.exists(path):
        return True
    with open(path) as f:
        return any(line.strip() == option for line in f)


def disk_fits(cfg, disk):
    """On two disks or the tiered layout only the two-device configurations
    run: a one-device file system there is the one-disk run again."""
    if cfg == "dualfs-mirror":
        # The emulated layouts have two disks, not three.
        return False
    two = cfg in DUALFS_CONFIGS or cfg in ("ext4-extjournal", "xfs-extlog", "xfs-rt")
    return two or emulated.LAYOUTS[disk]["meta"] == emulated.LAYOUTS[disk]["data"]


def prepare_source(args):
    """The source tree and its tar: Linux 6.1's fs include kernel mm block
    (PEERS.md), or a small generated tree for --smoke."""
    base = os.path.join(args.work, "src")
    os.makedirs(base, exist_ok=True)
    if args.src:
        src = os.path.abspath(args.src)
    elif args.smoke:
        src = os.path.join(base, "smoke", "linux")
        if not os.path.isdir(src):
            for d in range(8):
                os.makedirs(os.path.join(src, f"d{d}", "sub"), exist_ok=True)
                for i in range(25):
                    with open(os.path.join(src, f"d{d}", "sub" if i % 2 else "", f"f{i}.c"), "w") as f:
                        f.write("int x;\n" * (i * 60))
    else:
        src = os.path.join(base, "linux")
        if not os.path.isdir(src):
            tarball = "/usr/src/linux-source-6.1.tar.xz"
            if not os.path.exists(tarball):
                sh("apt-get install -y -qq linux-source-6.1")
            sh(f"cd {base} && tar xJf {tarball} " + " ".join(f"linux-source-6.1/{d}" for d in
                                                            ("fs", "include", "kernel", "mm", "block"))
               + " && mv linux-source-6.1 linux")
    tar = src + ".tar"
    if not os.path.exists(tar):
        sh(f"tar cf {tar} -C {os.path.dirname(src)} {os.path.basename(src)}")
    if os.path.basename(src) != "linux":
        sys.exit("the source tree's directory must be named linux")
    return src, tar


if __name__ == "__main__":
    main()
