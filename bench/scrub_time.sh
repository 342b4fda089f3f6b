#!/bin/bash
# What a scrub of the suite's Linux subset costs: DualFS unmounted, DualFS
# mounted (in the serving process) and `btrfs scrub start -B`, each on a
# cold cache (loop devices with direct I/O over image files, caches
# dropped after the mount), interleaved round by round. Prints one row per
# run for `bench/store.py add scrub-time` (CONFIG PHASE key=value: wall
# seconds, MiB read from the devices, MiB/s), each after a comment line.
# btrfs reads its data and both copies of its meta-data (mkfs defaults:
# DUP meta-data); DualFS its one meta-data copy and its data, and
# dualfs-mirror (mkfs --meta-mirror, the copies on two loop devices) both
# meta-data copies and its data, and then its meta-data alone
# (`--meta-only`: phases unmounted-meta, mounted-meta), where the second
# copy's share is largest.
# CONFIGS picks the configurations (default: all three). BUILDS compares
# DualFS binaries on the mirrored volume: "NAME=BINARY ..." (default
# "dualfs-mirror=$DUALFS"), each NAME a configuration; each round runs
# them on the same volume, in turn, the order reversed every other round.
# Usage: bench/scrub_time.sh [ROUNDS] [TAR]   (root)
set -euo pipefail
ROUNDS=${1:-3}
TAR=${2:-/var/tmp/dualfs-bench/src/linux.tar}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=${W:-/var/tmp/scrub-bench}
mkdir -p $W/mnt
. "$(dirname "$0")/loops.sh"
trap cleanup EXIT
[ -f "$TAR" ] || { echo "no $TAR: run bench/suite.py once (it makes it), or name a tar" >&2; exit 2; }

rsect() { awk '{print $3}' /sys/block/$(basename $1)/stat; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# timed CONFIG PHASE DEVS -- CMD...: runs CMD, prints its row.
timed() {
  local cfg=$1 phase=$2 devs=$3; shift 4
  local s0=0 s1=0 t0 t1
  for d in $devs; do s0=$((s0 + $(rsect $d))); done
  t0=$(now); "$@" > $W/out.txt 2>&1 || [ $? -le 1 ] || { cat $W/out.txt >&2; exit 1; }; t1=$(now)
  for d in $devs; do s1=$((s1 + $(rsect $d))); done
  python3 - "$cfg" "$phase" "$t0" "$t1" $((s1 - s0)) $W/out.txt <<'PY'
import json, sys
cfg, phase, t0, t1, sect = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
s, mib = t1 - t0, sect * 512 / 2**20
# DualFS's own time for the scrub (its report's micros): a mounted scrub's
# command polls the mount every 100 ms, which its wall time includes.
try:
    own = f" scrub_s={json.load(open(sys.argv[6]))['report']['micros'] / 1e6:.3f}"
except (ValueError, KeyError, TypeError):
    own = ""
print(f"# {cfg:7} {phase:9} {s:6.2f} s  {mib:7.1f} MiB read  {mib / s:7.0f} MiB/s{own}")
print(f"{cfg} {phase} wall_s={s:.3f} read_mib={mib:.1f} mib_s={mib / s:.1f}{own}")
PY
}

dualfs() {
  cleanup; LOOPS=""
  truncate -s 512M $W/m.img; truncate -s 4G $W/d.img
  M=$(loop $W/m.img); D=$(loop $W/d.img); LOOPS="$M $D"
  $DUALFS mkfs -f $M $D >/dev/null
  $DUALFS mount $M $D $W/mnt; tar xf "$TAR" -C $W/mnt; $DUALFS umount $W/mnt >/dev/null
  cold; timed dualfs unmounted "$M $D" -- $DUALFS scrub --json $M $D
  $DUALFS mount $M $D $W/mnt; cold
  timed dualfs mounted "$M $D" -- $DUALFS scrub --json $W/mnt
  $DUALFS umount $W/mnt >/dev/null
}

# mirror_scrubs NAME BINARY: the four scrubs of the mirrored volume.
mirror_scrubs() {
  local cfg=$1 bin=$2
  cold; timed $cfg unmounted "$M $M2 $D" -- $bin scrub --json --meta-mirror $M2 $M $D
  cold; timed $cfg unmounted-meta "$M $M2 $D" -- $bin scrub --json --meta-only --meta-mirror $M2 $M $D
  $bin mount -o mirror=$M2 $M $D $W/mnt; cold
  timed $cfg mounted "$M $M2 $D" -- $bin scrub --json $W/mnt
  cold; timed $cfg mounted-meta "$M $M2 $D" -- $bin scrub --json --meta-only $W/mnt
  $bin umount $W/mnt >/dev/null
}

dualfs_mirror() {
  cleanup; LOOPS=""
  truncate -s 512M $W/m.img; truncate -s 512M $W/m2.img; truncate -s 4G $W/d.img
  M=$(loop $W/m.img); M2=$(loop $W/m2.img); D=$(loop $W/d.img); LOOPS="$M $M2 $D"
  $DUALFS mkfs -f --meta-mirror $M2 $M $D >/dev/null
  $DUALFS mount -o mirror=$M2 $M $D $W/mnt; tar xf "$TAR" -C $W/mnt; $DUALFS umount $W/mnt >/dev/null
  local builds=$BUILDS
  if [ $((ROUND % 2)) = 1 ]; then builds=$(echo $BUILDS | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for b in $builds; do mirror_scrubs "${b%%=*}" "${b#*=}"; done
}

btrfs_() {
  cleanup; LOOPS=""
  truncate -s 4608M $W/d.img; D=$(loop $W/d.img); LOOPS="$D"
  mkfs.btrfs -q -f $D 2>/dev/null; mount $D $W/mnt; tar xf "$TAR" -C $W/mnt; umount $W/mnt
  mount $D $W/mnt; cold
  timed btrfs mounted "$D" -- btrfs scrub start -B $W/mnt
  umount $W/mnt
}

echo "# $(uptime)"
CONFIGS=${CONFIGS:-dualfs dualfs_mirror btrfs_}
BUILDS=${BUILDS:-dualfs-mirror=$DUALFS}
for ROUND in $(seq 1 $ROUNDS); do for c in $CONFIGS; do $c; done; done
echo "# $(uptime)"
