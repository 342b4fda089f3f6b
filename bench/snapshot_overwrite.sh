#!/bin/bash
# 4 KiB random overwrites of a 1 GiB file, with and without a snapshot:
# IOPS, and the data device's write requests and bytes
# per run (loop device counters), on a volume of sparse images behind loop
# devices with direct I/O. The same 32,768 offsets every run (randrepeat),
# then fsync. Runs: no snapshot (twice), right after a snapshot (every block
# held: each goes to a new block), again (the new blocks, in place), after
# deleting the snapshot; `df` used bytes before the snapshot and after its
# deletion, which must be equal.
# Usage: bench/snapshot_overwrite.sh   (root; under /tmp/owbench)
set -euo pipefail
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/tmp/owbench
mkdir -p $W/mnt
cleanup() { fusermount3 -u $W/mnt 2>/dev/null || true
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img; }
trap cleanup EXIT
# The result rows also go to the results store (bench/store.py) at the end.
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
store() { python3 "$(dirname "$0")/store.py" add snapshot-overwrite --command "$CMD" $ROWS; }
truncate -s 400M $W/m.img; truncate -s 4G $W/d.img
M=$(losetup --direct-io=on -f --show $W/m.img); D=$(losetup --direct-io=on -f --show $W/d.img); LOOPS="$M $D"
for _ in $(seq 1 30); do $DUALFS mkfs $M $D >/dev/null 2>&1 && break; sleep 0.5; done
$DUALFS mount $M $D $W/mnt
# Writes and KiB written to the data device so far.
counters() { awk '{print $5, $7 / 2}' /sys/block/$(basename $D)/stat; }
used() { df -B1 --output=used $W/mnt | tail -1; }
dd if=/dev/urandom of=$W/mnt/file bs=1M count=1024 status=none conv=fsync
$DUALFS sync $W/mnt >/dev/null
run() {
  read -r w0 k0 < <(counters)
  iops=$(fio --name=ow --filename=$W/mnt/file --rw=randwrite --bs=4k --size=1g --io_size=128m \
    --randrepeat=1 --ioengine=psync --end_fsync=1 --output-format=json | python3 -c \
    "import json,sys; print(round(json.load(sys.stdin)['jobs'][0]['write']['iops']))")
  $DUALFS sync $W/mnt >/dev/null
  read -r w1 k1 < <(counters)
  say "$1 $iops $((w1 - w0)) $(python3 -c "print(round(($k1 - $k0) / 1024))")"
}
say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 32,768 overwrites = 128 MiB"
say "run iops data_write_requests data_MiB_written"
run no-snapshot
run no-snapshot-again
before=$(used)
$DUALFS snapshot create $W/mnt s >/dev/null
run first-after-snapshot
run second-after-snapshot
$DUALFS snapshot delete $W/mnt s >/dev/null
$DUALFS sync $W/mnt >/dev/null
after=$(used)
run after-delete
echo "df used before the snapshot $before, after deleting it $after"
$DUALFS umount $W/mnt >/dev/null
store
