#!/bin/bash
# Migrate benchmark: move the meta-data device, or the data
# device, of a DualFS volume holding the Linux tree to another device while
# mounted, idle or while a second `tar -x` of the tree runs into it; the
# same with `btrfs replace start -B` (one device, moved whole) for
# reference. Loop devices with direct I/O on image files under
# /var/tmp/migrate-bench; "MiB to new" is the new loop device's written
# sectors while the command runs. After each DualFS run the new pair is
# unmounted and checked with fsck.
# Usage: [BASELINE=1] bench/migrate.sh TREE.tar [RUNS]   (root)
set -euo pipefail
TREE=${1:?tree tar}
RUNS=${2:-3}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/var/tmp/migrate-bench
mkdir -p $W/mnt
. "$(dirname "$0")/loops.sh"
trap cleanup EXIT
# The result rows also go to the results store (bench/store.py) at the end.
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
store() { python3 "$(dirname "$0")/store.py" add migrate --command "$CMD" $ROWS; }

# run FS WHAT LOAD: prints seconds, MiB written to the new device, copied
# and mirrored MiB (DualFS), and the tar's seconds.
run() {
  local fs=$1 what=$2 load=$3
  cleanup; LOOPS=""
  case $fs in
    dualfs)
      truncate -s 512M $W/m.img $W/nm.img; truncate -s 1G $W/d.img $W/nd.img
      M=$(loop $W/m.img); D=$(loop $W/d.img); NM=$(loop $W/nm.img); ND=$(loop $W/nd.img)
      LOOPS="$M $D $NM $ND"
      for _ in $(seq 1 30); do $DUALFS mkfs $M $D >/dev/null 2>&1 && break; sleep 0.5; done
      $DUALFS mount $M $D $W/mnt ;;
    btrfs)
      truncate -s 1G $W/d.img $W/nd.img
      D=$(loop $W/d.img); ND=$(loop $W/nd.img); LOOPS="$D $ND"
      mkfs.btrfs -q -f $D; mount $D $W/mnt ;;
  esac
  mkdir $W/mnt/a $W/mnt/b
  tar -xf $TREE -C $W/mnt/a
  if [ $fs = dualfs ]; then $DUALFS sync $W/mnt >/dev/null; else sync; fi
  local t0=$(now)
  if [ $load = idle ]; then true & else tar -xf $TREE -C $W/mnt/b & fi
  local tarpid=$!
  [ $load = idle ] || sleep 1
  local new=$ND; [ $what = meta ] && new=$NM
  local w0=$(wsect $new) r0=$(now) extra=""
  if [ $what = none ]; then :
  elif [ $fs = dualfs ]; then
    $DUALFS migrate --$what $new $W/mnt --json > $W/report.json
  else
    btrfs replace start -B $D $ND $W/mnt
  fi
  local r1=$(now) w1=$(wsect $new)
  if [ $what != none ] && [ $fs = dualfs ]; then
    extra=$(python3 -c "import json; r=json.load(open('$W/report.json'))['result']; \
print('copied=%.1f mirrored=%.1f engine_s=%.3f' % (r['copied_blocks'] / 256, r['mirrored_blocks'] / 256, r['micros'] / 1e6))")
  fi
  wait $tarpid || true
  local t1=$(now)
  say "$(printf "%s %s-%s secs=%.3f new_MiB=%.1f %s tar_s=%.2f\n" $fs $what $load \
    $(echo "$r1 - $r0" | bc) $(echo "($w1 - $w0) * 512 / 1048576" | bc -l) "$extra" \
    $(echo "$t1 - $t0" | bc))"
  if [ $fs = dualfs ]; then
    $DUALFS umount $W/mnt >/dev/null
    case $what in
      meta) $DUALFS fsck $NM $D >/dev/null ;;
      data) $DUALFS fsck $M $ND >/dev/null ;;
      none) $DUALFS fsck $M $D >/dev/null ;;
    esac
  else
    umount $W/mnt
  fi
}

# BASELINE=1: the tar alone, no migration, for its time.
if [ -n "${BASELINE:-}" ]; then
  for r in $(seq 1 $RUNS); do run dualfs none tar; run btrfs none tar; done
  store
  exit 0
fi
for r in $(seq 1 $RUNS); do
  for load in idle tar; do
    run dualfs meta $load
    run dualfs data $load
    run btrfs data $load
  done
done
store
