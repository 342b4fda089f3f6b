//! Which segments the log may write into, and the reserve kept for
//! checkpoints and the cleaner.
//!
//! A segment may be (re)used only when all of these hold (ordering rule 2):
//! - no live inode or block is left in it (segment usage says 0 bytes);
//! - nothing in it was written since the newest durable checkpoint, whose
//!   roll-forward would read it (its last sequence number is older);
//! - it holds no block of that checkpoint's IFile;
//! - it is neither the segment the log is writing nor the one reserved to follow.

use super::Log;
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::types::SegmentNo;

/// Whether an operation grows meta-data or releases it. Releasing operations
/// (unlink, rmdir, truncate) may dip into half of the reserve, so that a full
/// meta-data device can always be emptied again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OpKind {
    /// Creates or enlarges meta-data.
    Grow,
    /// Mostly frees meta-data.
    Shrink,
    /// Moves live meta-data out of a victim segment (the cleaner): may use
    /// the reserve down to the room a checkpoint needs.
    Clean,
}

impl Log {
    /// Whether segment `s` may be written into now (false while its usage
    /// entry is not at hand: [`Log::pick_free_segment`] reads it).
    #[must_use]
    pub fn segment_is_free(&self, s: SegmentNo) -> bool {
        if s.0 >= self.usable_segments || s.0 >= self.segment_limit {
            return false;
        }
        let Some(u) = self.ifile.segment_known(s) else { return false };
        if faults::active(Fault::SegmentReuse) {
            return u.live_bytes == 0 && s != self.head.segment && s != self.head.next_segment;
        }
        u.live_bytes == 0
            && u.ifile_blocks == 0
            && u.last_seq < self.ckpt.log.seq
            && s != self.head.segment
            && s != self.head.next_segment
            && !self.ckpt.pins.contains_key(&s)
            && !self.snaps.pins.contains_key(&s)
    }

    /// Number of segments that may be written into: those holding nothing
    /// (counted as their entries change), less the few of them kept for
    /// another reason (the durable checkpoint's own blocks, snapshots,
    /// a write since the checkpoint, the head, past a resize's end). A
    /// segment whose entry is not at hand counts as kept: the count errs
    /// low, never high.
    #[must_use]
    pub fn free_segments(&self) -> u32 {
        let count = self.sb.segment_count;
        if faults::active(Fault::SegmentReuse) {
            // The broken rule's segments, counted as it picks them.
            return (0..count).filter(|&s| self.segment_is_free(SegmentNo(s))).count() as u32;
        }
        let end = self.usable_segments.min(self.segment_limit).min(count);
        let taken = |s: u32| self.ifile.is_vacant(SegmentNo(s)).unwrap_or(true);
        let mut kept: i64 = (end..count).filter(|&s| taken(s)).count() as i64;
        let mut others: Vec<u32> = self.ckpt.pins.keys().map(|s| s.0).collect();
        others.extend(self.snaps.pins.keys().map(|s| s.0));
        others.extend(self.ifile.written_since_checkpoint().keys().copied());
        others.extend([self.head.segment.0, self.head.next_segment.0]);
        others.retain(|&s| s < end);
        others.sort_unstable();
        others.dedup();
        kept += others.into_iter().filter(|&s| taken(s)).count() as i64;
        (self.ifile.vacant_segments() as i64 - kept).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// The first free segment after the log's head, in log order, but
    /// those in `skip`, reading usage entries as it goes.
    ///
    /// # Errors
    /// A usage block cannot be read.
    pub fn pick_free_segment_after(&mut self, from: SegmentNo, skip: &[SegmentNo]) -> Result<Option<SegmentNo>> {
        let n = self.sb.segment_count;
        for i in 1..=n {
            let s = SegmentNo((from.0 + i) % n);
            if skip.contains(&s) {
                continue;
            }
            self.ensure_usage(s)?;
            if self.segment_is_free(s) {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    /// The first free segment after the log's current one, in log order.
    ///
    /// # Errors
    /// A usage block cannot be read.
    pub fn pick_free_segment(&mut self) -> Result<Option<SegmentNo>> {
        self.pick_free_segment_after(self.head.segment, &[])
    }

    /// Segments a checkpoint of the whole IFile needs.
    #[must_use]
    pub fn checkpoint_segments(&self) -> u32 {
        let ifile_blocks: usize = self.ifile.segments.block_count()
            + self.ifile.inodes.block_count()
            + self.ifile.nodes.block_count()
            + self.space.groups.block_count()
            + self.space.bitmap.block_count();
        let index_blocks = ifile_blocks.div_ceil(crate::format::ifile::INDEX_PER_BLOCK) + 5;
        ((ifile_blocks + index_blocks).div_ceil(self.sb.segment_blocks as usize - 8) as u32) + 1
    }

    /// Segments held back from operations of `kind`, in layers: a
    /// checkpoint's room is never touched but by the checkpoint; above it,
    /// two segments let the cleaner move a victim's live data (it takes
    /// less than a segment to free one); above that, two more keep releasing
    /// operations (unlink, rmdir, truncate) going when growing ones stop,
    /// so that a full meta-data device can always be emptied again.
    #[must_use]
    pub fn reserve_for(&self, kind: OpKind) -> u32 {
        let ckpt = self.checkpoint_segments();
        match kind {
            OpKind::Clean => ckpt,
            OpKind::Shrink => ckpt + 2,
            OpKind::Grow => ckpt + 4,
        }
    }

    /// Segments held back from ordinary (growing) operations.
    #[must_use]
    pub fn reserve_segments(&self) -> u32 {
        self.reserve_for(OpKind::Grow)
    }

    /// Checks that an operation of `kind` has room on the meta-data device.
    ///
    /// # Errors
    /// `NoSpace(Meta)` when only the reserve is left.
    pub fn check_meta_space(&self, kind: OpKind) -> Result<()> {
        if self.estimate_blocks() + super::OP_MAX_BLOCKS <= self.available_blocks(kind) {
            Ok(())
        } else {
            Err(Error::NoSpace(DeviceRole::Meta))
        }
    }

    /// Recounts free segments (after the IFile was loaded or rolled forward).
    pub(crate) fn recount_free_segments(&mut self) {
        self.free_segments_cached = self.free_segments();
    }
}
