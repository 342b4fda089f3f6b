#!/bin/bash
# Two writable trees of one volume in use at once (a clone mounted beside the
# mounted volume with -o clone=, served by its process; trees take turns,
# DESIGN.md "Writable trees beside the live one"), against one tree written
# as much:
#   two   the live tree on A and clone c on B, TREE.tar untarred into each at once
#   one   the live tree on A alone, TREE.tar untarred twice into it at once
# Per run: wall seconds to the end of `dualfs sync` of both mounts, and the volume's own counters
# (dualfs stats): partial segments (write requests to the log), KiB written
# to each device, checkpoints (two per switch of the live tree).
# Then the latency of fsync in tree A (4 KiB appended, then fsync; 40 times,
# 50 ms apart) with tree B idle, and while B streams (dd of 1 GiB, again and
# again until the fsyncs end: one dd alone mostly ends in the page cache),
# and while B untars TREE (b-untars); what those fsyncs cost B's untar
# (phase untar-beside-fsync: seconds to the end of `dualfs sync` of B,
# alone and beside them; the fsyncs outlast the untar), and to B writing
# 2 GiB (rows stream-b, the same way).
# With DUALFS_BASE=PATH, every row runs with that build too, interleaved
# (rows named fs@base against fs@new); BUILDS="LABEL=PATH ..." names any
# set of builds (a PATH may be a script that sets the environment and
# runs a build).
# FSYNC_RUNS (default RUNS) sets the fsync runs apart; RUNS=0 runs the
# fsyncs alone. A build that counts the turns (dualfs stats tree_*) adds
# where the time went during each fsync run (phase fsync-turns).
# Usage: bench/trees_beside.sh TREE.tar [RUNS]   (root; under /tmp/treesbench)
set -euo pipefail
TREE=${1:?tree tar}
RUNS=${2:-3}
FSYNC_RUNS=${FSYNC_RUNS:-$RUNS}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
if [ -z "${BUILDS:-}" ]; then
  BUILDS="new=$DUALFS"
  if [ -n "${DUALFS_BASE:-}" ]; then BUILDS="$BUILDS base=$DUALFS_BASE"; fi
fi
# One build: rows named by the configuration alone.
several=$(( $(wc -w <<< "$BUILDS") > 1 ))
name() { if [ $several = 1 ]; then echo "$1@$2"; else echo "$1"; fi; }
W=/tmp/treesbench
mkdir -p $W/a $W/b
cleanup() {
  "$DUALFS" umount $W/b >/dev/null 2>&1 || true; "$DUALFS" umount $W/a >/dev/null 2>&1 || true
  sleep 1
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img
}
trap cleanup EXIT
ROWS=$W/rows.txt; : > $ROWS; FROWS=$W/fsync.txt; : > $FROWS; CMD="$0 $*"
say() { local f=$1; shift; echo "$*" >> "$f"; echo "$*"; }
loop() { losetup --direct-io=on -f --show "$1"; }
now() { date +%s.%N; }
# The volume's counters since it was mounted: partial segments, meta and
# data KiB written, checkpoints.
counters() { "$DUALFS" stats --json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["partial_segments_written"], d["meta_blocks_written"] * 4, d["data_blocks_written"] * 4, d["checkpoints_written"])'; }

truncate -s 410M $W/m.img; truncate -s 4G $W/d.img
M=$(loop $W/m.img); D=$(loop $W/d.img); LOOPS="$M $D"

fresh() { # a new volume, the live tree mounted on A, a clone c of it
  "$DUALFS" mkfs --force "$M" "$D" >/dev/null
  : > $W/log
  "$DUALFS" mount -o log=$W/log "$M" "$D" $W/a
  "$DUALFS" snapshot create $W/a s >/dev/null
  "$DUALFS" clone $W/a s c >/dev/null
}
gone() { # unmounts both, waits for the serving process to end
  "$DUALFS" umount $W/b >/dev/null 2>&1 || true
  "$DUALFS" umount $W/a >/dev/null
  for _ in $(seq 1 100); do pgrep -f "dualfs.*$W/a" >/dev/null || break; sleep 0.1; done
}

say $ROWS "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
say $ROWS "fs run seconds partial_segments meta_KiB data_KiB checkpoints"
for run in $(seq 1 "$RUNS"); do
  for fs in one two; do
   for build in $BUILDS; do
    label=${build%%=*}; DUALFS=${build#*=}
    fresh
    mkdir $W/a/x
    if [ $fs = two ]; then "$DUALFS" mount -o log=$W/log,clone=c "$M" "$D" $W/b; mkdir $W/b/x; B=$W/b; else B=$W/a; mkdir $W/a/y; fi
    "$DUALFS" sync $W/a $B >/dev/null
    read -r p0 m0 d0 c0 < <(counters $W/a)
    t0=$(now)
    tar -xf "$TREE" -C $W/a/x & p1=$!
    if [ $fs = two ]; then tar -xf "$TREE" -C $W/b/x & p2=$!; else tar -xf "$TREE" -C $W/a/y & p2=$!; fi
    wait $p1 $p2
    "$DUALFS" sync $W/a $B >/dev/null
    t1=$(now)
    read -r p1 m1 d1 c1 < <(counters $W/a)
    say $ROWS "$(name $fs $label) $run $(echo "$t1 - $t0" | bc) $((p1 - p0)) $((m1 - m0)) $((d1 - d0)) $((c1 - c0))"
    gone
   done
  done
done

# fsync in tree A: B idle, then B streaming 1 GiB; interleaved by run.
lat() { # file [count]: count (40) appends of 4 KiB, each fsynced, 50 ms apart; prints p50 p90 max in ms
  python3 - "$1" "${2:-40}" <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
lat = []
for _ in range(int(sys.argv[2])):
    os.write(fd, b"x" * 4096)
    t = time.perf_counter(); os.fsync(fd); lat.append((time.perf_counter() - t) * 1000)
    time.sleep(0.05)
lat.sort()
print(f"{lat[len(lat) // 2]:.2f} {lat[int(len(lat) * 0.9)]:.2f} {lat[-1]:.2f}")
EOF
}
# Where the time of taking turns went while A fsynced (dualfs stats, a
# build that counts it): switches and waits at the gate, and per switch
# the milliseconds of the outgoing tree's commit (with the MiB of data it
# wrote back), its checkpoint and the switch's own checkpoint; waits are
# every tree's operations', fsync_waits those of FSYNC requests.
turns() { "$DUALFS" stats --json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(str(d.get(k, -1)) for k in ("tree_switches", "tree_waits", "tree_wait_us", "tree_wait_max_us", "tree_switch_commit_us", "tree_switch_commit_data_blocks", "tree_switch_checkpoint_us", "tree_switch_us", "tree_switch_compact_us", "tree_fsync_waits", "tree_fsync_wait_us", "tree_switch_total_us", "tree_switch_locks_us")))'; }
turn_row() { # before after: per switch and per wait, from two readings of turns
  python3 - "$1" "$2" <<'EOF2'
import sys
a, b = ([int(x) for x in s.split()] for s in sys.argv[1:3])
if a[0] < 0:
    sys.exit()
d = [y - x for x, y in zip(a, b)]
sw, waits, fw = max(d[0], 1), max(d[1], 1), max(d[9], 1)
print(f"{d[0]} {d[1]} {d[2] / waits / 1000:.1f} {b[3] / 1000:.1f} {d[9]} {d[10] / fw / 1000:.1f} "
      f"{d[11] / sw / 1000:.1f} {d[12] / sw / 1000:.1f} "
      f"{d[4] / sw / 1000:.1f} {d[5] * 4 / 1024 / sw:.2f} {d[6] / sw / 1000:.1f} {d[7] / sw / 1000:.1f} {d[8] / sw / 1000:.1f}")
EOF2
}
TROWS=$W/turns.txt; : > $TROWS
say $TROWS "fs run switches waits wait_ms max_wait_ms fsync_waits fsync_wait_ms total_ms locks_ms commit_ms commit_MiB checkpoint_ms switch_ms compact_ms"
say $FROWS "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
say $FROWS "fs run p50_ms p90_ms max_ms"
UROWS=$W/untar_fsync.txt; : > $UROWS
say $UROWS "fs run alone_s beside_fsyncs_s"
for run in $(seq 1 "$FSYNC_RUNS"); do
 for build in $BUILDS; do
  label=${build%%=*}; DUALFS=${build#*=}
  fresh
  "$DUALFS" mount -o log=$W/log,clone=c "$M" "$D" $W/b
  t0=$(turns $W/a)
  say $FROWS "$(name b-idle $label) $run $(lat $W/a/f)"
  t1=$(turns $W/a); r=$(turn_row "$t0" "$t1"); [ -z "$r" ] || say $TROWS "$(name b-idle $label) $run $r"
  rm -f $W/stop
  (while [ ! -e $W/stop ]; do dd if=/dev/zero of=$W/b/big bs=1M count=1024 conv=notrunc status=none; done) & p=$!
  sleep 1
  t0=$(turns $W/a)
  say $FROWS "$(name b-streams $label) $run $(lat $W/a/g)"
  t1=$(turns $W/a); r=$(turn_row "$t0" "$t1"); [ -z "$r" ] || say $TROWS "$(name b-streams $label) $run $r"
  touch $W/stop; pkill -P $p -x dd || true; wait $p || true
  # B untars TREE alone (A idle), then again while A fsyncs.
  rm -f $W/b/big; "$DUALFS" sync $W/a $W/b >/dev/null
  mkdir $W/b/u0 $W/b/u1
  t0=$(now); tar -xf "$TREE" -C $W/b/u0; "$DUALFS" sync $W/b >/dev/null; t1=$(now)
  (lat $W/a/h 150 > $W/lat.txt) & p=$!
  sleep 0.2
  t2=$(now); tar -xf "$TREE" -C $W/b/u1; "$DUALFS" sync $W/b >/dev/null; t3=$(now)
  wait $p
  say $FROWS "$(name b-untars $label) $run $(cat $W/lat.txt)"
  say $UROWS "$(name untar-b $label) $run $(echo "$t1 - $t0" | bc) $(echo "$t3 - $t2" | bc)"
  # B writes 2 GiB alone (A idle), then again while A fsyncs.
  t0=$(now); dd if=/dev/zero of=$W/b/s0 bs=1M count=2048 status=none; "$DUALFS" sync $W/b >/dev/null; t1=$(now)
  rm -f $W/b/s0; "$DUALFS" sync $W/b >/dev/null
  (lat $W/a/k 100 > /dev/null) & p=$!
  sleep 0.2
  t2=$(now); dd if=/dev/zero of=$W/b/s1 bs=1M count=2048 status=none; "$DUALFS" sync $W/b >/dev/null; t3=$(now)
  wait $p
  say $UROWS "$(name stream-b $label) $run $(echo "$t1 - $t0" | bc) $(echo "$t3 - $t2" | bc)"
  gone
 done
done
say $FROWS "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$RUNS" -gt 0 ]; then python3 "$(dirname "$0")/store.py" add trees-beside --phase untar --command "$CMD" < $ROWS; fi
python3 "$(dirname "$0")/store.py" add trees-beside --phase fsync --command "$CMD" < $FROWS
python3 "$(dirname "$0")/store.py" add trees-beside --phase untar-beside-fsync --command "$CMD" < $UROWS
if [ "$(wc -l < $TROWS)" -gt 1 ]; then
  python3 "$(dirname "$0")/store.py" add trees-beside --phase fsync-turns --command "$CMD" < $TROWS
fi
