#!/bin/bash
# Incremental send: the Linux tree on a volume, a
# snapshot, 1% of its regular files changed (every 100th in sorted order
# gets 100 bytes appended), a second snapshot; then the send of what
# changed, timed with cold caches (page cache dropped before it), and its
# stream's size; the receive of that increment into a mirror that received
# the first snapshot; and, for scale, the full send of the first snapshot.
# btrfs beside it on the same work: the tree in a subvolume, `btrfs
# subvolume snapshot -r`, the same changes, `btrfs send -p` and `btrfs
# receive`. Sparse image files behind loop devices with direct I/O.
# Usage: bench/send_time.sh TREE.tar [RUNS]   (root; under /tmp/sendbench)
set -euo pipefail
TREE=${1:?tree tar}
RUNS=${2:-3}
DUALFS=${DUALFS:-$(realpath "$(dirname "$0")/../target/release/dualfs")}
W=/tmp/sendbench
mkdir -p $W/mnt $W/mirror
LOOPS=""
cleanup() {
  for m in $W/mnt $W/mirror; do fusermount3 -u $m 2>/dev/null || umount $m 2>/dev/null || true; done
  sleep 1
  for l in $LOOPS; do losetup -d "$l" 2>/dev/null || true; done
  rm -f $W/*.img $W/*.stream
}
trap cleanup EXIT
# The result rows also go to the results store (bench/store.py) at the end.
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
store() { python3 "$(dirname "$0")/store.py" add send-time --command "$CMD" $ROWS; }
loop() { losetup --direct-io=on -f --show "$1"; }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# The same 1% of files on both, by path: every 100th regular file.
change() { (cd "$1" && find . -type f | sort | awk 'NR % 100 == 0' | while read -r f; do
  head -c 100 /dev/zero | tr '\0' "$2" >> "$f"; done); }

say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) files: $(tar -tf "$TREE" | grep -vc '/$')"
say "fs run what seconds stream_bytes"

# DualFS: 4 GiB of data, 1 GiB of meta-data; the mirror the same.
truncate -s 1G $W/m.img $W/mm.img; truncate -s 4G $W/d.img $W/md.img
M=$(loop $W/m.img); D=$(loop $W/d.img); MM=$(loop $W/mm.img); MD=$(loop $W/md.img); LOOPS="$M $D $MM $MD"
for dev in "$M $D" "$MM $MD"; do
  for _ in $(seq 1 30); do $DUALFS mkfs $dev >/dev/null 2>&1 && break; sleep 0.5; done
done
$DUALFS mount $M $D $W/mnt
$DUALFS mount $MM $MD $W/mirror
tar -xf "$TREE" -C $W/mnt && $DUALFS sync $W/mnt >/dev/null
$DUALFS snapshot create $W/mnt s0 >/dev/null
cold; t0=$(now); $DUALFS send s0 $W/mnt 2>/dev/null > $W/full.stream; t1=$(now)
say "dualfs 0 full-send $(secs $t0 $t1) $(stat -c %s $W/full.stream)"
t0=$(now); $DUALFS receive --file $W/full.stream $W/mirror >/dev/null; t1=$(now)
say "dualfs 0 full-receive $(secs $t0 $t1) $(stat -c %s $W/full.stream)"
rm -f $W/full.stream
for r in $(seq 1 "$RUNS"); do
  change $W/mnt "$(printf "\\x$(printf %x $((96 + r)))")"
  $DUALFS sync $W/mnt >/dev/null
  $DUALFS snapshot create $W/mnt s$r >/dev/null
  cold; t0=$(now); $DUALFS send --from s$((r - 1)) s$r $W/mnt 2>$W/send.err > $W/inc.stream; t1=$(now)
  say "dualfs $r incremental-send $(secs $t0 $t1) $(stat -c %s $W/inc.stream)  # $(cat $W/send.err)"
  t0=$(now); $DUALFS receive --file $W/inc.stream $W/mirror >/dev/null; t1=$(now)
  say "dualfs $r incremental-receive $(secs $t0 $t1) $(stat -c %s $W/inc.stream)"
done
diff -r $W/mnt $W/mirror >/dev/null && say "# dualfs mirror equals the source"
$DUALFS umount $W/mirror >/dev/null; $DUALFS umount $W/mnt >/dev/null
losetup -d $M $D $MM $MD; LOOPS=""; rm -f $W/*.img $W/*.stream

# btrfs: one 5 GiB device, the mirror a second.
truncate -s 5G $W/b.img $W/bm.img
B=$(loop $W/b.img); BM=$(loop $W/bm.img); LOOPS="$B $BM"
mkfs.btrfs -q -f $B; mkfs.btrfs -q -f $BM
mount $B $W/mnt; mount $BM $W/mirror
btrfs -q subvolume create $W/mnt/sub
tar -xf "$TREE" -C $W/mnt/sub && sync
btrfs -q subvolume snapshot -r $W/mnt/sub $W/mnt/s0
cold; t0=$(now); btrfs -q send $W/mnt/s0 > $W/full.stream; t1=$(now)
say "btrfs 0 full-send $(secs $t0 $t1) $(stat -c %s $W/full.stream)"
t0=$(now); btrfs -q receive $W/mirror < $W/full.stream; t1=$(now)
say "btrfs 0 full-receive $(secs $t0 $t1) $(stat -c %s $W/full.stream)"
rm -f $W/full.stream
for r in $(seq 1 "$RUNS"); do
  change $W/mnt/sub "$(printf "\\x$(printf %x $((96 + r)))")"
  sync -f $W/mnt/sub
  btrfs -q subvolume snapshot -r $W/mnt/sub $W/mnt/s$r
  cold; t0=$(now); btrfs -q send -p $W/mnt/s$((r - 1)) $W/mnt/s$r > $W/inc.stream; t1=$(now)
  say "btrfs $r incremental-send $(secs $t0 $t1) $(stat -c %s $W/inc.stream)"
  t0=$(now); btrfs -q receive $W/mirror < $W/inc.stream; t1=$(now)
  say "btrfs $r incremental-receive $(secs $t0 $t1) $(stat -c %s $W/inc.stream)"
done
umount $W/mirror; umount $W/mnt
losetup -d $B $BM; LOOPS=""
store
