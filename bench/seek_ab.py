#!/usr/bin/env python3
"""What SEEK_DATA / SEEK_HOLE cost on a DualFS mount, per case the adapter
tells apart (docs/DESIGN.md, "SEEK_DATA and SEEK_HOLE under the writeback
cache"), and what losing holes would cost a sparse-aware copy.

    python3 bench/seek_ab.py MOUNTPOINT [--rounds N]

Cases, interleaved round by round:
  reader     a file nobody holds open for writing: answered by the volume
  writer     held open for writing, no dirty page: the kernel is asked to
             write back first (nothing to write; its clean pages are dropped)
  dirty      one 4 KiB page written before each lseek: written back first
  reread     reading 64 MiB again after such an lseek (dropped pages)
             against reading it with its pages kept
  cp         cp --sparse=auto of a 1 GiB file with 16 data runs of 64 KiB
             (holes found) against cp --sparse=never (what a kernel that
             answers without holes makes of it: every byte copied)
"""
import os
import statistics
import subprocess
import sys
import time

D = os.SEEK_DATA


def timed(f, n):
    t = []
    for _ in range(n):
        s = time.perf_counter_ns()
        f()
        t.append(time.perf_counter_ns() - s)
    return statistics.median(t) / 1000.0


def main():
    mnt = sys.argv[1]
    rounds = int(sys.argv[sys.argv.index('--rounds') + 1]) if '--rounds' in sys.argv else 5
    os.chdir(mnt)
    with open('plain', 'wb') as f:
        f.write(b'p' * (1 << 20))
    big = 'big'
    with open(big, 'wb') as f:
        f.write(os.urandom(64 << 20))
    sparse = 'sparse'
    fd = os.open(sparse, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.ftruncate(fd, 1 << 30)
    for i in range(16):
        os.pwrite(fd, os.urandom(64 << 10), i * (64 << 20))
    os.close(fd)
    res = {k: [] for k in ('reader', 'writer', 'dirty', 'reread_after', 'reread_kept', 'cp_auto', 'cp_never')}
    for _ in range(rounds):
        r = os.open('plain', os.O_RDONLY)
        res['reader'].append(timed(lambda: os.lseek(r, 0, D), 200))
        os.close(r)
        w = os.open('plain', os.O_RDWR)
        res['writer'].append(timed(lambda: os.lseek(w, 0, D), 200))

        def dirty():
            os.pwrite(w, b'q' * 4096, 4096)
            os.lseek(w, 0, D)
        res['dirty'].append(timed(dirty, 200))
        os.close(w)

        def reread():
            b = os.open(big, os.O_RDONLY)
            while os.read(b, 1 << 20):
                pass
            os.close(b)
        reread()
        res['reread_kept'].append(timed(reread, 1) / 1000.0)
        w = os.open(big, os.O_RDWR)
        os.lseek(w, 0, D)
        os.close(w)
        res['reread_after'].append(timed(reread, 1) / 1000.0)
        for mode in ('auto', 'never'):
            s = time.perf_counter()
            subprocess.run(['cp', '--sparse=' + mode, sparse, 'copy-' + mode], check=True)
            res['cp_' + mode].append((time.perf_counter() - s) * 1000.0)
            blocks = os.stat('copy-' + mode).st_blocks * 512
            os.unlink('copy-' + mode)
            res.setdefault('cp_%s_bytes' % mode, []).append(blocks)
    units = {'reader': 'us', 'writer': 'us', 'dirty': 'us', 'reread_after': 'ms', 'reread_kept': 'ms',
             'cp_auto': 'ms', 'cp_never': 'ms', 'cp_auto_bytes': 'B', 'cp_never_bytes': 'B'}
    for k, v in res.items():
        print('%-14s median %10.1f %s  (rounds: %s)' % (k, statistics.median(v), units[k], ' '.join('%.1f' % x for x in v)))
    for f in ('plain', big, sparse):
        os.unlink(f)


if __name__ == '__main__':
    main()
