#!/bin/bash
# Writable clones: what making a clone and mounting it cost, on a
# volume holding the Linux tree, on a 1 GiB and a 64 GiB data device (sparse
# image files behind loop devices with direct I/O). Per run:
#  - clone: the whole `dualfs clone MOUNTPOINT s c` command;
#  - mount: `dualfs mount` of the live tree as it is (no switch), command time;
#  - switch: `dualfs mount -o clone=...` (checkpoint of the live tree, the
#    switching checkpoint, then the mount), command time, and the meta-data
#    device's KiB written by it (loop device counters);
#  - back: `dualfs mount -o clone=main` after the clone was written to.
# btrfs beside it: a writable `btrfs subvolume snapshot` of a subvolume
# holding the same tree, and `mount -o subvol=` of it.
# Usage: bench/clone_time.sh TREE.tar [RUNS]   (root; under /tmp/clonebench)
set -euo pipefail
TREE=${1:?tree tar}
RUNS=${2:-3}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/tmp/clonebench
mkdir -p $W/mnt
cleanup() { fusermount3 -u $W/mnt 2>/dev/null || true; umount $W/mnt 2>/dev/null || true
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img $W/files $W/some; }
trap cleanup EXIT
# The result rows also go to the results store (bench/store.py) at the end.
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
store() { python3 "$(dirname "$0")/store.py" add clone-time --phase clone --command "$CMD" $ROWS; }
loop() { losetup --direct-io=on -f --show "$1"; }
now() { date +%s.%N; }
ms() { python3 -c "import sys; print(f'{(float(sys.argv[2]) - float(sys.argv[1])) * 1000:.1f}')" "$1" "$2"; }
# KiB written to loop device $1 so far.
kib() { awk '{print $7 / 2}' /sys/block/$(basename "$1")/stat; }

say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
say "fs data_GiB run clone_ms mount_ms switch_ms switch_meta_KiB back_ms"
for gib in 1 64; do
  meta=$(( gib * 1024 / 10 )); [ $meta -gt 4096 ] && meta=4096
  truncate -s ${meta}M $W/m.img; truncate -s ${gib}G $W/d.img
  M=$(loop $W/m.img); D=$(loop $W/d.img); LOOPS="$M $D"
  for _ in $(seq 1 30); do $DUALFS mkfs $M $D >/dev/null 2>&1 && break; sleep 0.5; done
  $DUALFS mount $M $D $W/mnt
  tar -xf "$TREE" -C $W/mnt && $DUALFS sync $W/mnt >/dev/null
  $DUALFS snapshot create $W/mnt base >/dev/null
  for r in $(seq 1 "$RUNS"); do
    t0=$(now); $DUALFS clone $W/mnt base c$r >/dev/null; t1=$(now)
    clone=$(ms $t0 $t1)
    $DUALFS umount $W/mnt >/dev/null
    t0=$(now); $DUALFS mount $M $D $W/mnt; t1=$(now)
    mount=$(ms $t0 $t1)
    $DUALFS umount $W/mnt >/dev/null
    k0=$(kib $M); t0=$(now); $DUALFS mount -o clone=c$r $M $D $W/mnt; t1=$(now); k1=$(kib $M)
    switch=$(ms $t0 $t1); sw_kib=$(python3 -c "print(round($k1 - $k0))")
    # The clone changes: 200 files rewritten, 50 new.
    find $W/mnt -type f > $W/files; head -200 $W/files > $W/some
    while read -r f; do head -c 4096 /dev/urandom > "$f"; done < $W/some
    for i in $(seq 1 50); do head -c 8000 /dev/urandom > $W/mnt/new-$i; done
    $DUALFS umount $W/mnt >/dev/null
    t0=$(now); $DUALFS mount -o clone=main $M $D $W/mnt; t1=$(now)
    say "dualfs $gib $r $clone $mount $switch $sw_kib $(ms $t0 $t1)"
  done
  $DUALFS umount $W/mnt >/dev/null; losetup -d $M $D; LOOPS=""; rm -f $W/*.img

  truncate -s $(( gib * 1024 + meta ))M $W/d.img
  D=$(loop $W/d.img); LOOPS="$D"
  mkfs.btrfs -q -f $D >/dev/null; mount $D $W/mnt
  btrfs -q subvolume create $W/mnt/sub
  tar -xf "$TREE" -C $W/mnt/sub && sync
  btrfs -q subvolume snapshot -r $W/mnt/sub $W/mnt/base
  umount $W/mnt
  for r in $(seq 1 "$RUNS"); do
    mount $D $W/mnt
    t0=$(now); btrfs -q subvolume snapshot $W/mnt/base $W/mnt/c$r; t1=$(now)
    clone=$(ms $t0 $t1)
    umount $W/mnt
    t0=$(now); mount -o subvol=sub $D $W/mnt; t1=$(now); mount=$(ms $t0 $t1); umount $W/mnt
    k0=$(kib $D); t0=$(now); mount -o subvol=c$r $D $W/mnt; t1=$(now); k1=$(kib $D)
    switch=$(ms $t0 $t1); sw_kib=$(python3 -c "print(round($k1 - $k0))")
    umount $W/mnt
    say "btrfs $gib $r $clone $mount $switch $sw_kib -"
  done
  losetup -d $D; LOOPS=""; rm -f $W/*.img
done
store
