//! Discard: trims of the free space (FITRIM, `dualfs trim`) and the
//! background discard of `-o discard` (DESIGN.md, "Discard").
//!
//! A trim addresses the volume as one range of bytes: the data device
//! first, then the meta-data device. Free data blocks are found group by
//! group in the allocator's bitmap and held busy while discarded; log
//! segments are discarded with the commit lock held, so that no partial
//! segment is written into one meanwhile.

use std::sync::atomic::Ordering;

use super::{Volume, lock};
use crate::data_space::Discard;
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::types::{BLOCK_BYTES, GroupNo, SegmentNo};

/// What a trim is asked for, in bytes of the volume (the data device,
/// then the meta-data device), as `struct fstrim_range` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrimRange {
    /// First byte.
    pub start: u64,
    /// Bytes from `start` (`u64::MAX`: to the end).
    pub len: u64,
    /// Free runs shorter than this are left alone.
    pub min_len: u64,
}

impl TrimRange {
    /// The whole volume, every free run.
    pub const ALL: TrimRange = TrimRange { start: 0, len: u64::MAX, min_len: 0 };
}

/// What a trim discarded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Bytes of the data device discarded.
    pub data_bytes: u64,
    /// Bytes of the meta-data device discarded (whole log segments).
    pub meta_bytes: u64,
    /// The meta-data device cannot discard (the data device's bytes were).
    pub meta_unsupported: bool,
}

impl TrimReport {
    /// Bytes discarded on both devices (what FITRIM answers).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.data_bytes + self.meta_bytes
    }
}

/// Neighbouring ranges as one: (first, count).
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, n) in ranges {
        match out.last_mut() {
            Some((ps, pn)) if *ps + *pn == s => *pn += n,
            _ => out.push((s, n)),
        }
    }
    out
}

impl Volume {
    fn device(&self, role: DeviceRole) -> &dyn BlockDevice {
        match role {
            DeviceRole::Meta => self.meta.as_ref(),
            DeviceRole::Data => self.data.as_ref(),
        }
    }

    /// Discards `ranges` of the `role` device; returns the blocks
    /// discarded. A device that cannot discard is said so in the log
    /// once, and `NotSupported` from then on.
    fn discard_ranges(&self, role: DeviceRole, ranges: Vec<(u64, u64)>) -> Result<u64> {
        let unsupported = &self.discard_unsupported[usize::from(role == DeviceRole::Data)];
        if unsupported.load(Ordering::Acquire) {
            return Err(Error::NotSupported);
        }
        let mut done = 0;
        for (first, count) in merged(ranges) {
            match device::discard(self.device(role), role, first, count) {
                Ok(()) => done += count,
                Err(Error::NotSupported) => {
                    if !unsupported.swap(true, Ordering::AcqRel) {
                        log::warn!("the {role} cannot discard: its free space is not given back");
                    }
                    return Err(Error::NotSupported);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Discards the data blocks queued by `-o discard` (the background
    /// writer calls it); they are handed out again once it returns. A
    /// failed discard is logged, never a failure of the volume: the blocks
    /// are free either way.
    pub(super) fn discard_queued(&self) {
        let _one = lock(&self.discarding);
        let taken = lock(&self.fs).log.space_mut().take_discards();
        if taken.is_empty() {
            return;
        }
        let ranges = taken.iter().map(|d| (d.start, u64::from(d.len))).collect();
        match self.discard_ranges(DeviceRole::Data, ranges) {
            Ok(n) => self.discarded_blocks.fetch_add(n, Ordering::Relaxed),
            Err(Error::NotSupported) => 0,
            Err(e) => {
                log::warn!("discarding freed data blocks failed: {e}");
                0
            }
        };
        lock(&self.fs).log.space_mut().discarded(&taken);
    }

    /// With `-o discard`, after a checkpoint became durable (the commit
    /// lock held): discards the segments emptied that no checkpoint a
    /// mount could fall back to needs any more.
    pub(super) fn discard_emptied_segments(&self) {
        if !self.options.discard {
            return;
        }
        let segs = lock(&self.fs).log.emptied_to_discard();
        if let Err(e) = self.discard_segments(&segs)
            && !matches!(e, Error::NotSupported)
        {
            log::warn!("discarding emptied log segments failed: {e}");
        }
    }

    fn discard_segments(&self, segs: &[SegmentNo]) -> Result<u64> {
        if segs.is_empty() {
            return Ok(0);
        }
        let ranges = {
            let fs = lock(&self.fs);
            segs.iter().map(|&s| fs.log.segment_blocks(s)).collect()
        };
        let n = self.discard_ranges(DeviceRole::Meta, ranges)?;
        self.discarded_segments.fetch_add(segs.len() as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Discards the free space of the volume inside `range` (FITRIM,
    /// `dualfs trim`): free data blocks in runs of at least `min_len`
    /// bytes, and log segments no checkpoint needs. It checkpoints twice
    /// first, so that blocks freed and segments emptied until now (and
    /// blocks of snapshots deleted) are needed by neither checkpoint a
    /// mount may start from.
    ///
    /// # Errors
    /// `Invalid` for a range starting past the volume's end or shorter
    /// than a block; `NotSupported` when the data device cannot discard;
    /// `ReadOnly`; a device fails.
    pub fn trim(&self, range: TrimRange) -> Result<TrimReport> {
        self.check_writable()?;
        let (data_blocks, meta_blocks, group_blocks) = {
            let fs = lock(&self.fs);
            let sb = fs.log.superblock();
            (fs.log.space().total_blocks(), sb.meta_blocks, u64::from(sb.group_blocks))
        };
        let total = (data_blocks + meta_blocks) * BLOCK_BYTES;
        if range.start >= total {
            return Err(Error::Invalid("the range to trim starts past the end of the volume"));
        }
        if range.len < BLOCK_BYTES {
            return Err(Error::Invalid("the range to trim is shorter than a block"));
        }
        let end = range.start.saturating_add(range.len).min(total);
        // Whole blocks inside the range.
        let (first, last) = (range.start.div_ceil(BLOCK_BYTES), end / BLOCK_BYTES);
        let min = range.min_len.div_ceil(BLOCK_BYTES).max(1);
        self.checkpoint()?;
        self.checkpoint()?;
        let mut report = TrimReport::default();
        if first < data_blocks {
            let to = last.min(data_blocks);
            for g in first / group_blocks..to.div_ceil(group_blocks) {
                let runs = lock(&self.fs).log.space_mut().trim_group(GroupNo(g as u32), first, to, min)?;
                report.data_bytes += self.discard_taken(&runs)? * BLOCK_BYTES;
            }
        }
        if last > data_blocks {
            match self.trim_segments(first.saturating_sub(data_blocks), last - data_blocks, min) {
                Ok(n) => report.meta_bytes = n * BLOCK_BYTES,
                Err(Error::NotSupported) => report.meta_unsupported = true,
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }

    /// Discards runs a trim took from the allocator, and gives them back.
    fn discard_taken(&self, runs: &[Discard]) -> Result<u64> {
        if runs.is_empty() {
            return Ok(0);
        }
        let ranges = runs.iter().map(|d| (d.start, u64::from(d.len))).collect();
        let done = self.discard_ranges(DeviceRole::Data, ranges);
        lock(&self.fs).log.space_mut().discarded(runs);
        if let Ok(n) = done {
            self.discarded_blocks.fetch_add(n, Ordering::Relaxed);
        }
        done
    }

    /// Discards the log segments lying wholly inside meta-data blocks
    /// `[from, to)` that no checkpoint needs, in runs of at least `min`
    /// blocks; returns the blocks discarded.
    fn trim_segments(&self, from: u64, to: u64, min: u64) -> Result<u64> {
        let _c = lock(&self.commit);
        let segs = {
            let mut fs = lock(&self.fs);
            let g = fs.log.ifile().geometry();
            let blocks = u64::from(g.blocks);
            let lo = from.saturating_sub(g.first_block).div_ceil(blocks);
            let hi = to.saturating_sub(g.first_block) / blocks;
            let lo = u32::try_from(lo).unwrap_or(u32::MAX);
            let hi = u32::try_from(hi).unwrap_or(u32::MAX);
            let candidates = fs.log.segments_to_trim(lo..hi)?;
            // Runs of neighbouring segments shorter than `min` stay.
            let mut keep = Vec::new();
            let mut run: Vec<SegmentNo> = Vec::new();
            for s in candidates.into_iter().chain([SegmentNo(u32::MAX)]) {
                if run.last().is_some_and(|p| p.0 + 1 != s.0) {
                    if run.len() as u64 * blocks >= min {
                        keep.append(&mut run);
                    }
                    run.clear();
                }
                run.push(s);
            }
            fs.log.mark_discarded(&keep);
            keep
        };
        self.discard_segments(&segs)
    }
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn neighbouring_ranges_merge() {
        assert_eq!(merged(vec![(10, 2), (3, 4), (7, 3), (20, 1)]), vec![(3, 9), (20, 1)]);
    }
}
