#!/bin/bash
# The suite's seq-write-fsync stream (fio psync, 1 MiB writes, 1 GiB, end_fsync=1) on the suite's
# loop devices, traced: how many WRITEs the kernel had in flight and for how long
# (fuse:fuse_request_send/end), and how long fio slept in the kernel's dirty throttling
# (writeback:balance_dirty_pages) with the bdi's dirty ratelimit meanwhile.
# CFG=dualfs[:OPTS] (the build in B) | proto[:BYTES] (the no-work server, /dev/fuse, its window).
# OPTS use '+' for ','.  Needs perf.  (docs/BENCHMARKS.md, "The sequential write: six levers...")
set -u
B=${B:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
CFG=${CFG:-dualfs}
W=${W:-/var/tmp/stream-trace}; mkdir -p $W/mnt
[ -f $W/meta.img ] || { truncate -s 408M $W/meta.img; truncate -s 3688M $W/data.img; }
M=$(losetup --direct-io=on -f --show $W/meta.img); D=$(losetup --direct-io=on -f --show $W/data.img)
cleanup() { mountpoint -q $W/mnt && umount $W/mnt; sleep 0.5; losetup -d $M; losetup -d $D; }
trap cleanup EXIT
name=${CFG%%:*}; arg=""; [ "$name" != "$CFG" ] && arg=${CFG#*:}
case $name in
 dualfs) $B/dualfs mkfs -f $M $D >/dev/null 2>&1 || exit 1
   opts=""; [ -n "$arg" ] && opts=",$(echo $arg | tr + ,)"
   $B/dualfs mount -o noatime$opts $M $D $W/mnt || exit 1 ;;
 proto) $B/no-work-server $W/mnt --transport dev > /dev/null &
   for i in $(seq 100); do mountpoint -q $W/mnt && break; sleep 0.05; done
   if [ -n "$arg" ]; then dev=$(awk -v m=$W/mnt '$5==m {print $3}' /proc/self/mountinfo | tail -1); echo $arg > /sys/class/bdi/$dev/max_bytes; fi ;;
 *) echo "CFG: dualfs[:OPTS] or proto[:BYTES]"; exit 2 ;;
esac
sync; echo 3 > /proc/sys/vm/drop_caches
perf record -q -a -e fuse:fuse_request_send -e fuse:fuse_request_end -e writeback:balance_dirty_pages -o $W/trace.data & pp=$!
sleep 0.5
fio --output-format=json --directory=$W/mnt --ioengine=psync --name=seq --rw=write --bs=1M --size=1024M --end_fsync=1 > $W/fio.json
kill -INT $pp; wait $pp
perf script -i $W/trace.data > $W/trace.txt 2>/dev/null
python3 - "$W" "$CFG" <<'EOF'
import collections, json, re, sys
w, cfg = sys.argv[1], sys.argv[2]
bw = json.load(open(f"{w}/fio.json"))["jobs"][0]["write"]["bw"] / 1024
sent, writes, pauses, ratelimits = {}, [], [], set()
for line in open(f"{w}/trace.txt"):
    m = re.search(r"\s([\d.]+):\s+(fuse:fuse_request_send|fuse:fuse_request_end|writeback:balance_dirty_pages):(.*)", line)
    if not m:
        continue
    t, event, rest = float(m.group(1)), m.group(2), m.group(3)
    if event == "writeback:balance_dirty_pages":
        f = dict(re.findall(r"(\w+)=(-?\d+)", rest))
        pauses.append(int(f.get("pause", 0)))
        ratelimits.add(int(f.get("dirty_ratelimit", 0)))
        continue
    req = re.search(r"req (\d+)", rest).group(1)
    if event.endswith("send"):
        sent[req] = (t, "FUSE_WRITE" in rest)
    elif req in sent:
        start, is_write = sent.pop(req)
        if is_write:
            writes.append((start, t))
edges = sorted([(s, 1) for s, _ in writes] + [(e, -1) for _, e in writes])
hist, depth, last = collections.Counter(), 0, edges[0][0] if edges else 0
for t, d in edges:
    hist[depth] += t - last
    last, depth = t, depth + d
total = sum(hist.values()) or 1
print(f"{cfg}: {bw:.0f} MiB/s, {len(writes)} WRITEs over {total:.3f} s")
print("WRITEs in flight, share of that time: " + ", ".join(f"{k}: {100 * v / total:.0f}%" for k, v in sorted(hist.items()) if v / total >= 0.005))
lat = sorted(e - s for s, e in writes)
if lat:
    print(f"a WRITE from send to reply: median {lat[len(lat) // 2] * 1e3:.2f} ms, p90 {lat[len(lat) * 9 // 10] * 1e3:.2f} ms")
print(f"fio in the dirty throttling: {len(pauses)} events, {sum(p for p in pauses if p > 0)} ms of pauses; dirty_ratelimit seen (KB/s): {sorted(ratelimits)}")
EOF
