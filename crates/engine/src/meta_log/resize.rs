//! Growing the log's geometry in memory: new segments in the segment
//! usage table, new groups in the data space. What makes a grow durable
//! and crash-safe (the superblocks' reach first, then a checkpoint that
//! names the new geometry) is [`crate::volume`]'s; this only keeps the
//! IFile's tables in step with the geometry.

use super::Log;
use crate::error::{Error, Result};
use crate::format::checkpoint::{MAX_INDEX_BLOCKS, index_blocks_for, index_entries_bound};
use crate::format::superblock::Geometry;
use crate::types::SegmentNo;

impl Log {
    /// IFile index blocks a checkpoint at geometry `g` needs, with the
    /// inode and node maps as they are.
    #[must_use]
    pub fn index_blocks_at(&self, g: Geometry) -> usize {
        let groups = g.data_blocks.div_ceil(u64::from(self.sb.group_blocks));
        index_blocks_for(
            u64::from(g.segment_count),
            groups,
            g.data_blocks,
            self.ifile.inodes.len() as u64,
            self.ifile.nodes.len() as u64,
        )
    }

    /// See [`index_entries_bound`].
    #[must_use]
    pub fn index_entries_bound(&self, index_blocks: usize) -> usize {
        index_entries_bound(index_blocks, self.sb.segment_blocks, self.sb.index_runs())
    }

    /// Whether geometry `g` can be grown to: no smaller than the one in
    /// use, indexable by one checkpoint.
    ///
    /// # Errors
    /// [`Error::Resize`] saying which limit `g` passes.
    pub fn check_grow(&self, g: Geometry) -> Result<()> {
        let now = self.sb.geometry();
        if g.segment_count < now.segment_count || g.data_blocks < now.data_blocks {
            return Err(Error::Resize(format!(
                "{} segments and {} data blocks is smaller than the {} and {} in use",
                g.segment_count, g.data_blocks, now.segment_count, now.data_blocks
            )));
        }
        if self.sb.with_geometry(g).is_none() {
            return Err(Error::Resize(format!("{} data blocks make too many groups", g.data_blocks)));
        }
        let need = self.index_blocks_at(g);
        if self.index_entries_bound(need) > MAX_INDEX_BLOCKS {
            return Err(Error::Resize(format!(
                "the IFile would need {need} index blocks, more than one checkpoint can name{}",
                if self.sb.index_runs() { "" } else { " on a volume of format 1.4 (mkfs a 1.5 volume)" }
            )));
        }
        Ok(())
    }

    /// Grows the geometry in use to `g` (checked by [`Log::check_grow`],
    /// and within the superblocks' reach, written before):
    /// the new segments are not written into until a checkpoint naming
    /// them is durable; the new data blocks are free at once (no commit
    /// can name them before that checkpoint: the caller holds off commits
    /// by checkpointing next).
    ///
    /// # Errors
    /// As [`Log::check_grow`].
    pub fn grow(&mut self, g: Geometry) -> Result<()> {
        self.check_grow(g)?;
        let reach = self.on_disk.geometry();
        if g.segment_count > reach.segment_count || g.data_blocks > reach.data_blocks {
            return Err(Error::Resize(format!(
                "{} segments and {} data blocks lie beyond the superblocks' {} and {}",
                g.segment_count, g.data_blocks, reach.segment_count, reach.data_blocks
            )));
        }
        let Some(sb) = self.sb.with_geometry(g) else { unreachable!("checked by check_grow") };
        self.ifile.grow_segments(g.segment_count);
        self.space.grow(g.data_blocks)?;
        self.sb = sb;
        self.recount_free_segments();
        Ok(())
    }
}

impl Log {
    /// Stops the log from writing into segments at or past `n` (a shrink
    /// under way), or lets it again (`None`).
    pub fn limit_segments(&mut self, n: Option<u32>) {
        self.segment_limit = n.unwrap_or(u32::MAX);
        self.recount_free_segments();
    }

    /// Segments at or past `n` that still hold something: live inodes or
    /// nodes, the durable checkpoint's IFile blocks, its roll-forward
    /// range, or the log's head.
    #[must_use]
    pub fn segments_in_use_from(&self, n: u32) -> Vec<SegmentNo> {
        (n..self.sb.segment_count)
            .map(SegmentNo)
            .filter(|&s| {
                let u = self.ifile.segment(s);
                u.live_bytes > 0
                    || u.ifile_blocks > 0
                    || u.last_seq >= self.ckpt.log.seq
                    || s == self.head.segment
                    || s == self.head.next_segment
                    || self.ckpt.pins.contains_key(&s)
            })
            .collect()
    }

    /// Moves the head to free segments below the limit if it or its
    /// reserved next segment lies past it (before a checkpoint, which then
    /// starts its chain there; FORMAT.md 4.4).
    ///
    /// # Errors
    /// A usage block cannot be read.
    pub fn leave_limited_segments(&mut self) -> Result<()> {
        if self.head.segment.0 >= self.segment_limit || self.head.next_segment.0 >= self.segment_limit {
            self.detach_head()?;
        }
        Ok(())
    }

    /// Live bytes the log holds (inodes, nodes, the durable checkpoint's
    /// IFile blocks).
    #[must_use]
    pub fn live_log_bytes(&self) -> u64 {
        self.meta_live_bytes()
    }

    /// Whether the log can shrink to `n` segments: at least the minimum,
    /// and room in them for what is live, the reserve and a margin for the
    /// cleaner's moves (each moved block lands in a partial segment with
    /// its descriptor).
    ///
    /// # Errors
    /// [`Error::Resize`] saying how much room is needed.
    pub fn check_shrink(&self, n: u32) -> Result<()> {
        let seg_bytes = u64::from(self.sb.segment_blocks) * crate::types::BLOCK_BYTES;
        if n < 16 {
            return Err(Error::Resize(format!("a log needs at least 16 segments, {n} were asked for")));
        }
        let live = self.live_log_bytes();
        // Live data packs to about 80% of a segment after moves; the
        // reserve and two segments for the moves in flight stay free.
        let need = (live * 5 / 4).div_ceil(seg_bytes) + u64::from(self.reserve_segments()) + 2;
        if u64::from(n) < need {
            return Err(Error::Resize(format!(
                "the log holds {} MiB of live meta-data: it needs at least {need} segments ({} MiB of \
                 meta-data device) with its reserve, {n} were asked for",
                live >> 20,
                (need * seg_bytes + self.sb.first_segment_block * crate::types::BLOCK_BYTES) >> 20
            )));
        }
        Ok(())
    }

    /// Cuts the log to `n` segments, all of which past `n` hold nothing
    /// ([`Log::segments_in_use_from`] is empty): the next checkpoint names
    /// the smaller geometry.
    ///
    /// # Errors
    /// [`Error::Resize`] when a segment past `n` still holds something.
    pub fn shrink_segments(&mut self, n: u32) -> Result<()> {
        let busy = self.segments_in_use_from(n);
        if let Some(s) = busy.first() {
            return Err(Error::Resize(format!(
                "segment {} (and {} more) past the new end still holds meta-data",
                s.0,
                busy.len() - 1
            )));
        }
        let g = Geometry { segment_count: n, data_blocks: self.sb.data_blocks };
        let Some(sb) = self.sb.with_geometry(g) else {
            return Err(Error::Resize(format!("{n} segments do not make a volume")));
        };
        self.cut_segments(n, sb);
        Ok(())
    }

    /// [`Log::shrink_segments`] whatever the segments past `n` hold: the
    /// deliberately broken rule of `Fault::ShrinkBeforeEmpty`.
    pub fn force_shrink_segments(&mut self, n: u32) {
        let g = Geometry { segment_count: n, data_blocks: self.sb.data_blocks };
        if let Some(sb) = self.sb.with_geometry(g) {
            for s in n..self.sb.segment_count {
                self.ifile.forget_segment(SegmentNo(s));
            }
            self.cut_segments(n, sb);
        }
    }

    /// Whether the data space can shrink to `n` blocks: at least a minimal
    /// volume's, and room below `n` for the blocks in use past it, with a
    /// margin (a hundredth of what is left, at least 256 blocks) for the
    /// writes that go on meanwhile.
    ///
    /// # Errors
    /// [`Error::Resize`] saying how much room is needed; a group's bitmap
    /// cannot be loaded.
    pub fn check_data_shrink(&mut self, n: u64) -> Result<()> {
        let g = Geometry { segment_count: self.sb.segment_count, data_blocks: n };
        if self.sb.with_geometry(g).is_none() {
            return Err(Error::Resize(format!("a data device needs at least 1 MiB, {} KiB were asked for", n * 4)));
        }
        let past = self.space.used_from(n)?;
        let below = self.space.free_below(n)?;
        let margin = (n / 100).max(256);
        if below < past + margin {
            let mib = |b: u64| (b * crate::types::BLOCK_BYTES).div_ceil(1 << 20);
            return Err(Error::Resize(format!(
                "the data device holds {} MiB of file data past {} MiB, and only {} MiB are free below it \
                 ({} MiB more are kept free for the writes meanwhile): delete files or shrink less",
                mib(past),
                mib(n),
                mib(below),
                mib(margin)
            )));
        }
        Ok(())
    }

    /// Cuts the data space to `n` blocks, none of which past `n` is in use:
    /// the next checkpoint names the smaller geometry (the commit point).
    ///
    /// # Errors
    /// [`Error::Resize`] when a block past `n` is still in use; a group's
    /// bitmap cannot be loaded.
    pub fn shrink_data(&mut self, n: u64) -> Result<()> {
        let used = self.space.used_from(n)?;
        if used > 0 {
            return Err(Error::Resize(format!("{used} data blocks past the new end are still in use")));
        }
        self.cut_data(n, false)
    }

    /// [`Log::shrink_data`] whatever lies past `n`: the deliberately broken
    /// rule of `Fault::ShrinkDataBeforeEmpty`.
    ///
    /// # Errors
    /// As [`Log::shrink_data`].
    pub fn force_shrink_data(&mut self, n: u64) -> Result<()> {
        self.cut_data(n, true)
    }

    fn cut_data(&mut self, n: u64, force: bool) -> Result<()> {
        let g = Geometry { segment_count: self.sb.segment_count, data_blocks: n };
        let Some(sb) = self.sb.with_geometry(g) else {
            return Err(Error::Resize(format!("{n} data blocks do not make a volume")));
        };
        self.space.shrink(n, force)?;
        self.sb = sb;
        Ok(())
    }

    fn cut_segments(&mut self, n: u32, sb: crate::format::superblock::Superblock) {
        self.ifile.shrink_segments(n);
        self.sb = sb;
        self.usable_segments = self.usable_segments.min(n);
        self.recount_free_segments();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::device::MemoryDevice;
    use crate::format::superblock::INCOMPAT_RESIZED;

    fn log() -> Log {
        let sb = crate::format::superblock::sample();
        Log::fresh(sb, Arc::new(MemoryDevice::new(64 * 256)), Arc::new(MemoryDevice::new(1 << 20)))
    }

    #[test]
    fn a_grow_beyond_the_superblocks_reach_or_below_the_size_in_use_is_refused() {
        let mut l = log();
        let now = l.superblock().geometry();
        let more = Geometry { segment_count: now.segment_count + 8, data_blocks: now.data_blocks + 4096 };
        assert!(matches!(l.grow(more), Err(Error::Resize(_))));
        let mut reach = l.superblock_on_disk().with_geometry(more).unwrap();
        reach.incompat |= INCOMPAT_RESIZED;
        l.superblock_written(reach);
        let less = Geometry { segment_count: now.segment_count - 1, ..now };
        assert!(matches!(l.grow(less), Err(Error::Resize(_))));
        l.grow(more).unwrap();
        assert_eq!(l.superblock().geometry(), more);
        // The new segments wait for a checkpoint naming them.
        assert!(!l.segment_is_free(crate::types::SegmentNo(now.segment_count)));
        assert_eq!(l.space().total_blocks(), more.data_blocks);
    }
}
