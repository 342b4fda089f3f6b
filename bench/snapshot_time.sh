#!/bin/bash
# Snapshot creation time: a volume holding the Linux
# tree, on a 1 GiB and a 64 GiB data device (sparse image files behind loop
# devices with direct I/O); before each snapshot a few files are written so
# that there is something to commit. Two figures per snapshot:
#  - create: the request that makes it, alone (`strace -T` on the
#    setxattr `dualfs snapshot create` sends through the mount: the commit,
#    the two checkpoints and their flushes, and one FUSE round trip);
#  - command: the whole `dualfs snapshot create` (process start, listing
#    the snapshots, syncfs of the kernel's cached writes, the request).
# btrfs beside it: `btrfs subvolume snapshot -r` of a subvolume holding the
# same tree (the ioctl alone by `strace -T`, and the whole command).
# Usage: bench/snapshot_time.sh TREE.tar [RUNS]   (root; under /tmp/snapbench)
set -euo pipefail
TREE=${1:?tree tar}
RUNS=${2:-5}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/tmp/snapbench
mkdir -p $W/mnt
cleanup() { fusermount3 -u $W/mnt 2>/dev/null || true; umount $W/mnt 2>/dev/null || true
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img; }
trap cleanup EXIT
# The result rows also go to the results store (bench/store.py) at the end.
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
store() { python3 "$(dirname "$0")/store.py" add snapshot-time --phase snapshot-create --command "$CMD" $ROWS; }
loop() { losetup --direct-io=on -f --show "$1"; }
ms() { python3 -c "import sys; print(f'{(float(sys.argv[2]) - float(sys.argv[1])) * 1000:.1f}')" "$1" "$2"; }
# The seconds strace -T reports for the last call named $1 in file $2, in ms.
call_ms() { grep " $1(" "$2" | tail -1 | sed 's/.*<\([0-9.]*\)>$/\1/' | python3 -c "print(f'{float(input()) * 1000:.1f}')"; }
dirty() { for i in $(seq 1 20); do head -c 3000 /dev/urandom > "$1/new-$2-$i"; done; }

say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
say "fs data_GiB run create_ms command_ms"
for gib in 1 64; do
  # DualFS: a meta-data device of a tenth of the data device, at most 4 GiB.
  meta=$(( gib * 1024 / 10 )); [ $meta -gt 4096 ] && meta=4096
  truncate -s ${meta}M $W/m.img; truncate -s ${gib}G $W/d.img
  M=$(loop $W/m.img); D=$(loop $W/d.img); LOOPS="$M $D"
  for _ in $(seq 1 30); do $DUALFS mkfs $M $D >/dev/null 2>&1 && break; sleep 0.5; done
  $DUALFS mount $M $D $W/mnt
  tar -xf "$TREE" -C $W/mnt && $DUALFS sync $W/mnt >/dev/null
  for r in $(seq 1 "$RUNS"); do
    dirty $W/mnt $r; $DUALFS sync $W/mnt >/dev/null
    t0=$(date +%s.%N)
    strace -f -T -e trace=setxattr -o $W/trace $DUALFS snapshot create $W/mnt s$r >/dev/null
    t1=$(date +%s.%N)
    say "dualfs $gib $r $(call_ms setxattr $W/trace) $(ms $t0 $t1)"
  done
  $DUALFS umount $W/mnt; losetup -d $M $D; LOOPS=""; rm -f $W/*.img

  truncate -s $(( gib * 1024 + meta ))M $W/d.img
  D=$(loop $W/d.img); LOOPS="$D"
  mkfs.btrfs -q -f $D; mount $D $W/mnt
  btrfs -q subvolume create $W/mnt/sub
  tar -xf "$TREE" -C $W/mnt/sub && sync
  for r in $(seq 1 "$RUNS"); do
    dirty $W/mnt/sub $r; sync -f $W/mnt/sub
    t0=$(date +%s.%N)
    strace -f -T -e trace=ioctl -o $W/trace btrfs -q subvolume snapshot -r $W/mnt/sub $W/mnt/s$r
    t1=$(date +%s.%N)
    say "btrfs $gib $r $(call_ms ioctl $W/trace) $(ms $t0 $t1)"
  done
  umount $W/mnt; losetup -d $D; LOOPS=""; rm -f $W/*.img
done
store
