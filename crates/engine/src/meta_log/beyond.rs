//! What lies beyond the end of roll-forward: telling damage from a crash.
//!
//! Roll-forward stops at the first partial segment that fails a check. A
//! crash explains that only when nothing written after it was ever made
//! durable: the commit groups are written one at a time, each flushed
//! before the next one is written, so a valid commit group found after a
//! later group boundary proves that every group before that boundary was
//! once on the disk whole. A partial segment that ends a group, followed in
//! the same lap of the log by a valid partial segment chained to it, is
//! such a proof; when roll-forward stopped before that boundary, commits
//! that were acknowledged are now unreadable: damage, not a crash.
//!
//! Where to look: the rest of the segment the log stopped in and the whole
//! of its reserved next segment (the only places the next partial segment
//! can be), and from every valid partial segment found there, the chain
//! onwards. A stale partial segment of an earlier lap never chains to one
//! of this lap, and a group discarded by an earlier recovery never had a
//! successor, so neither can pass for a proof.

use std::collections::BTreeMap;
use std::fmt;

use super::Log;
use super::recovery::ReadPs;
use crate::error::Result;
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::LogPosition;
use crate::format::descriptor::PS_GROUP_END;
use crate::types::{BLOCK_SIZE, MetaBlock, SegmentNo, Seq};

/// Valid partial segments found past the place roll-forward stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beyond {
    /// Valid partial segments found, by sequence number.
    pub partial_segments: u64,
    /// How many of them end a commit group.
    pub groups: u64,
    /// The lowest and highest sequence numbers among them.
    pub first: Seq,
    /// The highest.
    pub last: Seq,
    /// The highest sequence number proven to have been durable: a partial
    /// segment ending a commit group that a valid, chained partial segment
    /// follows. None when nothing proves it (a torn tail after a crash).
    pub acknowledged_through: Option<Seq>,
}

impl fmt::Display for Beyond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} valid partial segments ({} commit groups, sequence {}..={}) lie beyond it",
            self.partial_segments, self.groups, self.first.0, self.last.0
        )?;
        match self.acknowledged_through {
            Some(s) => write!(f, "; everything up to sequence {} had been made durable", s.0),
            None => write!(f, "; nothing shows they were ever made durable (a crash explains them)"),
        }
    }
}

/// Blocks read per request while scanning a segment for descriptors.
const SCAN_CHUNK_BLOCKS: u32 = 256;

/// Most blocks scanned in one segment (16 MiB): all of a default 1 MiB
/// segment; with the largest segments (256 MiB) a partial segment further
/// in than this goes unseen.
const SCAN_LIMIT_BLOCKS: u32 = 4096;

/// One partial segment found, with what the search needs of it.
#[derive(Clone, Copy, Debug)]
struct Found {
    /// The newest sequence its writer knew durable (0: not recorded).
    vouched: Seq,
    group_end: bool,
    desc_crc: u32,
    after: LogPosition,
}

impl Log {
    /// Looks for valid partial segments past `stop`, the place where the
    /// partial segment with sequence `stop.seq` was expected and not found.
    /// Reads at most two segments plus the chains it finds.
    ///
    /// # Errors
    /// A device fails.
    pub(crate) fn look_beyond(&self, stop: LogPosition) -> Result<Option<Beyond>> {
        let mut found: BTreeMap<(Seq, u32), Found> = BTreeMap::new();
        let mut starts: Vec<(SegmentNo, u32)> = Vec::new();
        for (seg, from) in [(stop.segment, stop.offset), (stop.next_segment, 0)] {
            starts.extend(self.descriptor_starts(seg, from, stop.seq)?);
        }
        let bound = u64::from(self.sb.segment_count) * u64::from(self.sb.segment_blocks);
        let mut steps = 0u64;
        for (seg, off) in starts {
            let Some(ps) = self.read_any_ps(seg, off)? else { continue };
            // Follow the chain from here; stop at anything already seen.
            let mut cur = ps;
            loop {
                steps += 1;
                let key = (cur.desc.seq, cur.desc_crc);
                if found.contains_key(&key) || steps > bound {
                    break;
                }
                let f = Found {
                    vouched: self.vouched_by(cur.desc.segment, cur.desc.offset)?,
                    group_end: cur.desc.flags & PS_GROUP_END != 0,
                    desc_crc: cur.desc_crc,
                    after: cur.after(),
                };
                found.insert(key, f);
                cur = match self.next_in_chain(f.after)? {
                    Some(next) => next,
                    None => break,
                };
            }
        }
        if found.is_empty() {
            return Ok(None);
        }
        // A group end whose successor (sequence + 1, naming its checksum)
        // was found too: that group was flushed before the successor was written.
        let mut acknowledged_through: Option<Seq> = None;
        for (&(seq, _), f) in &found {
            let proven = if f.group_end && self.chained_after(f)? { seq.max(f.vouched) } else { f.vouched };
            if proven.0 > 0 {
                acknowledged_through = Some(acknowledged_through.map_or(proven, |a| a.max(proven)));
            }
        }
        let seqs: Vec<Seq> = found.keys().map(|k| k.0).collect();
        Ok(Some(Beyond {
            partial_segments: found.len() as u64,
            groups: found.values().filter(|f| f.group_end).count() as u64,
            first: seqs.iter().copied().min().unwrap_or(stop.seq),
            last: seqs.iter().copied().max().unwrap_or(stop.seq),
            acknowledged_through,
        }))
    }

    /// What the descriptor at `seg`/`off` vouches for: its first block's
    /// header `owner` (FORMAT.md 3.3).
    fn vouched_by(&self, seg: SegmentNo, off: u32) -> Result<Seq> {
        let at = MetaBlock(self.ifile.geometry().start(seg).0 + u64::from(off));
        let raw = self.read_meta(at, 1)?;
        Ok(block::open_block(&raw, at, self.volume_id).map_or(Seq(0), |(h, _)| Seq(h.owner.0)))
    }

    /// Whether a valid partial segment follows `f` in its chain.
    fn chained_after(&self, f: &Found) -> Result<bool> {
        Ok(self.next_in_chain(f.after)?.is_some_and(|n| n.desc.prev_crc == f.desc_crc))
    }

    /// The valid partial segment continuing the chain at `after`, if any.
    fn next_in_chain(&self, after: LogPosition) -> Result<Option<ReadPs>> {
        if let Ok(ps) = self.read_ps(after.segment, after.offset, after.seq, after.prev_crc)? {
            return Ok(Some(ps));
        }
        Ok(self.read_ps(after.next_segment, 0, after.seq, after.prev_crc)?.ok())
    }

    /// A valid partial segment of any sequence at `seg`/`off`.
    pub(super) fn read_any_ps(&self, seg: SegmentNo, off: u32) -> Result<Option<ReadPs>> {
        let Ok((desc, _, _)) = self.read_descriptor(seg, off, None)? else { return Ok(None) };
        Ok(self.read_ps(seg, off, desc.seq, desc.prev_crc)?.ok())
    }

    /// Offsets from `from` on in `seg` where an intact first descriptor
    /// block of sequence `seq` or later begins (the search for a twin).
    pub(super) fn descriptor_starts_of(&self, seg: SegmentNo, from: u32, seq: Seq) -> Result<Vec<u32>> {
        Ok(self.descriptor_starts(seg, from, seq)?.into_iter().map(|(_, off)| off).collect())
    }

    /// Offsets from `from` on in `seg` where an intact first descriptor
    /// block of sequence `min_seq` or later begins.
    fn descriptor_starts(&self, seg: SegmentNo, from: u32, min_seq: Seq) -> Result<Vec<(SegmentNo, u32)>> {
        let blocks = self.sb.segment_blocks;
        if seg.0 >= self.sb.segment_count || from >= blocks {
            return Ok(Vec::new());
        }
        let seg_start = self.ifile.geometry().start(seg).0;
        let end = blocks.min(from.saturating_add(SCAN_LIMIT_BLOCKS));
        let mut out = Vec::new();
        let mut off = from;
        while off < end {
            let n = (end - off).min(SCAN_CHUNK_BLOCKS);
            let raw = self.read_meta(MetaBlock(seg_start + u64::from(off)), n as usize)?;
            for (i, b) in raw.chunks_exact(BLOCK_SIZE).enumerate() {
                if !block::has_magic(b) {
                    continue;
                }
                let at = MetaBlock(seg_start + u64::from(off) + i as u64);
                if let Ok((h, _)) = block::open_block_of_kind(b, at, self.volume_id, BlockKind::Descriptor)
                    && h.aux == 0
                    && h.seq >= min_seq
                {
                    out.push((seg, off + i as u32));
                }
            }
            off += n;
        }
        Ok(out)
    }
}
