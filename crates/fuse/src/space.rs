//! A nearly full data device under the writeback cache (docs/FUSE.md):
//! with the cache, write(2) succeeds and a write-back's ENOSPC comes only
//! at fsync or close. Near full, files opened for writing bypass the cache
//! so that write(2) gets ENOSPC itself, and statfs's available space
//! leaves out what the kernel may hold dirty.

use crate::DualFs;
use crate::answers::FOPEN_DIRECT_IO;
use dualfs_engine::volume::StatFs;

/// Free data space under which a file opened for writing bypasses the
/// kernel's page cache: a cached write(2) succeeds and its ENOSPC comes
/// only at write-back, reported at fsync or close; an uncached one gets it
/// at once, as on a local file system. At most this much, or an eighth of
/// the data device: about what the kernel lets a FUSE mount hold dirty
/// (its per-device limit is 1% of the dirty memory limit).
pub(crate) const NEAR_FULL_BYTES: u64 = 64 << 20;

/// The near-full window of a data device of `total` bytes:
/// [`NEAR_FULL_BYTES`], or an eighth of the device if smaller.
fn window_bytes(total: u64) -> u64 {
    NEAR_FULL_BYTES.min(total / 8)
}

impl DualFs {
    /// How a file opened for writing is served: through the page cache,
    /// unless the volume is nearly full and the cache would hide ENOSPC.
    pub(crate) fn write_open_flags(&self, ino: dualfs_engine::types::InodeNo) -> u32 {
        if !self.writeback() {
            return 0;
        }
        // Likewise near a quota's block limit: the cache would hide EDQUOT.
        if self.vol.quota_near_limit(ino, NEAR_FULL_BYTES / 4096) {
            return FOPEN_DIRECT_IO;
        }
        // Not statfs: this runs at every open for writing, and statfs also
        // counts the meta-data space (DESIGN.md, "FUSE adapter").
        let (total, free) = self.vol.data_space();
        if free < window_bytes(total) { FOPEN_DIRECT_IO } else { 0 }
    }

    /// Available blocks for statfs: free less the near-full window, what a
    /// program can count on writing whatever the kernel caches (`df` shows
    /// free as well, exactly).
    pub(crate) fn available_blocks(&self, s: &StatFs) -> u64 {
        if !self.writeback() {
            return s.bavail;
        }
        s.bavail.saturating_sub(window_bytes(s.blocks * u64::from(s.bsize)) / u64::from(s.bsize).max(1))
    }
}
