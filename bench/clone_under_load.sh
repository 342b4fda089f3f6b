#!/bin/bash
# A clone made while the origin is under load: PostMark runs on the
# mounted volume, and every 2 s a snapshot of it is made and a writable
# clone of that snapshot (`dualfs snapshot create`, then `dualfs clone`,
# each through the mount point), against PostMark alone. Per run:
#   alone   PostMark's transactions per second, nothing else
#   kept    PostMark's transactions per second while clones are made and
#           kept (a snapshot and a clone more every 2 s), how many were
#           made, and the median and largest time of a snapshot and of a
#           clone command (ms)
#   dropped the same, each clone and its snapshot deleted before the next
#           (one of each at a time)
#   listed  the same commands' own cost: `dualfs snapshot list` twice every
#           2 s through the mount point, nothing made (in CONFIGS only)
#   synced  the write-back alone: `dualfs sync` every 2 s, nothing made, no
#           snapshot ever (in CONFIGS only; its time in the snapshot columns)
# and what the volume wrote during PostMark (dualfs stats): MiB of data,
# of it MiB written by commits someone asked for (sync, snapshots), MiB
# of meta-data, checkpoints.
# Interleaved by run; CONFIGS (default "alone kept dropped") picks them.
# Usage: bench/clone_under_load.sh [RUNS] [TRANSACTIONS]
# (root; under /tmp/clonebusy)
set -euo pipefail
RUNS=${1:-2}
TX=${2:-20000}
CONFIGS=${CONFIGS:-alone kept dropped}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/tmp/clonebusy
mkdir -p $W/mnt
cleanup() {
  "$DUALFS" umount $W/mnt >/dev/null 2>&1 || true; sleep 1
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img
}
trap cleanup EXIT
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
loop() { losetup --direct-io=on -f --show "$1"; }
now() { date +%s.%N; }
ms() { python3 -c "import sys; print(f'{(float(sys.argv[2]) - float(sys.argv[1])) * 1000:.1f}')" "$1" "$2"; }
truncate -s 410M $W/m.img; truncate -s 4G $W/d.img
M=$(loop $W/m.img); D=$(loop $W/d.img); LOOPS="$M $D"
postmark_tps() { # runs PostMark on the mount; prints its transactions per second
  mkdir -p $W/mnt/pm
  printf "set location $W/mnt/pm\nset number 5000\nset subdirectories 50\nset transactions $TX\nset size 512 16384\nset read 512\nset write 512\nset buffering false\nrun\nquit\n" \
    | (cd /tmp && postmark) | sed -n 's/.*transactions (\([0-9.]*\) per second).*/\1/p' | head -1
}
say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
# What the volume wrote since it was mounted: data MiB, of it by sync, meta MiB, checkpoints.
written() { "$DUALFS" stats --json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); m=lambda b: f"{b * 4 / 1024:.0f}"; print(m(d["data_blocks_written"]), m(d.get("data_blocks_by_sync", 0)), m(d["meta_blocks_written"]), d["checkpoints_written"])'; }
say "fs run tx_per_s clones snapshot_ms_p50 snapshot_ms_max clone_ms_p50 clone_ms_max data_MiB sync_data_MiB meta_MiB checkpoints"
for run in $(seq 1 "$RUNS"); do
  for fs in $CONFIGS; do
    "$DUALFS" mkfs --force "$M" "$D" >/dev/null
    "$DUALFS" mount "$M" "$D" $W/mnt
    if [ $fs = alone ]; then
      tps=$(postmark_tps)
      say "alone $run $tps 0 - - - - $(written $W/mnt)"
    else
      postmark_tps > $W/tps & p=$!
      : > $W/times; k=0
      sleep 2
      while kill -0 $p 2>/dev/null; do
        k=$((k + 1))
        if [ $fs = listed ]; then
          t0=$(now); "$DUALFS" snapshot list $W/mnt >/dev/null; t1=$(now)
          "$DUALFS" snapshot list $W/mnt >/dev/null; t2=$(now)
        elif [ $fs = synced ]; then
          t0=$(now); "$DUALFS" sync $W/mnt >/dev/null; t1=$(now); t2=$t1
        else
          t0=$(now); "$DUALFS" snapshot create $W/mnt s$k >/dev/null; t1=$(now)
          "$DUALFS" clone $W/mnt s$k c$k >/dev/null; t2=$(now)
        fi
        echo "$(ms $t0 $t1) $(ms $t1 $t2)" >> $W/times
        if [ $fs = dropped ]; then
          "$DUALFS" snapshot delete $W/mnt c$k >/dev/null; "$DUALFS" snapshot delete $W/mnt s$k >/dev/null
        fi
        sleep 2
      done
      wait $p
      stats=$(python3 -c 'import sys, statistics as s
r = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
if not r: print("0 - - - -"); sys.exit()
a, b = [x[0] for x in r], [x[1] for x in r]
print(len(r), f"{s.median(a):.1f} {max(a):.1f} {s.median(b):.1f} {max(b):.1f}")' $W/times)
      say "$fs $run $(cat $W/tps) $stats $(written $W/mnt)"
    fi
    "$DUALFS" umount $W/mnt >/dev/null
    for _ in $(seq 1 100); do pgrep -f "dualfs.*$W/mnt" >/dev/null || break; sleep 0.1; done
  done
done
say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$(dirname "$0")/store.py" add clone-under-load --phase postmark --command "$CMD" < $ROWS
