#!/bin/bash
# A second mount of a mounted volume: what the bind costs beside one mount,
# and what two FUSE connections kept coherent by timeouts alone would cost
# at the least (attributes and names never cached, no writeback cache; they
# would still not see each other's cached pages).
#
#   one   one mount, defaults: everything through it
#   bind  a second mount joined (a bind): written through the first,
#         listed, read and removed through the second
#   ttl0  one mount with attr_timeout=0,entry_timeout=0,nowriteback
#
# Phases: cp -a of a source tree in, `ls -lR` of it three times, reading
# every file, rm -rf. Configurations interleaved, ROUNDS rounds; wall
# seconds and FUSE requests (dualfs stats) per phase, as JSON lines.
# Run as root: bench/second_mount.sh [ROUNDS] [TREE]
set -euo pipefail
ROUNDS=${1:-3}
TREE=${2:-/usr/include/linux}
D=${DUALFS:-$(dirname "$0")/../target/release/dualfs}
W=$(mktemp -d /tmp/dualfs-second-mount.XXXXXX)
mkdir -p "$W/a" "$W/b"
trap 'umount "$W/b" 2>/dev/null; "$D" umount "$W/a" >/dev/null 2>&1; rm -rf "$W"' EXIT
"$D" mkfs --size 2G "$W/m.img" "$W/d.img" >/dev/null

requests() {
    "$D" stats --json "$1" | python3 -c 'import json,sys; print(sum(v["count"] if isinstance(v, dict) else v for v in json.load(sys.stdin)["fuse_requests"].values()))'
}

phase() { # config round name mount command...
    local cfg=$1 round=$2 name=$3 mnt=$4; shift 4
    local r0 t0 t1 r1
    r0=$(requests "$mnt"); t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N); r1=$(requests "$mnt")
    printf '{"config":"%s","round":%d,"phase":"%s","seconds":%.3f,"requests":%d}\n' \
        "$cfg" "$round" "$name" "$(echo "$t1 - $t0" | bc)" $((r1 - r0))
}

for round in $(seq 1 "$ROUNDS"); do
    for cfg in one bind ttl0; do
        opts=log=$W/log
        [ "$cfg" = ttl0 ] && opts=$opts,attr_timeout=0,entry_timeout=0,nowriteback
        "$D" mount -o "$opts" "$W/m.img" "$W/d.img" "$W/a"
        w=$W/a r=$W/a
        if [ "$cfg" = bind ]; then
            "$D" mount -o "$opts" "$W/m.img" "$W/d.img" "$W/b"
            r=$W/b
        fi
        phase "$cfg" "$round" cp "$w" cp -a "$TREE" "$w/t"
        phase "$cfg" "$round" ls-lR "$r" sh -c "for i in 1 2 3; do ls -lR '$r/t' >/dev/null; done"
        phase "$cfg" "$round" read "$r" sh -c "find '$r/t' -type f -exec cat {} + >/dev/null"
        phase "$cfg" "$round" rm "$r" rm -rf "$r/t"
        [ "$cfg" = bind ] && umount "$W/b"
        "$D" umount "$W/a" >/dev/null
    done
done
echo "{\"uptime\":\"$(uptime)\"}"
