#!/bin/sh
# What quotas cost: untar TAR (made with --owner=1000 --group=1000: the
# files are charged to uid 1000, who has
# limits far above what the tree takes, so every write and create is
# judged) onto a volume with quotas on and one without, interleaved per
# repeat, then unmount and mount again (the mount of a volume with quotas
# counts usage from every inode). The serving process's write calls and
# bytes (/proc/PID/io syscw and wchar: device writes and FUSE replies,
# the replies the same in both) are reported beside the times.
#
#   bench/quota_cost.sh TAR [REPEATS]     (as root)
set -eu
TAR=$1
REPS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
DUALFS=${DUALFS:-$HERE/../target/release/dualfs}
W=${WORK:-/var/tmp/dualfs-quota-cost}
mkdir -p "$W/mnt"
now() { date +%s.%N; }
server() { pgrep -f "dualfs.*$W/meta-$1.img" | head -1; }
echo "config repeat untar_s sync_s write_calls write_bytes mount_s files"
for r in $(seq "$REPS"); do
    for c in off on; do
        rm -f "$W/meta-$c.img" "$W/data-$c.img"
        if [ "$c" = on ]; then q=--quota; else q=; fi
        "$DUALFS" mkfs $q --size 4G "$W/meta-$c.img" "$W/data-$c.img" > /dev/null
        if [ "$c" = on ]; then
            "$DUALFS" quota set -u 1000 100G 200G 0 10000000 "$W/meta-$c.img" "$W/data-$c.img"
        fi
        "$DUALFS" mount -o noatime "$W/meta-$c.img" "$W/data-$c.img" "$W/mnt"
        pid=$(server "$c")
        set -- $(awk '/^syscw|^wchar/ {print $2}' "/proc/$pid/io")
        w0=$1; c0=$2
        t0=$(now)
        tar -x --same-owner -f "$TAR" -C "$W/mnt"
        t1=$(now)
        "$DUALFS" sync "$W/mnt"
        t2=$(now)
        set -- $(awk '/^syscw|^wchar/ {print $2}' "/proc/$pid/io")
        files=$(find "$W/mnt" | wc -l)
        "$DUALFS" umount "$W/mnt" > /dev/null
        t3=$(now)
        "$DUALFS" mount -o noatime "$W/meta-$c.img" "$W/data-$c.img" "$W/mnt"
        t4=$(now)
        "$DUALFS" umount "$W/mnt" > /dev/null
        echo "$c $r $(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc) $(($2 - c0)) $(($1 - w0)) $(echo "$t4 - $t3" | bc) $files"
    done
done
rm -f "$W"/*.img
