#!/bin/bash
# What a lone 4 KiB fsync costs: fio appends 4 KiB and fsyncs, one at a
# time, on DualFS with twins (a volume made by this mkfs, format 1.8), on
# DualFS without them (a volume made by OLD_DUALFS's mkfs, format 1.7,
# mounted by this binary: same code, the feature off), on DualFS with a
# mirrored meta-data device (mkfs --meta-mirror, a third loop device) and
# on ext4, each on loop devices with direct I/O over image files,
# interleaved round by round. Prints one row per run for `bench/store.py
# add lone-fsync` (CONFIG lone-fsync key=value ...: latency mean, p50 and
# p99 in µs; what the devices wrote per fsync: requests, flushes, KiB),
# each after a comment line for people.
# "mirror-base" is the mirrored volume served by another build (DUALFS_BASE), for an A/B in one run.
# Usage: OLD_DUALFS=/path/to/1.7/dualfs [KINDS="twins single mirror ext4"] bench/lone_fsync.sh [ROUNDS] [N]   (root)
set -euo pipefail
ROUNDS=${1:-3}
N=${2:-2000}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
OLD_DUALFS=${OLD_DUALFS:?a dualfs whose mkfs writes format 1.7}
W=${W:-/var/tmp/lone-fsync-bench}
mkdir -p $W/mnt
. "$(dirname "$0")/loops.sh"
trap cleanup EXIT

reqs() { awk '{print $5}' /sys/block/$(basename $1)/stat; }
flushes() { awk '{print $16}' /sys/block/$(basename $1)/stat; }

# run FS: one fio run of N 4 KiB appends, each fsync'd.
run() {
  local fs=$1 devs
  cleanup; LOOPS=""
  truncate -s 256M $W/m.img $W/mm.img; truncate -s 1G $W/d.img
  M=$(loop $W/m.img); D=$(loop $W/d.img); MM=$(loop $W/mm.img); LOOPS="$M $D $MM"
  case $fs in
    mirror|mirror-base)
      local bin=$DUALFS; [ $fs = mirror-base ] && bin=${DUALFS_BASE:?another dualfs build, for mirror-base}
      for _ in $(seq 1 30); do $bin mkfs -f --meta-mirror $MM $M $D >/dev/null 2>&1 && break; sleep 0.5; done
      $bin mount -o mirror=$MM $M $D $W/mnt; devs="$M $D $MM" ;;
    twins|single)
      local mk=$DUALFS; [ $fs = single ] && mk=$OLD_DUALFS
      for _ in $(seq 1 30); do $mk mkfs -f $M $D >/dev/null 2>&1 && break; sleep 0.5; done
      $DUALFS mount $M $D $W/mnt; devs="$M $D" ;;
    ext4)
      mkfs.ext4 -q -F $D; mount $D $W/mnt; devs="$D" ;;
  esac
  sync; sleep 1
  local r0=0 s0=0 r1=0 s1=0 f0=0 f1=0
  for d in $devs; do r0=$((r0 + $(reqs $d))); s0=$((s0 + $(wsect $d))); f0=$((f0 + $(flushes $d))); done
  fio --name=lone --filename=$W/mnt/f --rw=write --bs=4k --size=$((N * 4))k --fsync=1 \
      --ioengine=sync --output-format=json > $W/fio.json
  for d in $devs; do r1=$((r1 + $(reqs $d))); s1=$((s1 + $(wsect $d))); f1=$((f1 + $(flushes $d))); done
  python3 - "$fs" "$N" $((r1 - r0)) $((s1 - s0)) $W/fio.json $((f1 - f0)) <<'EOF'
import json, sys
fs, n, req, sect, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
fl = int(sys.argv[6])
job = json.load(open(path))["jobs"][0]
s = job["sync"]["lat_ns"]
w = job["write"]["clat_ns"]
# fio's sync latency is the fsync alone; add the write's for the whole op.
mean = (s["mean"] + w["mean"]) / 1000
p = s.get("percentile", {})
print(f"{fs} lone-fsync mean_us={mean:.1f} fsync_us={s['mean']/1000:.1f} write_us={w['mean']/1000:.1f} "
      f"p50_us={p.get('50.000000', 0)/1000:.1f} p99_us={p.get('99.000000', 0)/1000:.1f} n={n} "
      f"write_req_per_fsync={req/n:.3f} flushes_per_fsync={fl/n:.3f} kib_per_fsync={sect*512/1024/n:.2f}")
print(f"# {fs:7} fsync mean {mean:8.1f} µs (fsync {s['mean']/1000:.1f}, write {w['mean']/1000:.1f}) "
      f"p50 {p.get('50.000000', 0)/1000:8.1f} p99 {p.get('99.000000', 0)/1000:8.1f} µs "
      f"{1e6/mean:7.0f} fsync/s  {req/n:5.2f} write req/fsync  {fl/n:5.2f} flushes/fsync  {sect*512/1024/n:6.1f} KiB/fsync")
EOF
}

echo "# $(uptime)"
for r in $(seq 1 $ROUNDS); do
  for fs in ${KINDS:-twins single mirror ext4}; do run $fs; done
done
echo "# $(uptime)"
