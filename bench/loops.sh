# Shared by the resize and migrate benchmarks (source it after setting W,
# the work folder): loop devices with direct I/O, their written sectors,
# and a cleanup that unmounts and detaches what the script set up (LOOPS).
cleanup() { umount $W/mnt 2>/dev/null || true; fusermount3 -u $W/mnt 2>/dev/null || true;
  for l in ${LOOPS:-}; do losetup -d $l 2>/dev/null || true; done; rm -f $W/*.img; }
wsect() { awk '{print $7}' /sys/block/$(basename $1)/stat; }
now() { date +%s.%N; }
loop() { losetup --direct-io=on -f --show "$1"; }
