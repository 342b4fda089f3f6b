//! What is free: statfs's figures, saying when a device runs low, before
//! it is full, and what to do when it is: the warnings of `dualfs stats`
//! and the log, and the advice that goes with ENOSPC.

use super::{StatFs, Volume, lock};
use crate::error::DeviceRole;
use crate::format::name::NAME_MAX;
use crate::types::{BLOCK_BYTES, BLOCK_SIZE};

/// The data device is running low below this share of free blocks (%).
pub const DATA_LOW_PERCENT: u64 = 5;
/// The meta-data device is running low when live meta-data fills this share
/// (%) of the log's room outside the reserve: the cleaner then has little
/// to win, and new files will soon find no room.
pub const META_LOW_PERCENT: u64 = 90;

/// What to do about a full device, in words for the log and the CLI.
#[must_use]
pub fn no_space_advice(role: DeviceRole) -> &'static str {
    match role {
        DeviceRole::Data => {
            "free space on it, or grow the data device (truncate -s on an image, lvextend, then \
             losetup -c for a loop device) and run `dualfs resize MOUNTPOINT --data SIZE`"
        }
        DeviceRole::Meta => {
            "run `dualfs clean MOUNTPOINT` if much of the log is dead, delete files, or grow the \
             meta-data device and run `dualfs resize MOUNTPOINT --meta SIZE`"
        }
    }
}

impl Volume {
    /// One sentence per device that is running low (see
    /// [`DATA_LOW_PERCENT`], [`META_LOW_PERCENT`]), naming it, what is
    /// left, and what `dualfs resize` can do; empty when neither is.
    #[must_use]
    pub fn space_warnings(&self) -> Vec<String> {
        let fs = lock(&self.fs);
        let log = &fs.log;
        let mut out = Vec::new();
        let total = log.space().total_blocks();
        let free = log.space().free_for_statfs();
        if free * 100 < total * DATA_LOW_PERCENT {
            out.push(format!(
                "the data device is running low: {} MiB of {} MiB free; {}",
                (free * BLOCK_BYTES) >> 20,
                (total * BLOCK_BYTES) >> 20,
                no_space_advice(DeviceRole::Data)
            ));
        }
        let sb = log.superblock();
        let seg_bytes = u64::from(sb.segment_blocks) * BLOCK_BYTES;
        let room = u64::from(sb.segment_count.saturating_sub(log.reserve_segments())) * seg_bytes;
        let live = log.meta_live_bytes();
        if live * 100 >= room * META_LOW_PERCENT || log.free_segments() <= log.reserve_segments() {
            out.push(format!(
                "the meta-data device is running low: live meta-data fills {} MiB of the log's {} MiB \
                 ({} of {} segments free, {} kept in reserve); {}",
                live >> 20,
                room >> 20,
                log.free_segments(),
                sb.segment_count,
                log.reserve_segments(),
                no_space_advice(DeviceRole::Meta)
            ));
        }
        out
    }

    /// Logs each device's running-low warning once when it starts, and a
    /// line when it ends (the periodic tick).
    pub(super) fn warn_if_low(&self) {
        let now = self.space_warnings();
        let mut warned = lock(&self.low_warned);
        for (i, role) in ["data device", "meta-data device"].iter().enumerate() {
            let w = now.iter().find(|w| w.starts_with(&format!("the {role} ")));
            match (w, warned[i]) {
                (Some(w), false) => log::warn!("{w}"),
                (None, true) => log::info!("the {role} is no longer running low"),
                _ => {}
            }
            warned[i] = w.is_some();
        }
    }
}

impl Volume {
    /// The data device's size and its free space as [`Volume::statfs`]
    /// counts them, in bytes, without the meta-data figures: what the
    /// adapter's nearly-full check at every OPEN and CREATE needs. (statfs
    /// counts the free meta-data segments one by one: 4% of the serving
    /// CPU of PostMark when every open asked for it.)
    #[must_use]
    pub fn data_space(&self) -> (u64, u64) {
        let fs = lock(&self.fs);
        let space = fs.log.space();
        (space.total_blocks() * crate::types::BLOCK_BYTES, space.free_for_statfs() * crate::types::BLOCK_BYTES)
    }

    /// Space and inode figures.
    #[must_use]
    pub fn statfs(&self) -> StatFs {
        // The count of inodes in use needs the whole inode map.
        if let Err(e) = self.finish_loading() {
            log::error!("reading the inode map: {e}; the count of files in use is short");
        }
        let fs = lock(&self.fs);
        let log = &fs.log;
        let free_segments = u64::from(log.free_segments());
        let total_data = log.space().total_blocks();
        let free = log.space().free_for_statfs();
        let used_inodes = log.ifile().used_inodes();
        // The inode map grows on demand: what is left is as many inodes as
        // the free meta-data space could hold.
        let meta_free_bytes = free_segments.saturating_sub(u64::from(log.reserve_segments()))
            * u64::from(log.superblock().segment_blocks)
            * crate::types::BLOCK_BYTES;
        let ffree = meta_free_bytes / 256;
        StatFs {
            bsize: BLOCK_SIZE as u32,
            blocks: total_data,
            bfree: free,
            bavail: free,
            files: used_inodes + ffree,
            ffree,
            namelen: NAME_MAX as u32,
            meta_segments: u64::from(log.superblock().segment_count),
            meta_free_segments: free_segments,
        }
    }
}
