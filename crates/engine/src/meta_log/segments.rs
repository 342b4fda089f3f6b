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
    /// Whether segment `s` may be written into now.
    #[must_use]
    pub fn segment_is_free(&self, s: SegmentNo) -> bool {
        if s.0 >= self.usable_segments || s.0 >= self.segment_limit {
            return false;
        }
        let u = self.ifile.segment(s);
        if faults::active(Fault::SegmentReuse) {
            return u.live_bytes == 0 && s != self.head.segment && s != self.head.next_segment;
        }
        u.live_bytes == 0
            && u.last_seq < self.ckpt.log.seq
            && s != self.head.segment
            && s != self.head.next_segment
            && !self.ckpt.pins.contains_key(&s)
            && !self.snaps.pins.contains_key(&s)
    }

    /// Number of segments that may be written into.
    #[must_use]
    pub fn free_segments(&self) -> u32 {
        (0..self.sb.segment_count).filter(|&s| self.segment_is_free(SegmentNo(s))).count() as u32
    }

    /// The first free segment after the log's current one, in log order.
    #[must_use]
    pub fn pick_free_segment(&self) -> Option<SegmentNo> {
        let n = self.sb.segment_count;
        (1..=n).map(|i| SegmentNo((self.head.segment.0 + i) % n)).find(|&s| self.segment_is_free(s))
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
