#!/bin/bash
# A/B of the suite's seq-write-fsync phase (fio psync, bs=1M, 1 GiB,
# end_fsync=1) against ext4 and a server that does no work (no-work-server) on the suite's loop devices (3688 MiB data + 408 MiB meta, direct I/O),
# configurations interleaved, cold caches, fresh file system each run.
# CFGS: ext4 | dualfs[:OPTS] | base[:OPTS] (main's binary) | uring[:OPTS] | proto (no-work server, /dev/fuse)
#       | proto-uring; proto:BYTES sets its kernel window.  OPTS use '+' for ','.  REPS=N; FRESH=1 makes
#       new (sparse) image files before every run, as the suite does.  Prints one line per run, with
#       the CPU time both CPUs spent on anything during it (CPU-s: user, system, interrupts, steal)
#       (docs/BENCHMARKS.md, "The stream's window and its copy out of the lock").
set -u
P=/sys/module/fuse/parameters/enable_uring
B=${B:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
BASE=${BASE:-$B/dualfs}  # the other build, for configuration base
W=${W:-/var/tmp/seqwrite-ab}; mkdir -p $W/mnt $W/out
rm -f $W/meta.img $W/data.img; truncate -s 408M $W/meta.img; truncate -s 3688M $W/data.img
M=$(losetup --direct-io=on -f --show $W/meta.img); D=$(losetup --direct-io=on -f --show $W/data.img)
cleanup() { mountpoint -q $W/mnt && umount $W/mnt; sleep 1; losetup -d $M; losetup -d $D; }
trap cleanup EXIT
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
setwin() { local dev=$(awk -v m=$W/mnt '$5==m {print $3}' /proc/self/mountinfo | tail -1); echo $1 > /sys/class/bdi/$dev/max_bytes; }
for rep in $(seq ${REPS:-3}); do
 for cfg in ${CFGS:-ext4 dualfs}; do
  if [ -n "${FRESH:-}" ]; then losetup -d $M; losetup -d $D; rm -f $W/meta.img $W/data.img; truncate -s 408M $W/meta.img; truncate -s 3688M $W/data.img
    M=$(losetup --direct-io=on -f --show $W/meta.img); D=$(losetup --direct-io=on -f --show $W/data.img); fi
  name=${cfg%%:*}; opts=""; [ "$name" != "$cfg" ] && opts=",$(echo ${cfg#*:} | tr + ,)"
  spid=""
  case $name in
   ext4) mkfs.ext4 -q -F $D && mount -o noatime $D $W/mnt ;;
   dualfs|base) bin=$B/dualfs; [ $name = base ] && bin=$BASE
     $bin mkfs -f $M $D >/dev/null 2>&1 || { echo mkfs failed; exit 1; }
     $bin mount -o noatime$opts $M $D $W/mnt || exit 1 ;;
   uring) $B/dualfs mkfs -f $M $D >/dev/null 2>&1
     ( flock 9; old=$(cat $P); echo Y > $P; $B/dualfs mount -o noatime,uring,log=$W/uring.log$opts $M $D $W/mnt; echo $old > $P ) 9>/run/lock/dualfs-enable-uring.lock ;;
   proto|proto-uring) tr=dev; [ $name = proto-uring ] && tr=uring
     ( flock 9; old=$(cat $P); [ $tr = uring ] && echo Y > $P; $B/no-work-server $W/mnt --transport $tr > $W/proto.out & for i in $(seq 100); do mountpoint -q $W/mnt && break; sleep 0.05; done; echo $old > $P ) 9>/run/lock/dualfs-enable-uring.lock
     [ -n "$opts" ] && setwin ${opts#,} ;;
  esac
  case $name in ext4) ;; proto*) spid=$(pgrep -n no-work-server) ;; *) spid=$(pgrep -n -f "dualfs (mount|serve)") ;; esac
  sync; echo 3 > /proc/sys/vm/drop_caches
  cpu() { [ -n "$spid" ] && awk '{print $14+$15}' /proc/$spid/stat 2>/dev/null || echo 0; }
  c0=$(cpu); read b0 t0 < <(busy); s0=$(date +%s.%N)
  ${PRE:-} fio --output-format=json --directory=$W/mnt --ioengine=psync --name=seq --rw=write --bs=1M --size=1024M --end_fsync=1 > $W/out/fio.json
  s1=$(date +%s.%N); read b1 t1 < <(busy); c1=$(cpu)
  bw=$(python3 -c "import json;print(round(json.load(open('$W/out/fio.json'))['jobs'][0]['write']['bw']/1024))")
  st=""; case $name in dualfs|base|uring) st=$($B/dualfs stats --json $W/mnt 2>/dev/null | python3 -c "
import json,sys
r=json.load(sys.stdin).get('fuse_requests',{})
w=r.get('WRITE',{}); f=r.get('FSYNC',{})
print('WRITE %d mean %.0f us lockwait %.0f us; FSYNC %.1f ms' % (w.get('count',0), w.get('total_us',0)/max(1,w.get('count',1)), w.get('lock_wait_us',0)/max(1,w.get('count',1)), f.get('total_us',0)/1000))" 2>/dev/null) ;; esac
  printf "%-22s rep%s %5s MiB/s  wall %.2f s  cpu-busy %3.0f%% (%.2f CPU-s)  server %s ticks  load %s  %s\n" "$cfg" $rep $bw "$(echo "$s1 - $s0" | bc)" "$(echo "100 * ($b1 - $b0) / ($t1 - $t0)" | bc -l)" "$(echo "($b1 - $b0) / $(getconf CLK_TCK)" | bc -l)" "$((c1-c0))" "$(cut -d' ' -f1 /proc/loadavg)" "$st"
  case $name in ext4|proto*) umount $W/mnt; sleep 0.5 ;; *) $B/dualfs umount $W/mnt >/dev/null ;; esac
 done
done
