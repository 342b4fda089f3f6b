#!/bin/bash
# What a switch of the live tree costs against the size of the trees: a
# volume of N empty files (in directories of 1,000), a snapshot and a clone
# of it mounted beside the volume, then one file created in each tree in
# turn, 20 times, so that every create enters the other tree. Per size:
# the creates' p50, p90 and largest (ms), switches, and per switch the
# milliseconds of the whole switch, the commit lock, the outgoing tree's
# commit and checkpoint, and the switch itself (the checkpoint that keeps
# the outgoing tree and names the incoming one, and loading the incoming
# tree), from `dualfs stats`; the serving process's peak memory (MiB).
# Usage: bench/tree_switch.sh [N ...]   (default 1000 100000 1000000;
# root; under /tmp/treeswitch)
set -euo pipefail
SIZES=${*:-1000 100000 1000000}
DUALFS=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=/tmp/treeswitch
mkdir -p $W/a $W/b
cleanup() {
  "$DUALFS" umount $W/b >/dev/null 2>&1 || true; "$DUALFS" umount $W/a >/dev/null 2>&1 || true
  sleep 1
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img
}
trap cleanup EXIT
ROWS=$W/rows.txt; : > $ROWS; CMD="$0 $*"
say() { echo "$*" | tee -a $ROWS; }
say "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
say "files run p50_ms p90_ms max_ms switches switch_ms locks_ms commit_ms checkpoint_ms switch_only_ms peak_MiB"
for n in $SIZES; do
  truncate -s 2G $W/m.img; truncate -s 8G $W/d.img
  M=$(losetup --direct-io=on -f --show $W/m.img); D=$(losetup --direct-io=on -f --show $W/d.img); LOOPS="$M $D"
  "$DUALFS" mkfs --force "$M" "$D" >/dev/null
  "$DUALFS" mount "$M" "$D" $W/a
  python3 - $W/a "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range(max(n // 1000, 1)):
    p = f"{root}/d{d}"
    os.mkdir(p)
    for i in range(min(n, 1000)):
        os.close(os.open(f"{p}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
PY
  "$DUALFS" snapshot create $W/a s >/dev/null
  "$DUALFS" clone $W/a s c >/dev/null
  "$DUALFS" mount -o clone=c "$M" "$D" $W/b
  lat=$(python3 - $W/a $W/b <<'PY'
import os, sys, time
ts = []
for i in range(20):
    for r in sys.argv[1:3]:
        t = time.perf_counter()
        os.close(os.open(f"{r}/x{i}", os.O_CREAT | os.O_WRONLY, 0o644))
        ts.append((time.perf_counter() - t) * 1000)
ts.sort()
print(f"{ts[len(ts) // 2]:.1f} {ts[int(len(ts) * 0.9)]:.1f} {ts[-1]:.1f}")
PY
)
  costs=$("$DUALFS" stats --json $W/a | python3 -c 'import json,sys; d=json.load(sys.stdin); sw=max(d["tree_switches"],1); ms=lambda k: round(d[k]/sw/1000,1); print(d["tree_switches"], ms("tree_switch_total_us"), ms("tree_switch_locks_us"), ms("tree_switch_commit_us"), ms("tree_switch_checkpoint_us"), ms("tree_switch_us"))')
  pid=$(pgrep -f "dualfs.*mount.*$W/a" | head -1)
  peak=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' /proc/"$pid"/status)
  say "$n 1 $lat $costs $peak"
  "$DUALFS" umount $W/b >/dev/null; "$DUALFS" umount $W/a >/dev/null
  for _ in $(seq 1 100); do pgrep -f "dualfs.*mount.*$W/a" >/dev/null || break; sleep 0.1; done
  losetup -d $M; losetup -d $D; LOOPS=""; rm -f $W/*.img
done
python3 "$(dirname "$0")/store.py" add tree-switch --phase switch --command "$CMD" < $ROWS
