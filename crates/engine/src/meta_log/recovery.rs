//! Roll-forward (paper §3.3): bring the IFile of the newest checkpoint up to
//! date from the partial segments written after it.
//!
//! Nothing is redone or undone: each valid partial segment's change records
//! and block placements are applied to the IFile, exactly as sealing applied
//! them before the crash. A partial segment is valid only if its descriptor
//! and every body block verify, its sequence number is the next one, and it
//! names the previous descriptor's checksum; the first one that is not ends
//! the log.

use std::time::Instant;

use super::Log;
use crate::error::Result;
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::LogPosition;
use crate::format::checksum;
use crate::format::codec::Writer;
use crate::format::descriptor::{Change, Descriptor, PS_GROUP_END, PsKind};
use crate::types::{BLOCK_SIZE, MetaBlock, SegmentNo, Seq};

/// Why roll-forward stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEnd {
    /// No partial segment followed the last one.
    Clean,
    /// The candidate after the last one failed a check (named): the tail of
    /// the log was torn by a crash, or never written.
    Invalid(String),
}

/// What roll-forward did.
#[derive(Clone, Debug)]
pub struct RecoveryReport {
    /// Partial segments applied (in complete commit groups).
    pub partial_segments: u64,
    /// Blocks read from the log.
    pub blocks_scanned: u64,
    /// How it ended.
    pub end: LogEnd,
    /// Wall time in microseconds.
    pub micros: u64,
}

/// One partial segment read back from the log.
struct ReadPs {
    desc: Descriptor,
    desc_crc: u32,
    first_body: MetaBlock,
    blocks: u32,
}

impl Log {
    /// Rolls forward from the loaded checkpoint to the end of the log.
    ///
    /// # Errors
    /// A device fails (an invalid partial segment is the end of the log, not an error).
    pub(crate) fn roll_forward(&mut self) -> Result<RecoveryReport> {
        let started = Instant::now();
        let mut pos = self.ckpt.log;
        let mut applied_pos = pos;
        let mut report = RecoveryReport { partial_segments: 0, blocks_scanned: 0, end: LogEnd::Clean, micros: 0 };
        let mut group: Vec<ReadPs> = Vec::new();
        let mut touched: Vec<SegmentNo> = Vec::new();
        loop {
            let mut why = String::new();
            let mut found = None;
            for (seg, off) in [(pos.segment, pos.offset), (pos.next_segment, 0)] {
                match self.read_ps(seg, off, pos.seq, pos.prev_crc)? {
                    Ok(ps) => {
                        found = Some(ps);
                        break;
                    }
                    Err(reason) => {
                        if why.is_empty() {
                            why = reason;
                        }
                    }
                }
            }
            let Some(ps) = found else {
                report.end = if !group.is_empty() {
                    LogEnd::Invalid(format!("a commit group was cut short ({why})"))
                } else if why.starts_with("no partial segment") {
                    LogEnd::Clean
                } else {
                    LogEnd::Invalid(why)
                };
                break;
            };
            report.blocks_scanned += u64::from(ps.blocks);
            touched.push(ps.desc.segment);
            pos = LogPosition {
                seq: ps.desc.seq.next(),
                segment: ps.desc.segment,
                offset: ps.desc.offset + ps.blocks,
                next_segment: ps.desc.next_segment,
                prev_crc: ps.desc_crc,
            };
            let end = ps.desc.flags & PS_GROUP_END != 0;
            group.push(ps);
            if end {
                report.partial_segments += group.len() as u64;
                self.apply_group(&group);
                group.clear();
                applied_pos = pos;
            }
        }
        self.durable = Seq(applied_pos.seq.0 - 1);
        self.head = applied_pos;
        // Segments a cut-short group wrote into hold nothing live, but must
        // not be reused before the recovery checkpoint moves past them.
        for ps in &group {
            self.ifile.note_write(ps.desc.segment, ps.desc.seq);
        }
        if matches!(report.end, LogEnd::Invalid(_)) {
            // A torn tail lies where the next partial segment was expected.
            // Writing there again, with the same sequence number, could let
            // a later torn write complete the old partial segment instead
            // of the new one and bring back a group recovery discarded.
            touched.extend([pos.segment, pos.next_segment]);
        }
        if !touched.is_empty() {
            // Never append behind a crash: whatever the torn tail left stays
            // untouched; the log resumes in a segment nothing was read from.
            let resume = self.pick_free_segment().filter(|s| !touched.contains(s));
            if let Some(seg) =
                resume.or((!touched.contains(&applied_pos.next_segment)).then_some(applied_pos.next_segment))
            {
                self.head.segment = seg;
                self.head.offset = 0;
                self.head.next_segment = seg;
                if let Some(next) = self.pick_free_segment() {
                    self.head.next_segment = next;
                }
            }
        }
        self.blocks_since_checkpoint = report.blocks_scanned;
        self.ifile.rebuild_free_lists();
        self.space.recount();
        self.recount_free_segments();
        report.micros = started.elapsed().as_micros() as u64;
        Ok(report)
    }

    /// Applies one complete commit group: its change records (in order),
    /// then its placements, then its orphan-list changes (which concern
    /// inodes the placements may have just brought into use).
    fn apply_group(&mut self, group: &[ReadPs]) {
        for ps in group {
            if ps.desc.kind == PsKind::Normal {
                for c in &ps.desc.changes {
                    if !matches!(c, Change::OrphanAdd(_) | Change::OrphanRemove(_)) {
                        self.apply_change(*c);
                    }
                }
            }
        }
        for ps in group {
            if ps.desc.kind == PsKind::Normal {
                let first_inode_block = MetaBlock(ps.first_body.0 + ps.desc.blocks.len() as u64);
                self.apply_placements(&ps.desc, ps.first_body, first_inode_block);
            }
            self.ifile.note_write(ps.desc.segment, ps.desc.seq);
        }
        for ps in group {
            if ps.desc.kind == PsKind::Normal {
                for c in &ps.desc.changes {
                    if matches!(c, Change::OrphanAdd(_) | Change::OrphanRemove(_)) {
                        self.apply_change(*c);
                    }
                }
            }
        }
    }

    /// Applies one change record to the IFile.
    pub(crate) fn apply_change(&mut self, c: Change) {
        match c {
            Change::NodeFree(id) => self.ifile.free_node(id),
            Change::InodeFree { ino, generation } => self.ifile.free_inode(ino, generation),
            Change::DataAlloc { start, len } => {
                self.space.mark_used(start, len);
            }
            Change::DataFree { start, len } => {
                self.space.mark_free(start, len);
            }
            Change::OrphanAdd(ino) => self.ifile.set_orphan(ino, true),
            Change::OrphanRemove(ino) => self.ifile.set_orphan(ino, false),
        }
    }

    /// Reads and decodes the descriptor of the partial segment at
    /// `seg`/`off`, whatever its sequence (`seq`: the one it must have).
    /// Returns it with its checksum and its number of descriptor blocks;
    /// the inner error says why there is none.
    pub(crate) fn read_descriptor(
        &self,
        seg: SegmentNo,
        off: u32,
        seq: Option<Seq>,
    ) -> Result<std::result::Result<(Descriptor, u32, usize), String>> {
        let seg_blocks = self.sb.segment_blocks;
        if seg.0 >= self.sb.segment_count || off >= seg_blocks {
            return Ok(Err("no partial segment: position beyond the segment".into()));
        }
        let start = self.ifile.geometry().start(seg).0 + u64::from(off);
        let first = self.read_meta(MetaBlock(start), 1)?;
        let (h, p) = match block::open_block_of_kind(&first, MetaBlock(start), self.volume_id, BlockKind::Descriptor) {
            Ok(x) => x,
            // A block that carries the magic but fails its checksum was
            // being written when the power failed: a torn tail, not the
            // clean end of the log (which is unwritten or stale blocks).
            Err(e) if first[..4] == block::BLOCK_MAGIC.to_le_bytes() && !checksum::verify(&first[..BLOCK_SIZE], 4) => {
                return Ok(Err(format!("torn descriptor at block {start}: {e}")));
            }
            Err(e) => return Ok(Err(format!("no partial segment at block {start}: {e}"))),
        };
        if seq.is_some_and(|s| h.seq != s) || h.aux != 0 {
            return Ok(Err(format!(
                "no partial segment: block {start} holds sequence {} where {seq:?} was expected",
                h.seq.0
            )));
        }
        let seq = h.seq;
        let n = match Descriptor::peek(p) {
            Ok((_, n)) if n >= 1 && off as usize + n <= seg_blocks as usize => n,
            _ => {
                return Ok(Err(format!("descriptor at block {start} claims more blocks than the segment has")));
            }
        };
        let mut raw = first;
        if n > 1 {
            raw.extend_from_slice(&self.read_meta(MetaBlock(start + 1), n - 1)?);
        }
        let mut payloads = Vec::with_capacity(n);
        for i in 0..n {
            let at = MetaBlock(start + i as u64);
            match block::open_block_of_kind(
                &raw[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE],
                at,
                self.volume_id,
                BlockKind::Descriptor,
            ) {
                Ok((h, p)) if h.seq == seq && h.aux as usize == i => payloads.push(p),
                Ok(_) => {
                    return Ok(Err(format!("descriptor block {} belongs to another partial segment", at.0)));
                }
                Err(e) => return Ok(Err(format!("descriptor block {}: {e}", at.0))),
            }
        }
        let (desc, desc_crc) = match Descriptor::decode(&payloads, seg_blocks as usize) {
            Ok(x) => x,
            Err(e) => return Ok(Err(format!("descriptor at block {start}: {e}"))),
        };
        if desc.seq != seq || desc.segment != seg || desc.offset != off {
            return Ok(Err(format!("descriptor at block {start} was written for another place")));
        }
        if off + desc.total_blocks() as u32 > seg_blocks || desc.next_segment.0 >= self.sb.segment_count {
            return Ok(Err(format!("descriptor at block {start} overruns its segment")));
        }
        Ok(Ok((desc, desc_crc, n)))
    }

    /// Reads and verifies the partial segment expected at `seg`/`off`.
    /// The inner error says why it is not valid.
    fn read_ps(
        &self,
        seg: SegmentNo,
        off: u32,
        seq: Seq,
        prev_crc: u32,
    ) -> Result<std::result::Result<ReadPs, String>> {
        let (desc, desc_crc, n) = match self.read_descriptor(seg, off, Some(seq))? {
            Ok(x) => x,
            Err(why) => return Ok(Err(why)),
        };
        let start = self.ifile.geometry().start(seg).0 + u64::from(off);
        if desc.prev_crc != prev_crc {
            return Ok(Err(format!("descriptor at block {start} does not continue the log (checksum chain)")));
        }
        let total = desc.total_blocks() as u32;
        let body_count = total as usize - n;
        let first_body = MetaBlock(start + n as u64);
        let body = if body_count > 0 { self.read_meta(first_body, body_count)? } else { Vec::new() };
        let mut crcs = Writer::with_capacity(body_count * 4);
        for i in 0..body_count {
            let at = MetaBlock(first_body.0 + i as u64);
            let blk = &body[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            let (h, _) = match block::open_block(blk, at, self.volume_id) {
                Ok(x) => x,
                Err(e) => {
                    return Ok(Err(format!("block {} of the partial segment at {start}: {e}", at.0)));
                }
            };
            let expected = desc.blocks.get(i).map_or(BlockKind::Inodes, |s| s.kind);
            let name_ok = desc.blocks.get(i).is_none_or(|s| s.name == h.name && s.owner == h.owner);
            if h.seq != seq || h.kind != expected || !name_ok {
                return Ok(Err(format!(
                    "block {} does not match the descriptor at {start} (stale or misplaced)",
                    at.0
                )));
            }
            crcs.u32(block::stored_crc(blk));
        }
        if checksum::crc32c(&crcs.into_inner()) != desc.body_crc {
            return Ok(Err(format!("partial segment at block {start}: body checksum mismatch")));
        }
        Ok(Ok(ReadPs { desc, desc_crc, first_body, blocks: total }))
    }
}
