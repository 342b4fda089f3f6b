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
use super::fsync::PendingFsync;
use crate::device;
use crate::error::{DeviceRole, Result};
use crate::faults::{self, Fault};
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::LogPosition;
use crate::format::checksum;
use crate::format::codec::{DecodeError, Writer};
use crate::format::descriptor::{Change, Descriptor, PS_GROUP_END, PS_TWIN, PS_TWINNED, PsKind};
use crate::format::fsync::FsyncRecord;
use crate::types::{BLOCK_SIZE, InodeNo, MetaBlock, SegmentNo, Seq};

pub use super::log_end::{LogEnd, Stop};

/// What roll-forward did.
#[derive(Clone, Debug)]
pub struct RecoveryReport {
    /// Partial segments applied (in complete commit groups).
    pub partial_segments: u64,
    /// Blocks read from the log.
    pub blocks_scanned: u64,
    /// How it ended.
    pub end: LogEnd,
    /// Valid partial segments found past the end, if any (see
    /// [`super::beyond`]): a crash's torn tail, or commits lost to damage.
    pub beyond: Option<super::beyond::Beyond>,
    /// The first sequence number roll-forward did not apply.
    pub first_unapplied: Seq,
    /// Checkpoint partial segments walked over although their IFile blocks
    /// are damaged (roll-forward never needs them), one sentence each.
    pub walked_over: Vec<String>,
    /// Change records that disagree with the IFile they were applied to
    /// (blocks allocated that were in use, freed that were free): damage a
    /// crash cannot leave, one sentence each.
    pub inconsistent: Vec<String>,
    /// Wall time in microseconds.
    pub micros: u64,
    /// Fsync partial segments after the last complete commit group: what
    /// the volume replays (those before it were folded into a group).
    pub fsync_pending: u64,
    /// Fsync partial segments read and folded into a later commit group.
    pub fsync_folded: u64,
    /// Partial segments taken from their twins because the original failed
    /// a check (torn by a crash, or damaged), one sentence each.
    pub twins_taken: Vec<String>,
}

/// One partial segment read back from the log.
#[derive(Clone)]
pub(crate) struct ReadPs {
    pub desc: Descriptor,
    pub desc_crc: u32,
    pub first_body: MetaBlock,
    pub blocks: u32,
    /// The raw data blocks of an fsync partial segment.
    pub copies: Vec<Vec<u8>>,
}

impl ReadPs {
    /// Where the partial segment after this one is expected.
    pub fn after(&self) -> LogPosition {
        LogPosition {
            seq: self.desc.seq.next(),
            segment: self.desc.segment,
            offset: self.desc.offset + self.blocks,
            next_segment: self.desc.next_segment,
            prev_crc: self.desc_crc,
        }
    }
}

impl Log {
    /// Rolls forward from the loaded checkpoint to the end of the log.
    ///
    /// # Errors
    /// A device fails (an invalid partial segment is the end of the log, not an error).
    /// Opens at the checkpoint alone (`-o norecovery`): nothing after its
    /// log position is read, applied or replayed (fsync records included),
    /// and the log is left where the checkpoint left it; the volume that
    /// opens this way is never written, so no later commit can land
    /// beside the partial segments left unread.
    pub(crate) fn stay_at_checkpoint(&mut self) -> Result<RecoveryReport> {
        self.pending_fsync.clear();
        let pos = self.ckpt.log;
        self.durable = Seq(pos.seq.0 - 1);
        self.head = pos;
        self.vouched = self.durable;
        self.detached = false;
        self.blocks_since_checkpoint = 0;
        self.ifile.rebuild_free_lists();
        if self.space.fully_loaded() {
            self.space.recount();
        }
        self.recount_free_segments();
        let block = self.ifile.geometry().start(pos.segment).0 + u64::from(pos.offset);
        Ok(RecoveryReport {
            partial_segments: 0,
            blocks_scanned: 0,
            end: LogEnd { reason: Stop::NotRead { block }, next_segment: None },
            beyond: None,
            walked_over: Vec::new(),
            inconsistent: Vec::new(),
            first_unapplied: pos.seq,
            micros: 0,
            fsync_pending: 0,
            fsync_folded: 0,
            twins_taken: Vec::new(),
        })
    }

    pub(crate) fn roll_forward(&mut self) -> Result<RecoveryReport> {
        let started = Instant::now();
        let mut fsync_folded = 0u64;
        self.pending_fsync.clear();
        let mut pos = self.ckpt.log;
        let mut applied_pos = pos;
        let (mut partial_segments, mut blocks_scanned) = (0u64, 0u64);
        let mut group: Vec<ReadPs> = Vec::new();
        let mut touched: Vec<SegmentNo> = Vec::new();
        let mut walked_over = Vec::new();
        let mut twins_taken = Vec::new();
        let mut inconsistent = Vec::new();
        let end = loop {
            let found = match self.read_ps(pos.segment, pos.offset, pos.seq, pos.prev_crc)? {
                Ok(ps) => Ok(ps),
                Err(here) => match self.read_ps(pos.next_segment, 0, pos.seq, pos.prev_crc)? {
                    Ok(ps) => Ok(ps),
                    Err(there) => Err((here, there)),
                },
            };
            let ps = match found {
                Ok(ps) => ps,
                Err((here, there)) => match self.find_twin(pos)? {
                    Some(ps) => {
                        let why = format!(
                            "partial segment {} was read from its twin at block {}: the original {}",
                            ps.desc.seq.0,
                            self.ifile.geometry().start(ps.desc.segment).0 + u64::from(ps.desc.offset),
                            if here.is_end_of_log() { there.to_string() } else { here.to_string() }
                        );
                        log::warn!("{why}");
                        twins_taken.push(why);
                        ps
                    }
                    None => match self.walk_over_checkpoint(pos)? {
                        Some((ps, why)) => {
                            walked_over.push(why);
                            ps
                        }
                        None => {
                            // The place the log left off decides; a group begun
                            // and not finished is never a clean end.
                            let reason = if group.is_empty() { here } else { Stop::GroupCutShort(Box::new(here)) };
                            break LogEnd { reason, next_segment: Some(there) };
                        }
                    },
                },
            };
            blocks_scanned += u64::from(ps.blocks);
            touched.push(ps.desc.segment);
            pos = ps.after();
            let end = ps.desc.flags & PS_GROUP_END != 0;
            group.push(ps);
            if end {
                partial_segments += group.len() as u64;
                inconsistent.extend(self.apply_group(&group)?);
                for ps in group.drain(..) {
                    match ps.desc.kind {
                        // A commit group carries all that the fsync records
                        // before it said: they are folded into it.
                        PsKind::Normal if !faults::active(Fault::ReplayFolded) => {
                            fsync_folded += self.pending_fsync.len() as u64;
                            self.pending_fsync.clear();
                        }
                        PsKind::Fsync => self.pending_fsync.push(PendingFsync {
                            seq: ps.desc.seq,
                            at: MetaBlock(self.ifile.geometry().start(ps.desc.segment).0 + u64::from(ps.desc.offset)),
                            records: ps.desc.fsync,
                            copies: ps.copies,
                        }),
                        _ => {}
                    }
                }
                applied_pos = pos;
            }
        };
        // Whatever valid partial segments lie past the end tells a crash
        // (nothing there was ever acknowledged) from damage.
        let beyond = self.look_beyond(pos)?;
        self.durable = Seq(applied_pos.seq.0 - 1);
        self.head = applied_pos;
        if let Some(b) = &beyond {
            // Never reuse a sequence number something on the disk still
            // carries: a later search past a later end must not take those
            // partial segments for this lap's.
            self.head.seq = self.head.seq.max(b.last.next());
            touched.extend([pos.segment, pos.next_segment]);
        }
        // Segments a cut-short group wrote into hold nothing live, but must
        // not be reused before the recovery checkpoint moves past them.
        for ps in &group {
            self.ifile.note_write(ps.desc.segment, ps.desc.seq);
        }
        // Nor is a sequence number they carry written again: the recovery
        // checkpoint's log position must lie past every segment's last
        // write (a usage table saying otherwise is refused as corrupt),
        // and a cut-short group of two or more partial segments carries
        // numbers the checkpoint's own partial segment would not pass.
        if let Some(last) = group.last() {
            self.head.seq = self.head.seq.max(last.desc.seq.next());
        }
        // The search past the end looks at the reserved next segment: the
        // log must not resume there either.
        if !touched.is_empty() {
            touched.push(pos.next_segment);
        }
        if end.is_clean() && self.written_past(pos)? {
            // Nothing where the next partial segment was expected, but a
            // twin's blocks landed past it: writing there again with the
            // same sequence number could let a torn write complete that
            // twin and bring back the partial segment recovery discarded.
            touched.extend([pos.segment, pos.next_segment]);
        }
        if !end.is_clean() {
            // A torn tail lies where the next partial segment was expected.
            // Writing there again, with the same sequence number, could let
            // a later torn write complete the old partial segment instead
            // of the new one and bring back a group recovery discarded.
            touched.extend([pos.segment, pos.next_segment]);
        }
        if !touched.is_empty() {
            // Never append behind a crash: whatever the torn tail left stays
            // untouched; the log resumes in a segment nothing was read from.
            let resume = self.pick_free_segment()?.filter(|s| !touched.contains(s));
            if let Some(seg) =
                resume.or((!touched.contains(&applied_pos.next_segment)).then_some(applied_pos.next_segment))
            {
                self.head.segment = seg;
                self.head.offset = 0;
                self.head.next_segment = seg;
                if let Some(next) = self.pick_free_segment()? {
                    self.head.next_segment = next;
                }
            }
        }
        self.vouched = self.durable;
        self.detached = !touched.is_empty();
        self.blocks_since_checkpoint = blocks_scanned;
        self.ifile.rebuild_free_lists();
        // Every change above kept the group counts with the bits; a bitmap
        // loaded whole is recounted all the same (fsck compares the two).
        if self.space.fully_loaded() {
            self.space.recount();
        }
        self.recount_free_segments();
        Ok(RecoveryReport {
            partial_segments,
            blocks_scanned,
            end,
            beyond,
            walked_over,
            inconsistent,
            first_unapplied: applied_pos.seq,
            micros: started.elapsed().as_micros() as u64,
            fsync_pending: self.pending_fsync.len() as u64,
            fsync_folded,
            twins_taken,
        })
    }

    /// Whether, on a volume with twins, a block of sequence `pos.seq` or
    /// later (or a torn one) lies past `pos` in its segment or at the start
    /// of the next: what a crash leaves of a twin whose original never
    /// landed. Blocks of older laps carry lower sequence numbers.
    fn written_past(&self, pos: LogPosition) -> Result<bool> {
        if self.sb.incompat & crate::format::superblock::INCOMPAT_META_REDUNDANCY == 0 {
            return Ok(false);
        }
        for (seg, from) in [(pos.segment, pos.offset), (pos.next_segment, 0)] {
            let blocks = self.sb.segment_blocks;
            if seg.0 >= self.sb.segment_count || from >= blocks {
                continue;
            }
            let start = self.ifile.geometry().start(seg).0 + u64::from(from);
            let raw = self.read_meta(MetaBlock(start), (blocks - from) as usize)?;
            for (i, b) in raw.chunks_exact(BLOCK_SIZE).enumerate() {
                if !block::has_magic(b) {
                    continue;
                }
                let landed = match block::open_block(b, MetaBlock(start + i as u64), self.volume_id) {
                    Ok((h, _)) => h.seq >= pos.seq,
                    // A magic, and the block fails a check: torn.
                    Err(_) => true,
                };
                if landed {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The twin of the partial segment expected at `pos`, when the original
    /// failed a check: a valid partial segment of the same sequence,
    /// flagged `PS_TWIN`, chained as the original would be, that begins
    /// right where the original (as long as the twin) would end. Looked for
    /// where the original was expected and at the start of the next
    /// segment, in the blocks that follow.
    fn find_twin(&self, pos: LogPosition) -> Result<Option<ReadPs>> {
        if self.sb.incompat & crate::format::superblock::INCOMPAT_META_REDUNDANCY == 0 {
            return Ok(None);
        }
        for (seg, off) in [(pos.segment, pos.offset), (pos.next_segment, 0)] {
            let blocks = self.sb.segment_blocks;
            if seg.0 >= self.sb.segment_count || off >= blocks {
                continue;
            }
            // An intact descriptor says exactly where its twin is.
            let candidates: Vec<u32> = match self.read_descriptor(seg, off, Some(pos.seq))? {
                Ok((desc, _, _)) if desc.flags & PS_TWINNED != 0 => vec![off + desc.total_blocks() as u32],
                Ok(_) => Vec::new(),
                Err(_) => self.descriptor_starts_of(seg, off + 1, pos.seq)?,
            };
            for at in candidates {
                let Ok((desc, _, _)) = self.read_descriptor(seg, at, Some(pos.seq))? else { continue };
                if desc.flags & PS_TWIN == 0 || at != off + desc.total_blocks() as u32 {
                    continue;
                }
                if let Ok(ps) = self.read_ps(seg, at, pos.seq, pos.prev_crc)? {
                    return Ok(Some(ps));
                }
            }
        }
        Ok(None)
    }

    /// A checkpoint's partial segment at `pos` whose descriptor is intact
    /// but whose body (IFile blocks) fails a check, when the log goes on
    /// after it: roll-forward walks over such partial segments without
    /// reading their bodies, so damage there costs nothing. (A checkpoint
    /// torn by a crash has nothing valid after it, and still ends the log.)
    pub(super) fn walk_over_checkpoint(&self, pos: LogPosition) -> Result<Option<(ReadPs, String)>> {
        for (seg, off) in [(pos.segment, pos.offset), (pos.next_segment, 0)] {
            let Ok((desc, desc_crc, n)) = self.read_descriptor(seg, off, Some(pos.seq))? else { continue };
            if desc.kind != PsKind::Checkpoint || desc.prev_crc != pos.prev_crc {
                continue;
            }
            let start = self.ifile.geometry().start(seg).0 + u64::from(off);
            let ps = ReadPs { desc, desc_crc, first_body: MetaBlock(start + n as u64), blocks: 0, copies: Vec::new() };
            let ps = ReadPs { blocks: ps.desc.total_blocks() as u32, ..ps };
            let after = ps.after();
            let next_ok = self.read_ps(after.segment, after.offset, after.seq, after.prev_crc)?.is_ok()
                || self.read_ps(after.next_segment, 0, after.seq, after.prev_crc)?.is_ok();
            if next_ok {
                let why = format!(
                    "the IFile blocks of the checkpoint partial segment at block {start} (sequence {}) are damaged; \
                     roll-forward walked over them",
                    ps.desc.seq.0
                );
                return Ok(Some((ps, why)));
            }
        }
        Ok(None)
    }

    /// Applies one complete commit group: its change records (in order),
    /// then its placements, then its orphan-list changes (which concern
    /// inodes the placements may have just brought into use). Returns the
    /// records that disagree with the IFile.
    ///
    /// # Errors
    /// The data bitmap of a group a record touches cannot be loaded.
    fn apply_group(&mut self, group: &[ReadPs]) -> Result<Vec<String>> {
        let mut inconsistent = Vec::new();
        // The inode-map blocks the group touches, if the map was left on disk.
        let touched = group.iter().filter(|ps| ps.desc.kind == PsKind::Normal).flat_map(|ps| {
            let changed = ps.desc.changes.iter().filter_map(|c| match *c {
                Change::InodeFree { ino, .. } | Change::OrphanAdd(ino) | Change::OrphanRemove(ino) => Some(ino),
                _ => None,
            });
            changed.chain(ps.desc.inode_blocks.iter().flatten().map(|s| s.ino))
        });
        let touched: Vec<InodeNo> = touched.collect();
        self.ensure_inode_blocks(touched.into_iter())?;
        for ps in group {
            if ps.desc.kind == PsKind::Normal {
                for c in &ps.desc.changes {
                    if !matches!(c, Change::OrphanAdd(_) | Change::OrphanRemove(_))
                        && let Some(why) = self.apply_change(*c)?
                    {
                        inconsistent.push(format!("partial segment {}: {why}", ps.desc.seq.0));
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
                        self.apply_change(*c)?;
                    }
                }
            }
        }
        Ok(inconsistent)
    }

    /// Applies one change record to the IFile; says so when it disagrees
    /// with it (its range was checked to lie inside the data device).
    ///
    /// # Errors
    /// The data bitmap of a group it touches cannot be loaded.
    pub(crate) fn apply_change(&mut self, c: Change) -> Result<Option<String>> {
        match c {
            Change::NodeFree(id) => self.ifile.free_node(id),
            Change::InodeFree { ino, generation } => self.ifile.free_inode(ino, generation),
            Change::DataAlloc { start, len } => {
                if self.space.mark_used(start, len)? != u64::from(len) {
                    return Ok(Some(format!("data blocks {}+{len} allocated while in use", start.0)));
                }
            }
            Change::DataFree { start, len } => {
                if self.space.mark_free(start, len)? != u64::from(len) {
                    return Ok(Some(format!("data blocks {}+{len} freed while free", start.0)));
                }
            }
            Change::OrphanAdd(ino) => self.ifile.set_orphan(ino, true),
            Change::OrphanRemove(ino) => self.ifile.set_orphan(ino, false),
        }
        Ok(None)
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
    ) -> Result<std::result::Result<(Descriptor, u32, usize), Stop>> {
        let seg_blocks = self.sb.segment_blocks;
        if seg.0 >= self.sb.segment_count || off >= seg_blocks {
            return Ok(Err(Stop::PastSegmentEnd { segment: seg, offset: off }));
        }
        let start = self.ifile.geometry().start(seg).0 + u64::from(off);
        let first = self.read_meta(MetaBlock(start), 1)?;
        let (h, p) = match block::open_block_of_kind(&first, MetaBlock(start), self.volume_id, BlockKind::Descriptor) {
            Ok(x) => x,
            // A block that carries the magic but fails its checksum was
            // being written when the power failed: a torn tail, not the
            // clean end of the log (which is unwritten or stale blocks).
            Err(detail)
                if first[..4] == block::BLOCK_MAGIC.to_le_bytes() && !checksum::verify(&first[..BLOCK_SIZE], 4) =>
            {
                return Ok(Err(Stop::Torn { block: start, detail }));
            }
            Err(detail) => return Ok(Err(Stop::Unwritten { block: start, detail })),
        };
        if seq.is_some_and(|s| h.seq != s) {
            return Ok(Err(Stop::WrongSequence { block: start, found: h.seq, expected: seq }));
        }
        if h.aux != 0 {
            return Ok(Err(Stop::MidDescriptor { block: start }));
        }
        let seq = h.seq;
        let n = match Descriptor::peek(p) {
            Ok((_, n)) if n >= 1 && off as usize + n <= seg_blocks as usize => n,
            _ => return Ok(Err(Stop::Overrun { block: start })),
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
                Ok(_) => return Ok(Err(Stop::ForeignDescriptorBlock { block: at.0 })),
                Err(detail) => return Ok(Err(Stop::BadDescriptor { block: at.0, detail })),
            }
        }
        let (desc, desc_crc) = match Descriptor::decode(&payloads, seg_blocks as usize) {
            Ok(x) => x,
            Err(detail) => return Ok(Err(Stop::BadDescriptor { block: start, detail })),
        };
        if desc.seq != seq || desc.segment != seg || desc.offset != off {
            return Ok(Err(Stop::Misplaced { block: start }));
        }
        if off + desc.total_blocks() as u32 > seg_blocks || desc.next_segment.0 >= self.sb.segment_count {
            return Ok(Err(Stop::Overrun { block: start }));
        }
        if let Some(why) = self.out_of_range(&desc) {
            return Ok(Err(Stop::BadDescriptor { block: start, detail: DecodeError(why) }));
        }
        // A twin stands for its original: the chain goes on from the
        // original's checksum, which the twin's header carries.
        let desc_crc = if desc.flags & PS_TWIN != 0 { (h.name >> 32) as u32 } else { desc_crc };
        Ok(Ok((desc, desc_crc, n)))
    }

    /// What in a decoded descriptor names something no volume of this
    /// geometry holds: an inode number or node id beyond what the log can
    /// hold, data blocks beyond the data device. Such a value is
    /// corruption, never clamped: the partial segment is not valid.
    fn out_of_range(&self, desc: &Descriptor) -> Option<String> {
        let (max_ino, max_node) = (self.max_inode_number(), self.max_node_id());
        let ino_ok = |i: u64| (1..=max_ino).contains(&i);
        let node_ok = |i: u64| (1..=max_node).contains(&i);
        for s in &desc.blocks {
            if matches!(s.kind, BlockKind::Node | BlockKind::Blob) && !node_ok(s.name) {
                return Some(format!("names node {} beyond the log's {max_node}", s.name));
            }
        }
        for s in desc.inode_blocks.iter().flatten() {
            if !ino_ok(s.ino.0) {
                return Some(format!("names inode {} beyond the log's {max_ino}", s.ino));
            }
        }
        let data = self.sb.data_blocks;
        for c in &desc.changes {
            let bad = match *c {
                Change::NodeFree(id) => !node_ok(id.0),
                Change::InodeFree { ino, .. } | Change::OrphanAdd(ino) | Change::OrphanRemove(ino) => !ino_ok(ino.0),
                Change::DataAlloc { start, len } | Change::DataFree { start, len } => {
                    len == 0 || start.0 == 0 || start.0.checked_add(u64::from(len)).is_none_or(|end| end > data)
                }
            };
            if bad {
                return Some(format!("change record {c:?} lies beyond the volume"));
            }
        }
        None
    }

    /// Reads and verifies the partial segment expected at `seg`/`off`.
    /// The inner error says why it is not valid.
    pub(crate) fn read_ps(
        &self,
        seg: SegmentNo,
        off: u32,
        seq: Seq,
        prev_crc: u32,
    ) -> Result<std::result::Result<ReadPs, Stop>> {
        let (desc, desc_crc, n) = match self.read_descriptor(seg, off, Some(seq))? {
            Ok(x) => x,
            Err(why) => return Ok(Err(why)),
        };
        let start = self.ifile.geometry().start(seg).0 + u64::from(off);
        if desc.prev_crc != prev_crc {
            return Ok(Err(Stop::BrokenChain { block: start }));
        }
        let total = desc.total_blocks() as u32;
        let body_count = total as usize - n;
        // The log goes on after the twin of a twinned original.
        let span = if desc.flags & PS_TWINNED != 0 { 2 * total } else { total };
        let first_body = MetaBlock(start + n as u64);
        let mut crcs = Writer::with_capacity(body_count * 4);
        if desc.kind == PsKind::Fsync {
            // Raw data blocks: each must have the checksum its record names,
            // which only this layer knows: a mirror is asked for the copy
            // that has it (a crash may have torn one copy's block).
            let wanted: Vec<u32> = desc
                .fsync
                .iter()
                .filter_map(|r| match r {
                    FsyncRecord::Data { crc, .. } => Some(*crc),
                    _ => None,
                })
                .collect();
            let mut body = vec![0u8; body_count * BLOCK_SIZE];
            let right = |i: usize, blk: &[u8]| wanted.get(i) == Some(&checksum::crc32c(blk));
            device::read_checked(self.meta.as_ref(), DeviceRole::Meta, first_body.0, &mut body, &right)?;
            let mut copies = Vec::with_capacity(body_count);
            for (i, &want) in wanted.iter().enumerate() {
                let blk = &body[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
                let got = checksum::crc32c(blk);
                if got != want {
                    return Ok(Err(Stop::BadBody {
                        block: first_body.0 + i as u64,
                        detail: DecodeError(format!("data copy has checksum {got:#x}, its record says {want:#x}")),
                    }));
                }
                crcs.u32(got);
                copies.push(blk.to_vec());
            }
            if checksum::crc32c(&crcs.into_inner()) != desc.body_crc {
                return Ok(Err(Stop::BodyChecksum { block: start }));
            }
            return Ok(Ok(ReadPs { desc, desc_crc, first_body, blocks: span, copies }));
        }
        let body = if body_count > 0 { self.read_meta(first_body, body_count)? } else { Vec::new() };
        for i in 0..body_count {
            let at = MetaBlock(first_body.0 + i as u64);
            let blk = &body[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            let (h, _) = match block::open_block(blk, at, self.volume_id) {
                Ok(x) => x,
                Err(detail) => return Ok(Err(Stop::BadBody { block: at.0, detail })),
            };
            let expected = desc.blocks.get(i).map_or(BlockKind::Inodes, |s| s.kind);
            let name_ok = desc.blocks.get(i).is_none_or(|s| s.name == h.name && s.owner == h.owner);
            if h.seq != seq || h.kind != expected || !name_ok {
                return Ok(Err(Stop::StaleBody { block: at.0 }));
            }
            crcs.u32(block::stored_crc(blk));
        }
        if checksum::crc32c(&crcs.into_inner()) != desc.body_crc {
            return Ok(Err(Stop::BodyChecksum { block: start }));
        }
        Ok(Ok(ReadPs { desc, desc_crc, first_body, blocks: span, copies: Vec::new() }))
    }
}
