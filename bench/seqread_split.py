#!/usr/bin/env python3
"""Where one READ of a sequential stream goes, from a trace that
bench/seqread_ab.sh records with TRACE=1:

    perf script -i /var/tmp/seqread/trace.data | bench/seqread_split.py 7,1 [CONN]

(the loop device's MAJ,MIN and the FUSE connection, both printed by
seqread_ab.sh). Prints the kernel's READ latency (fuse_request_send -> end,
on CONN, or else on the connection with the most READs), the server's data-device preads and reply writevs (threads named
fuser-*), the loop device's requests (latency, sizes in sectors), and for
each of the three how many were in flight, as shares of the time.
"""
import collections
import re
import statistics
import sys

EVENT = re.compile(r'^\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$')


def summary(xs):
    if not xs:
        return "none"
    xs = sorted(xs)
    return (f"n={len(xs)} median {statistics.median(xs) * 1e3:.3f} ms p10 {xs[len(xs) // 10] * 1e3:.3f} "
            f"p90 {xs[len(xs) * 9 // 10] * 1e3:.3f}")


def main():
    loop = sys.argv[1] if len(sys.argv) > 1 else None
    events = [m.groups() for m in map(EVENT.match, sys.stdin.read().splitlines()) if m]
    reads = collections.Counter(r.split()[1] for _, _, _, _, n, r in events
                                if n == 'fuse:fuse_request_send' and 'FUSE_READ)' in r)
    conn = sys.argv[2] if len(sys.argv) > 2 else reads.most_common(1)[0][0] if reads else None
    sent, preads, writevs, issued = {}, {}, {}, {}
    lat = {'READ': [], 'pread': [], 'writev': [], 'loop': []}
    sizes = collections.Counter()
    edges = []  # (time, +1/-1, kind): for the in-flight shares
    for comm, pid, _cpu, t, name, rest in events:
        t = float(t)
        f = rest.split()
        if name == 'fuse:fuse_request_send' and f[1] == conn and 'FUSE_READ)' in rest:
            sent[f[3]] = t
            edges.append((t, 1, 'READ'))
        elif name == 'fuse:fuse_request_end' and f[1] == conn and f[3] in sent:
            lat['READ'].append(t - sent.pop(f[3]))
            edges.append((t, -1, 'READ'))
        elif name == 'syscalls:sys_enter_pread64' and comm.startswith('fuser'):
            preads[pid] = (t, int(rest.split('count: ')[1].split(',')[0], 16))
        elif name == 'syscalls:sys_exit_pread64' and pid in preads:
            t0, n = preads.pop(pid)
            if n >= 1 << 20:
                lat['pread'].append(t - t0)
                edges += [(t0, 1, 'pread'), (t, -1, 'pread')]
        elif name == 'syscalls:sys_enter_writev' and comm.startswith('fuser'):
            writevs[pid] = t
        elif name == 'syscalls:sys_exit_writev' and pid in writevs:
            t0 = writevs.pop(pid)
            if int(rest.strip(), 16) >= 1 << 20:
                lat['writev'].append(t - t0)
        elif name.startswith('block:block_rq') and loop and f and f[0] == loop and '+' in f:
            i = f.index('+')
            if name.endswith('issue'):
                issued[f[i - 1]] = t
                sizes[f[i + 1]] += 1
                edges.append((t, 1, 'loop'))
            elif f[i - 1] in issued:
                lat['loop'].append(t - issued.pop(f[i - 1]))
                edges.append((t, -1, 'loop'))
    print("kernel READ, send to reply:", summary(lat['READ']))
    print("server pread of >= 1 MiB:", summary(lat['pread']))
    print("server reply writev of >= 1 MiB:", summary(lat['writev']))
    print("loop requests:", summary(lat['loop']), "sectors:", dict(sizes.most_common(4)))
    edges.sort()
    for kind in ('READ', 'pread', 'loop'):
        cur, last, share = 0, None, collections.Counter()
        for t, d, k in edges:
            if k != kind:
                continue
            if last is not None:
                share[cur] += t - last
            cur, last = cur + d, t
        total = sum(share.values()) or 1
        shown = {c: round(v / total, 2) for c, v in sorted(share.items()) if v / total >= 0.01}
        print(f"{kind} in flight, share of {total:.3f} s:", shown)


if __name__ == '__main__':
    main()
