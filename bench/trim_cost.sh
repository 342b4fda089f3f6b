#!/bin/sh
# What discard costs: the suite's untar and rm -rf on a 4 GiB volume
# (408 MiB meta-data device) with and without -o discard, then an fstrim
# of the emptied volume after a remount (a mount trims every group once).
# DualFS runs on sparse image files directly (a discard punches holes),
# ext4 on a loop device over an image file, interleaved per repeat.
# Rows go to the results store (bench/store.py, tool "discard").
#
#   bench/trim_cost.sh TAR [REPEATS]     (as root; TAR holds linux/)
set -eu
TAR=$1
REPS=${2:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
DUALFS=${DUALFS:-$HERE/../target/release/dualfs}
W=${WORK:-/var/tmp/dualfs-trim-cost}
mkdir -p "$W/mnt"
ROWS="$W/rows.txt"
echo "config phase seconds trimmed_bytes image_bytes" > "$ROWS"

now() { date +%s.%N; }
held() { du -B1 "$@" | awk '{s += $1} END {print s}'; }

mount_fs() { # config
    case $1 in
    dualfs) "$DUALFS" mount -o noatime "$W/meta.img" "$W/data.img" "$W/mnt" ;;
    dualfs-discard) "$DUALFS" mount -o noatime,discard "$W/meta.img" "$W/data.img" "$W/mnt" ;;
    ext4) mount -o noatime "$LOOP" "$W/mnt" ;;
    ext4-discard) mount -o noatime,discard "$LOOP" "$W/mnt" ;;
    esac
}
umount_fs() {
    case $1 in
    dualfs*) "$DUALFS" umount "$W/mnt" > /dev/null ;;
    *) umount "$W/mnt" ;;
    esac
}
timed() { # config phase command
    sync; echo 3 > /proc/sys/vm/drop_caches
    mount_fs "$1"
    t0=$(now)
    sh -c "$3" > "$W/out.txt"
    umount_fs "$1"
    t1=$(now)
    trimmed=$(sed -n 's/.*(\([0-9]*\) bytes) trimmed.*/\1/p' "$W/out.txt" | head -1)
    echo "$1 $2 $(echo "$t1 - $t0" | bc) ${trimmed:-0} $(held $W/*.img)" | tee -a "$ROWS"
}

for rep in $(seq 1 "$REPS"); do
    for cfg in dualfs dualfs-discard ext4; do
        rm -f "$W"/*.img
        truncate -s 408M "$W/meta.img"
        truncate -s 3688M "$W/data.img"
        LOOP=
        case $cfg in
        dualfs*) "$DUALFS" mkfs -f "$W/meta.img" "$W/data.img" > /dev/null ;;
        ext4*) truncate -s 4096M "$W/data.img"; rm "$W/meta.img"
               LOOP=$(losetup --direct-io=on -f --show "$W/data.img"); mkfs.ext4 -q -F "$LOOP" ;;
        esac
        timed "$cfg" untar "tar xf $TAR -C $W/mnt"
        timed "$cfg" rm "rm -rf $W/mnt/linux"
        timed "$cfg" fstrim "fstrim -v $W/mnt || true"
        [ -n "$LOOP" ] && losetup -d "$LOOP"
    done
done
rm -f "$W"/*.img
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$ROWS"
python3 "$HERE/store.py" add discard "$ROWS"
