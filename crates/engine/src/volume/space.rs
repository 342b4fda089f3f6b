//! Saying when a device runs low, before it is full, and what to do when
//! it is: the warnings of `dualfs stats` and the log, and the advice that
//! goes with ENOSPC.

use super::{Volume, lock};
use crate::error::DeviceRole;
use crate::types::BLOCK_BYTES;

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
        let mut out = self.mirror_warning().into_iter().collect::<Vec<_>>();
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
