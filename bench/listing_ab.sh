#!/bin/bash
# Listings cold and warm with two dualfs builds (A=base, N=new) on one
# volume holding the suite's tree and directories of 50,000 and 5,000
# empty files: each phase on a fresh mount with caches dropped, the builds
# alternated within each round. Prints: build round phase seconds load
# requests | per-opcode count and served µs (`dualfs stats`).
# Env: ROUNDS (3), PHASES (comma list, default all), KEEP=1 reuses the
# volume, URING=1 mounts with -o transport=uring (enable_uring set under the
# mount tests' flock for the moment of the mount), W (work dir), TAR.
A=${A:?the "base" dualfs binary}; N=${N:?the "new" dualfs binary}; ROUNDS=${ROUNDS:-3}
TAR=${TAR:-/var/tmp/dualfs-bench/src/linux.tar}
W=${W:-/var/tmp/dualfs-listing}; mkdir -p $W/mnt
[ -f $W/meta.img ] || { truncate -s 1G $W/meta.img; truncate -s 4G $W/data.img; }
M=$(losetup --direct-io=on -f --show $W/meta.img); D=$(losetup --direct-io=on -f --show $W/data.img)
trap 'umount $W/mnt 2>/dev/null; losetup -d $M; losetup -d $D' EXIT
if [ -z "${KEEP:-}" ]; then
$A mkfs -f $M $D >/dev/null 2>&1
$A mount -o noatime $M $D $W/mnt; mkdir $W/mnt/ls $W/mnt/m5; tar xf $TAR -C $W/mnt
python3 -c "
for i in range(50000): open('$W/mnt/ls/f%05d'%i,'w').close()
for i in range(5000): open('$W/mnt/m5/file-number-%05d.c'%i,'w').close()"
$A umount $W/mnt >/dev/null
fi
ph() { local v=$1 name=$2; shift 2; local B=$A; [ $v = new ] && B=$N
 if [ -n "${URING:-}" ]; then ( flock 9; p=/sys/module/fuse/parameters/enable_uring; o=$(cat $p); echo Y > $p; $B mount -o noatime,transport=uring,log=$W/uring.log $M $D $W/mnt; echo $o > $p ) 9>/run/lock/dualfs-enable-uring.lock; sleep 0.2
 else $B mount -o noatime $M $D $W/mnt; fi; sync; echo 3 > /proc/sys/vm/drop_caches
 s0=$(date +%s.%N); (cd $W/mnt && "$@") > /dev/null 2>&1; s1=$(date +%s.%N)
 if [ -n "${WARM:-}" ]; then s0=$(date +%s.%N); (cd $W/mnt && "$@") > /dev/null 2>&1; s1=$(date +%s.%N); fi
 printf "%-4s %s %-12s %.3f %s " $v $rep $name "$(echo "$s1 - $s0" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"
 $B stats $W/mnt | sed -n '/FUSE requests/,/^$/p' | awk 'NR>2 && $2>0 {n+=$2; s=s sprintf("%s %s %sus, ", $1, $2, $3)} END {print n, "|", s}'
 $B umount $W/mnt >/dev/null; }
both() { case ",${PHASES:-all}," in *",$1,"*|*",all,"*) ;; *) return;; esac; if [ $((rep % 2)) = 1 ]; then ph base "$@"; ph new "$@"; else ph new "$@"; ph base "$@"; fi; }
for rep in $(seq 1 $ROUNDS); do
both find-size sh -c 'cd linux && ls -d */ | xargs -I{} find {} -size +2k'
both find find linux
both tar sh -c 'tar cf - linux | cat'
both ls-50k ls ls
both ls-l-50k ls -l ls
WARM=1 both ls-l-50k-w ls -l ls
both ls-1468 ls linux/include/linux
both ls-l-1468 ls -l linux/include/linux
WARM=1 both ls-l-1468-w ls -l linux/include/linux
both ls-5k ls m5
both ls-l-5k ls -l m5
WARM=1 both ls-l-5k-w ls -l m5
done
