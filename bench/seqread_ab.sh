#!/bin/bash
# The suite's cold 1 GiB sequential read (fio psync, bs=1M) outside the
# suite, for A/B runs: ext4 and DualFS builds interleaved on the suite's
# loop devices (direct I/O), one 1 GiB file written + fsynced in one mount
# and read after a remount with the page cache dropped. Prints MiB/s and
# the data device's read requests and sectors for each run.
#
#   CFGS="ext4 new:/path/to/release: old:/other/release:threads=8" REPS=5 bench/seqread_ab.sh
#
# A DualFS entry is NAME:BINDIR:MOUNT_OPTIONS[:ENV=VALUE]. TRACE=1 records
# the last run's FUSE and block-layer events and the server's system calls
# into $W/trace.data, to split with bench/seqread_split.py.
set -u
W=${W:-/var/tmp/seqread}; mkdir -p $W/mnt
[ -f $W/meta.img ] || { truncate -s 408M $W/meta.img; truncate -s 3688M $W/data.img; }
M=$(losetup --direct-io=on -f --show $W/meta.img); D=$(losetup --direct-io=on -f --show $W/data.img)
trap 'umount $W/mnt 2>/dev/null; losetup -d $M; losetup -d $D' EXIT
FIO="fio --output-format=terse --terse-version=3 --directory=$W/mnt --ioengine=psync --name=seqr --bs=1M --size=1024M"
mount_fs() {
  if [ "$1" = ext4 ]; then mount -o noatime $D $W/mnt; else env $EV $B/dualfs mount -o noatime${OPTS:+,$OPTS} $M $D $W/mnt; fi
}
umount_fs() {
  if [ "$1" = ext4 ]; then umount $W/mnt; else $B/dualfs umount $W/mnt >/dev/null; fi
}
for rep in $(seq ${REPS:-3}); do
  for cfg in ${CFGS:-ext4}; do
    name=ext4 B= OPTS= EV=
    if [ $cfg = ext4 ]; then mkfs.ext4 -q -F $D; else
      IFS=: read name B OPTS EV <<<"$cfg"; $B/dualfs mkfs -f $M $D >/dev/null 2>&1; fi
    kind=$([ $cfg = ext4 ] && echo ext4 || echo dualfs)
    mount_fs $kind
    $FIO --rw=write --end_fsync=1 >/dev/null
    umount_fs $kind; mount_fs $kind
    sync; echo 3 > /proc/sys/vm/drop_caches
    conn=$(stat -c %d $W/mnt)
    r0=$(awk '{print $1, $3}' /sys/block/$(basename $D)/stat)
    if [ -n "${TRACE:-}" ]; then
      perf record -q -a -o $W/trace.data -e fuse:fuse_request_send -e fuse:fuse_request_end \
        -e block:block_rq_issue -e block:block_rq_complete -e syscalls:sys_enter_pread64 \
        -e syscalls:sys_exit_pread64 -e syscalls:sys_enter_writev -e syscalls:sys_exit_writev 2>/dev/null &
      hp=$!; sleep 0.5
    fi
    bw=$($FIO --rw=read | awk -F';' '{print $7}')
    [ -n "${TRACE:-}" ] && { kill -INT $hp; wait $hp 2>/dev/null; }
    r1=$(awk '{print $1, $3}' /sys/block/$(basename $D)/stat)
    set -- $r0 $r1
    echo "$name rep$rep read $((bw / 1024)) MiB/s data reads $(($3 - $1)) sectors $(($4 - $2)) load $(cut -d' ' -f1 /proc/loadavg) loop $(printf "%d,%d" $(stat -c "0x%t 0x%T" $D)) conn $conn"
    umount_fs $kind
  done
done
