//! Which log segments may be discarded (`-o discard`, trims).
//!
//! A segment the log may write into ([`Log::segment_is_free`]) holds
//! nothing the durable checkpoint needs, but the checkpoint before it is
//! what a mount falls back to when the newer slot is damaged, and its maps
//! may point into a segment emptied since. Writing into such a segment
//! comes late (the log goes round the device first); a discard would come
//! at once. So a segment is discarded only when, besides being free:
//! - the two newest checkpoints were both sealed after it came to hold
//!   nothing (their maps point elsewhere; [`crate::ifile`]'s `Emptied`);
//! - nothing in it lies in the previous checkpoint's roll-forward range;
//! - it holds none of the previous checkpoint's own IFile blocks, and no
//!   snapshot that checkpoint lists pins it.

use std::collections::{HashMap, HashSet};

use super::Log;
use crate::error::Result;
use crate::faults::{self, Fault};
use crate::types::{SegmentNo, Seq};

/// What the checkpoint before the durable one still needs.
#[derive(Clone, Debug, Default)]
pub struct PreviousCheckpoint {
    /// Where its roll-forward starts.
    pub seq: Seq,
    /// Its own IFile blocks, by segment.
    pub pins: HashMap<SegmentNo, u32>,
    /// Segments its snapshots pin.
    pub snapshot_pins: HashSet<SegmentNo>,
}

impl Log {
    /// Tags the segments emptied since the last call with the first
    /// checkpoint to be sealed after them.
    pub(crate) fn tag_emptied(&mut self) {
        let n = self.ckpt.number + 1 + u64::from(self.checkpoint_unwritten);
        self.ifile.emptied.tag(n);
    }

    /// Remembers what the durable checkpoint needs, before a newer one
    /// becomes durable and it turns into the previous one.
    pub(crate) fn keep_previous_checkpoint(&mut self) {
        self.previous = Some(PreviousCheckpoint {
            seq: self.ckpt.log.seq,
            pins: self.ckpt.pins.clone(),
            snapshot_pins: self.snaps.pins.keys().copied().collect(),
        });
    }

    /// Whether the checkpoint in the other slot, which a mount falls back
    /// to when the newer one is lost, lists other snapshots than the one
    /// the volume was opened from: a writable open checkpoints at once
    /// then, before anything is handed out, so that nothing a snapshot
    /// deleted since holds is written or discarded while it is listed.
    #[must_use]
    pub fn older_checkpoint_lists_other_snapshots(&self) -> bool {
        self.older_lists_other && self.previous.is_none()
    }

    /// Whether segment `s` may be discarded now (see the module's rules);
    /// false while its usage entry is not at hand, and for one discarded
    /// already and not written since.
    #[must_use]
    pub fn segment_discardable(&self, s: SegmentNo) -> bool {
        let Some(prev) = &self.previous else { return false };
        if self.ifile.emptied.discarded.contains(&s.0) || !self.segment_is_free(s) {
            return false;
        }
        if faults::active(Fault::DiscardSegmentEarly) {
            return true;
        }
        let Some(u) = self.ifile.segment_known(s) else { return false };
        // Empty since the volume was opened: as the checkpoint it was
        // opened from saw it.
        let emptied = self.ifile.emptied.since.get(&s.0).copied().unwrap_or(self.opened_at);
        emptied != 0
            && emptied < self.ckpt.number
            && u.last_seq < prev.seq
            && !prev.pins.contains_key(&s)
            && !prev.snapshot_pins.contains(&s)
    }

    /// The segments emptied while the volume was open that may be
    /// discarded now (`-o discard`, after each checkpoint), marked
    /// discarded: the caller discards them before the log writes again.
    pub fn emptied_to_discard(&mut self) -> Vec<SegmentNo> {
        self.tag_emptied();
        let candidates: Vec<SegmentNo> = self.ifile.emptied.since.keys().map(|&s| SegmentNo(s)).collect();
        let out: Vec<SegmentNo> = candidates.into_iter().filter(|&s| self.segment_discardable(s)).collect();
        self.mark_discarded(&out);
        out
    }

    /// Every segment in `range` that may be discarded now (a trim),
    /// reading usage entries as it goes; the caller marks those it
    /// discards ([`Log::mark_discarded`]).
    ///
    /// # Errors
    /// A usage block cannot be read.
    pub fn segments_to_trim(&mut self, range: std::ops::Range<u32>) -> Result<Vec<SegmentNo>> {
        self.tag_emptied();
        let mut out = Vec::new();
        for s in range.start..range.end.min(self.sb.segment_count) {
            let s = SegmentNo(s);
            if self.ifile.emptied.discarded.contains(&s.0) {
                continue;
            }
            self.ensure_usage(s)?;
            if self.segment_discardable(s) {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Records that `segs` are being discarded: none is discarded again
    /// until the log writes into it.
    pub fn mark_discarded(&mut self, segs: &[SegmentNo]) {
        for s in segs {
            self.ifile.emptied.since.remove(&s.0);
            self.ifile.emptied.discarded.insert(s.0);
        }
    }

    /// The meta-data blocks of segment `s`: (first, count).
    #[must_use]
    pub fn segment_blocks(&self, s: SegmentNo) -> (u64, u64) {
        let g = self.ifile.geometry();
        (g.first_block + u64::from(s.0) * u64::from(g.blocks), u64::from(g.blocks))
    }
}
