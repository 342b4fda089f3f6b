#!/bin/bash
# Resize benchmark: grow a volume holding the Linux tree
# while a tar of the tree is extracted into it, DualFS (dualfs resize, online,
# both devices) against ext4 (resize2fs, online grow) and XFS (xfs_growfs);
# then DualFS's log shrink (ext4 and XFS cannot shrink online). ext4 grows
# offline (see below). With a third argument `data`, the data-device shrink
# only: DualFS online (1 GiB to 512 MiB, the tree spread over all its
# groups) against ext4's resize2fs, which shrinks offline only (umount,
# e2fsck -f, resize2fs, mount); XFS cannot shrink at all. Loop devices
# with direct I/O on image files; bytes written are the loop devices'
# /sys/block/loopN/stat sectors during the resize command.
# Usage: bench/resize.sh TREE.tar [RUNS] [data]   (root; under /tmp/rszbench)
set -euo pipefail
TREE=${1:?tree tar}
RUNS=${2:-3}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/tmp/rszbench/work
mkdir -p $W/mnt
. "$(dirname "$0")/loops.sh"
trap cleanup EXIT
# The result rows also go to the results store (bench/store.py) at the end.
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
store() { python3 "$(dirname "$0")/store.py" add resize --command "$CMD" $ROWS; }

# One run: make FS, extract the tree once, start a second extract into
# another directory, grow (or shrink) after 1 s, wait; print the resize's
# seconds and MiB written, and the tar's seconds.
run() {
  local fs=$1 how=$2
  LOOPS=""; MOVED=""
  case $fs in
    dualfs)
      truncate -s 512M $W/m.img; truncate -s 1G $W/d.img
      M=$(loop $W/m.img); D=$(loop $W/d.img); LOOPS="$M $D"
      # A loop device just detached may still be held a moment.
      for _ in $(seq 1 30); do $DUALFS mkfs $M $D >/dev/null 2>&1 && break; sleep 0.5; done
      $DUALFS mount $M $D $W/mnt ;;
    ext4)
      truncate -s 1G $W/d.img; D=$(loop $W/d.img); LOOPS="$D"; M=$D
      mkfs.ext4 -q -F $D; mount $D $W/mnt ;;
    xfs)
      truncate -s 1G $W/d.img; D=$(loop $W/d.img); LOOPS="$D"; M=$D
      mkfs.xfs -q -f $D; mount $D $W/mnt ;;
  esac
  mkdir $W/mnt/a $W/mnt/b
  tar -xf $TREE -C $W/mnt/a
  [ $fs = dualfs ] && $DUALFS sync $W/mnt >/dev/null || sync
  local t0=$(now)
  # "idle": the resize alone, nothing else written meanwhile.
  if [ "${3:-}" = idle ]; then true & else tar -xf $TREE -C $W/mnt/b & fi
  local tarpid=$!
  sleep 1
  local w0=$(( $(wsect $M) + $( [ $M != $D ] && wsect $D || echo 0) ))
  local r0=$(now)
  if [ "$how" = none ]; then :
  elif [ $fs = dualfs ] && [ "$how" = shrink ]; then
    $DUALFS resize $W/mnt --meta 192M >/dev/null
  elif [ $fs = dualfs ] && [ "$how" = shrinkdata ]; then
    $DUALFS resize $W/mnt --data 512M --json > $W/report.json
    MOVED="moved_MiB=$(python3 -c "import json; r=json.load(open('$W/report.json'))['result']; \
print('%.1f files=%d scan_ms=%d' % (r['data_blocks_moved'] / 256, r['data_files_moved'], r['data_scan_ms']))")"
  elif [ $fs = ext4 ] && [ "$how" = shrinkdata ]; then
    # Offline only: after the tar, unmounted, checked (resize2fs demands it).
    wait $tarpid; umount $W/mnt; e2fsck -f -y $D >/dev/null 2>&1 || true
    resize2fs $D 512M > $W/r2fs.txt 2>&1; mount $D $W/mnt
  else
    truncate -s 2G $W/d.img; losetup -c $D
    case $fs in
      dualfs) truncate -s 768M $W/m.img; losetup -c $M; $DUALFS resize $W/mnt >/dev/null ;;
      # Online resize2fs is refused on this VM (EPERM: the ioctl needs
      # CAP_SYS_RESOURCE, which the sandbox withholds): ext4 grows offline,
      # after the tar, unmounted (the time includes umount and mount).
      ext4) wait $tarpid; umount $W/mnt; resize2fs $D >/dev/null 2>&1; mount $D $W/mnt ;;
      xfs) xfs_growfs $W/mnt >/dev/null ;;
    esac
  fi
  local r1=$(now)
  local w1=$(( $(wsect $M) + $( [ $M != $D ] && wsect $D || echo 0) ))
  wait $tarpid || true
  local t1=$(now)
  local size=$(df -B1M --output=size $W/mnt | tail -1)
  if [ $fs = dualfs ]; then $DUALFS umount $W/mnt >/dev/null; $DUALFS fsck $M $D >/dev/null; else umount $W/mnt; fi
  for l in $LOOPS; do losetup -d $l; done; LOOPS=""
  rm -f $W/*.img
  say "$(printf '%s %s%s resize_s=%.3f resize_MiB_written=%.2f tar_s=%.2f size_after_MiB=%s %s\n' $fs $how \
    "${3:+-$3}" $(echo "$r1 - $r0" | bc) $(echo "($w1 - $w0) / 2048" | bc -l) $(echo "$t1 - $t0" | bc) $size "$MOVED")"
}

echo "# $(date -u) $(uptime)"
if [ "${3:-}" = data ]; then
  for i in $(seq 1 $RUNS); do
    for fs in dualfs ext4; do run $fs shrinkdata; done
  done
  for fs in dualfs ext4; do run $fs shrinkdata idle; done
  echo "# $(uptime)"
  store
  exit 0
fi
for i in $(seq 1 $RUNS); do
  for fs in dualfs ext4 xfs; do run $fs none; run $fs grow; done
  run dualfs shrink
done
for fs in dualfs ext4 xfs; do run $fs grow idle; done
run dualfs shrink idle
echo "# $(uptime)"
store
