//! Sealing: turning the dirty meta-data into one commit group.
//!
//! A commit group is one or more partial segments, written back to back,
//! the last one flagged `PS_GROUP_END`. Each partial segment fits its
//! segment; the group as a whole may span several, so that a hot directory
//! leaf modified by thousands of operations is written once per commit, not
//! once per segment's worth of them. Roll-forward applies a group only when
//! its last partial segment is valid, so the group is the transaction unit.
//!
//! Sealing is pure computation under the volume lock: pack inodes, plan
//! where every block goes, encode, apply the placements to the IFile. Writing
//! ([`SealedGroup::write`]) needs no lock; [`Log::complete`] then records it
//! as durable.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Log, Object};
use crate::device::{self, AlignedBuf, BlockDevice, DataRun};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::block::{self, BlockHeader, BlockKind, PAYLOAD_LEN};
use crate::format::checksum;
use crate::format::codec::Writer;
use crate::format::descriptor::{
    Change, Descriptor, FINFO_HEADER_LEN, FIRST_PREFIX, FIXED_STREAM_LEN, INODE_LIST_HEADER_LEN, INODE_SUMMARY_LEN,
    InodeSummary, PS_GROUP_END, PS_TWIN, PS_TWINNED, PsKind, SUMMARY_LEN, Summary,
};
use crate::format::inode::InodeRecord;
use crate::format::inode_block;
use crate::types::{BLOCK_SIZE, DataBlock, InodeNo, MetaBlock, NodeId, SegmentNo, Seq, Timestamp};

/// Longest single write request to the data device.
pub(crate) const MAX_DATA_RUN_BLOCKS: usize = 2048;

/// A commit group ready to be written, with the data it makes reachable.
#[derive(Debug)]
pub struct SealedGroup {
    /// Sequence number of its last partial segment (None when only data is
    /// written: in-place overwrites need no meta-data).
    pub seq: Option<Seq>,
    meta: Vec<(MetaBlock, Vec<u8>)>,
    data: Vec<(DataBlock, DataRun)>,
}

impl SealedGroup {
    /// A group of `meta` blocks (ending with partial segment `seq`) that
    /// makes `data` reachable.
    pub(crate) fn new(seq: Option<Seq>, meta: Vec<(MetaBlock, Vec<u8>)>, data: Vec<(DataBlock, Vec<u8>)>) -> Self {
        SealedGroup { seq, meta, data: coalesce(data) }
    }

    /// Where its first partial segment starts, if it writes any.
    #[must_use]
    pub fn start(&self) -> Option<MetaBlock> {
        self.meta.first().map(|(at, _)| *at)
    }

    /// Blocks it puts on the meta-data device.
    #[must_use]
    pub fn meta_blocks(&self) -> usize {
        self.meta.iter().map(|(_, b)| b.len() / BLOCK_SIZE).sum()
    }

    /// Drops what was read ahead of the blocks it overwrites: at sealing,
    /// and again at completion for windows read while it was being written.
    pub(crate) fn forget_read_ahead(&self, ra: &mut super::readahead::ReadAhead) {
        for (at, buf) in &self.meta {
            ra.forget(*at, buf.len() / BLOCK_SIZE);
        }
    }

    /// Lets go of its data once written, so that the page buffers it shared
    /// with the page cache are the cache's alone again (and come back for
    /// reuse when their pages go).
    pub fn release_data(&mut self) {
        self.data = Vec::new();
    }

    /// Blocks it puts on the data device.
    #[must_use]
    pub fn data_blocks(&self) -> usize {
        self.data.iter().map(|(_, r)| r.blocks()).sum()
    }

    /// Writes it. Ordering rule 1 is enforced here and only here: the data
    /// is written and flushed before the meta-data that makes it reachable,
    /// and the meta-data is flushed before the group counts as committed.
    ///
    /// # Errors
    /// A device fails; the caller turns the volume read-only.
    pub fn write(&self, meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Result<()> {
        self.write_after(meta, data, false)
    }

    /// [`SealedGroup::write`], flushing the data device first even when the
    /// group brings no data of its own if `flush_data` (data it makes
    /// reachable was written in place before, and not flushed yet).
    ///
    /// # Errors
    /// As [`SealedGroup::write`].
    pub fn write_after(
        &self,
        meta: &Arc<dyn BlockDevice>,
        data: &Arc<dyn BlockDevice>,
        flush_data: bool,
    ) -> Result<()> {
        if !self.data.is_empty() || (flush_data && !self.meta.is_empty()) {
            // Scattered runs (files updated in place, blocks reused) are
            // written at once where the device takes several requests.
            let pieces: Vec<Vec<&[u8]>> = self.data.iter().map(|(_, run)| run.pieces()).collect();
            let runs: Vec<(u64, &[&[u8]])> =
                self.data.iter().zip(&pieces).map(|((at, _), p)| (at.0, p.as_slice())).collect();
            device::write_runs(data.as_ref(), DeviceRole::Data, &runs)?;
            if !faults::active(Fault::NoDataFlush) {
                device::flush(data.as_ref(), DeviceRole::Data)?;
            }
        }
        if !self.meta.is_empty() {
            for (at, buf) in &self.meta {
                device::write(meta.as_ref(), DeviceRole::Meta, at.0, buf)?;
            }
            if !faults::active(Fault::FsyncBeforeFlush) {
                device::flush(meta.as_ref(), DeviceRole::Meta)?;
            }
        }
        Ok(())
    }
}

/// A body block before its address is known.
#[derive(Debug)]
pub(crate) struct Body {
    /// Owner and name (for inode blocks: kind `Inodes`, owner 0).
    pub summary: Summary,
    /// Header `aux` (tree level of nodes).
    pub aux: u16,
    /// The payload (filled late by checkpoints).
    pub payload: Vec<u8>,
    /// The inodes of an inode block.
    pub inodes: Option<Vec<InodeSummary>>,
}

/// Where one partial segment of a group goes.
#[derive(Debug)]
struct Plan {
    segment: SegmentNo,
    next_segment: SegmentNo,
    offset: u32,
    start: u64,
    desc_blocks: usize,
    items: std::ops::Range<usize>,
    changes: std::ops::Range<usize>,
}

/// Sorts data blocks by address and merges neighbours into large requests,
/// each in a page-aligned buffer (the data device is opened `O_DIRECT`).
pub(crate) fn coalesce(mut blocks: Vec<(DataBlock, Vec<u8>)>) -> Vec<(DataBlock, DataRun)> {
    blocks.sort_unstable_by_key(|(b, _)| *b);
    let mut runs: Vec<(DataBlock, DataRun)> = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        // The run's blocks first, so that its buffer is allocated once.
        let mut end = i + 1;
        let mut len = blocks[i].1.len();
        while end < blocks.len()
            && blocks[end].0.0 == blocks[i].0.0 + (len / BLOCK_SIZE) as u64
            && len.is_multiple_of(BLOCK_SIZE)
            && len / BLOCK_SIZE < MAX_DATA_RUN_BLOCKS
        {
            len += blocks[end].1.len();
            end += 1;
        }
        let mut run = AlignedBuf::with_capacity(len);
        for (_, buf) in &blocks[i..end] {
            run.extend_from_slice(buf);
        }
        runs.push((blocks[i].0, DataRun::Bytes(run)));
        i = end;
    }
    runs
}

fn desc_blocks(stream_len: usize) -> usize {
    (stream_len + FIRST_PREFIX).div_ceil(PAYLOAD_LEN)
}

impl Log {
    /// Seals everything dirty into one commit group together with `data`
    /// (whole data blocks to write first). Returns None when there is
    /// nothing to write.
    ///
    /// # Errors
    /// No segment left to move the log into (the space checks before every
    /// operation make this a bug, not a user error).
    pub fn seal(&mut self, data: Vec<(DataBlock, Vec<u8>)>, now: Timestamp) -> Result<Option<SealedGroup>> {
        self.seal_substituted(coalesce(data), &HashMap::new(), now)
    }

    /// [`Log::seal`], writing for each dirty inode of `substitutes` the
    /// record given instead of the cached one: a shorter size while its
    /// data past it is not written yet (a delayed tail), or the record it
    /// had before a truncation while its new contents are held back (see
    /// `namespace::replace`). `data` comes in runs already, in
    /// page-aligned buffers ([`coalesce`], or the page cache's own from
    /// `Pages::take_queued`).
    ///
    /// # Errors
    /// As [`Log::seal`].
    pub fn seal_substituted(
        &mut self,
        data: Vec<(DataBlock, DataRun)>,
        substitutes: &HashMap<InodeNo, InodeRecord>,
        now: Timestamp,
    ) -> Result<Option<SealedGroup>> {
        if !self.has_dirty() {
            if data.is_empty() {
                return Ok(None);
            }
            return Ok(Some(SealedGroup { seq: None, meta: Vec::new(), data }));
        }
        let objects = self.cache.dirty_objects();
        let inodes = self.cache.dirty_inodes();
        let changes = std::mem::take(&mut self.changes);
        self.change_bytes = 0;

        let mut bodies = Vec::with_capacity(objects.len() + inodes.len() / 8);
        for &(owner, id) in &objects {
            let Some(obj) = self.cache.peek_object(id) else { continue };
            let (kind, aux, payload) = match obj {
                Object::Node(n) => (BlockKind::Node, n.level, n.encode()),
                Object::Blob(b) => (BlockKind::Blob, 0, b.clone()),
            };
            bodies.push(Body { summary: Summary { kind, owner, name: id.0 }, aux, payload, inodes: None });
        }
        // Pack inode records in order, closing a block when the next one does not fit.
        let mut packs: Vec<Vec<InodeNo>> = Vec::new();
        let (mut count, mut bytes) = (0usize, 0usize);
        for &ino in &inodes {
            let Some(rec) = substitutes.get(&ino).or_else(|| self.cache.peek_inode(ino)) else { continue };
            let len = rec.encoded_len();
            if packs.is_empty() || !inode_block::fits(count, bytes, len) {
                packs.push(Vec::new());
                (count, bytes) = (0, 0);
            }
            packs.last_mut().expect("a pack was just pushed").push(ino);
            count += 1;
            bytes += len;
        }
        for inos in packs {
            let recs: Vec<&InodeRecord> =
                inos.iter().filter_map(|i| substitutes.get(i).or_else(|| self.cache.peek_inode(*i))).collect();
            let list = recs
                .iter()
                .map(|r| InodeSummary { ino: r.ino, generation: r.generation, len: r.encoded_len() as u16 })
                .collect();
            bodies.push(Body {
                summary: Summary { kind: BlockKind::Inodes, owner: InodeNo(0), name: 0 },
                aux: 0,
                payload: inode_block::encode(&recs),
                inodes: Some(list),
            });
        }

        let (group, ()) = self.encode_group(PsKind::Normal, bodies, changes, now, data, |_, _, _| ())?;
        self.ifile.release_freed_inodes();
        if let Some(seq) = group.seq {
            self.space.seal_frees(seq);
        }
        let ids: Vec<NodeId> = objects.iter().map(|(_, id)| *id).collect();
        if let Some(seq) = group.seq {
            self.cache.mark_sealed(&inodes, &ids, seq);
        }
        Ok(Some(group))
    }

    /// Moves the log into its reserved next segment and reserves another.
    pub(super) fn advance_segment(&mut self) -> Result<()> {
        let next = self.head.next_segment;
        // The segment after it is chosen before the head moves, so that a
        // full device leaves the head where it was.
        let after = self.pick_free_segment_after(next, &[next])?.ok_or(Error::NoSpace(DeviceRole::Meta))?;
        self.head.segment = next;
        self.head.offset = 0;
        self.head.next_segment = after;
        self.free_segments_cached = self.free_segments_cached.saturating_sub(1);
        Ok(())
    }

    /// Decides where each partial segment of a group goes: as many change
    /// records and bodies as fit the rest of the current segment, then on
    /// into the next ones. (Roll-forward applies a group's change records
    /// all before its placements, so records may sit in any of its partial
    /// segments.)
    fn plan_group(&mut self, bodies: &[Body], changes: &[Change], twin: bool) -> Result<Vec<Plan>> {
        let seg_blocks = self.sb.segment_blocks as usize;
        let mut plans = Vec::new();
        let (mut i, mut c) = (0, 0);
        // A twinned partial segment and its twin share the rest of the segment.
        let copies = if twin { 2 } else { 1 };
        loop {
            let room = (seg_blocks - self.head.offset as usize) / copies;
            let mut stream = FIXED_STREAM_LEN;
            if desc_blocks(stream) + 1 > room {
                self.advance_segment()?;
                continue;
            }
            // Change records only grow the descriptor; leave room for at
            // least one body block when bodies remain.
            let keep = usize::from(i < bodies.len());
            let c0 = c;
            while c < changes.len() && desc_blocks(stream + changes[c].encoded_len()) + keep <= room {
                stream += changes[c].encoded_len();
                c += 1;
            }
            let mut owner: Option<InodeNo> = None;
            let mut k = 0;
            while i + k < bodies.len() {
                let b = &bodies[i + k];
                let add = match &b.inodes {
                    Some(list) => INODE_LIST_HEADER_LEN + list.len() * INODE_SUMMARY_LEN,
                    None => SUMMARY_LEN + if owner == Some(b.summary.owner) { 0 } else { FINFO_HEADER_LEN },
                };
                if desc_blocks(stream + add) + k + 1 > room {
                    break;
                }
                stream += add;
                if b.inodes.is_none() {
                    owner = Some(b.summary.owner);
                }
                k += 1;
            }
            if k == 0 && c == c0 && (i < bodies.len() || c < changes.len()) {
                if self.head.offset == 0 {
                    return Err(Error::Invalid("a body block does not fit an empty segment"));
                }
                self.advance_segment()?;
                continue;
            }
            let d = desc_blocks(stream);
            let start = self.ifile.geometry().start(self.head.segment).0 + u64::from(self.head.offset);
            plans.push(Plan {
                segment: self.head.segment,
                next_segment: self.head.next_segment,
                offset: self.head.offset,
                start,
                desc_blocks: d,
                items: i..i + k,
                changes: c0..c,
            });
            self.head.offset += ((d + k) * copies) as u32;
            i += k;
            if i == bodies.len() && c == changes.len() {
                return Ok(plans);
            }
        }
    }

    /// Places one commit group (plans its partial segments and moves the
    /// head past them), encodes its blocks and applies its placements to the
    /// IFile. Nothing is written: the bytes come back as a [`SealedGroup`],
    /// whose [`SealedGroup::write`] the caller runs outside the volume lock.
    /// `fill` sees every body's address before encoding (checkpoints put the
    /// addresses of table blocks into the index blocks that follow them).
    pub(crate) fn encode_group<R>(
        &mut self,
        kind: PsKind,
        mut bodies: Vec<Body>,
        changes: Vec<Change>,
        now: Timestamp,
        data: Vec<(DataBlock, DataRun)>,
        fill: impl FnOnce(&mut Log, &[MetaBlock], &mut [Body]) -> R,
    ) -> Result<(SealedGroup, R)> {
        // Only a normal group a caller waits for is twinned (checkpoints
        // never are: the slot written after them is their commit point).
        let twin = kind == PsKind::Normal && std::mem::take(&mut self.twin_next) && self.twins_enabled();
        let plans = self.plan_group(&bodies, &changes, twin)?;
        let mut addresses = vec![MetaBlock(0); bodies.len()];
        for p in &plans {
            for (j, i) in p.items.clone().enumerate() {
                addresses[i] = MetaBlock(p.start + (p.desc_blocks + j) as u64);
            }
        }
        let filled = fill(self, &addresses, &mut bodies);

        let mut meta: Vec<(MetaBlock, Vec<u8>)> = Vec::new();
        let mut last_seq = self.head.seq;
        let n = plans.len();
        for (pi, p) in plans.iter().enumerate() {
            let seq = self.head.seq;
            last_seq = seq;
            let items = &bodies[p.items.clone()];
            let mut desc = Descriptor {
                kind,
                flags: if pi + 1 == n { PS_GROUP_END } else { 0 } | if twin { PS_TWINNED } else { 0 },
                seq,
                time: now,
                segment: p.segment,
                offset: p.offset,
                next_segment: p.next_segment,
                prev_crc: self.head.prev_crc,
                body_crc: 0,
                blocks: items.iter().filter(|b| b.inodes.is_none()).map(|b| b.summary).collect(),
                inode_blocks: items.iter().filter_map(|b| b.inodes.clone()).collect(),
                changes: changes[p.changes.clone()].to_vec(),
                fsync: Vec::new(),
            };
            debug_assert_eq!(desc.desc_blocks(), p.desc_blocks, "descriptor size planned wrong");
            let total = p.desc_blocks + items.len();
            let (mut buf, desc_crc) = self.encode_ps(&mut desc, items, p.start, None);
            if twin {
                // The twin: the same partial segment at its own addresses,
                // in the same request and flush.
                let mut twin_desc = Descriptor {
                    flags: (desc.flags & PS_GROUP_END) | PS_TWIN,
                    offset: p.offset + total as u32,
                    ..desc.clone()
                };
                let (copy, _) = self.encode_ps(&mut twin_desc, items, p.start + total as u64, Some(desc_crc));
                buf.extend_from_slice(&copy);
                self.stats.twin_blocks += total as u64;
                self.stats.meta_blocks_written += total as u64;
            }
            if kind == PsKind::Normal {
                let first_body = MetaBlock(p.start + p.desc_blocks as u64);
                let first_inode_block = MetaBlock(first_body.0 + desc.blocks.len() as u64);
                self.apply_placements(&desc, first_body, first_inode_block);
            }
            self.ifile.note_write(p.segment, seq);
            self.head.seq = seq.next();
            self.head.prev_crc = desc_crc;
            let blocks = total as u64;
            self.blocks_since_checkpoint += blocks;
            self.stats.partial_segments += 1;
            self.stats.meta_blocks_written += blocks;
            // Partial segments that follow each other in a segment go out as one request.
            match meta.last_mut() {
                Some((at, prev)) if at.0 + (prev.len() / BLOCK_SIZE) as u64 == p.start => prev.extend_from_slice(&buf),
                _ => meta.push((MetaBlock(p.start), buf)),
            }
        }
        self.stats.data_blocks_written += data.iter().map(|(_, r)| r.blocks() as u64).sum::<u64>();
        let group = SealedGroup { seq: Some(last_seq), meta, data };
        group.forget_read_ahead(&mut self.readahead);
        Ok((group, filled))
    }

    /// Encodes one partial segment of `items` at `start`: its descriptor
    /// blocks (`desc`'s body checksum filled in) and body blocks. For a
    /// twin, `original` is the descriptor checksum of the partial segment it
    /// repeats, kept in its descriptor blocks' header `name`. Returns the
    /// bytes and the descriptor checksum.
    fn encode_ps(&self, desc: &mut Descriptor, items: &[Body], start: u64, original: Option<u32>) -> (Vec<u8>, u32) {
        let desc_blocks = desc.desc_blocks();
        let mut buf = Vec::with_capacity((desc_blocks + items.len()) * BLOCK_SIZE);
        buf.resize(desc_blocks * BLOCK_SIZE, 0);
        let mut crcs = Writer::with_capacity(items.len() * 4);
        for (j, b) in items.iter().enumerate() {
            let header = BlockHeader {
                kind: b.summary.kind,
                aux: b.aux,
                payload_len: b.payload.len() as u32,
                volume_id: self.volume_id,
                address: MetaBlock(start + (desc_blocks + j) as u64),
                seq: desc.seq,
                owner: b.summary.owner,
                name: b.summary.name,
            };
            let blk = block::seal_block(&header, &b.payload);
            crcs.u32(block::stored_crc(&blk));
            buf.extend_from_slice(&blk);
        }
        desc.body_crc = checksum::crc32c(&crcs.into_inner());
        let (payloads, desc_crc) = desc.encode();
        self.seal_descriptor_blocks(&mut buf, &payloads, desc.seq, start, original);
        (buf, desc_crc)
    }

    /// Seals `payloads` as the descriptor blocks at the front of `buf`
    /// (first block at `start`). A twin's carry the original's checksum.
    pub(super) fn seal_descriptor_blocks(
        &self,
        buf: &mut [u8],
        payloads: &[Vec<u8>],
        seq: Seq,
        start: u64,
        original: Option<u32>,
    ) {
        let n = payloads.len() as u64;
        for (i, pl) in payloads.iter().enumerate() {
            let header = BlockHeader {
                kind: BlockKind::Descriptor,
                aux: i as u16,
                payload_len: pl.len() as u32,
                volume_id: self.volume_id,
                address: MetaBlock(start + i as u64),
                seq,
                owner: InodeNo(self.vouched.0),
                name: n | original.map_or(0, |c| u64::from(c) << 32),
            };
            buf[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE].copy_from_slice(&block::seal_block(&header, pl));
        }
    }

    /// Twins the partial segments of the next normal commit group (a caller
    /// will wait for it to be durable), if the volume has the feature: a
    /// damaged block of the last one written is then read from its twin.
    pub fn twin_next_group(&mut self) {
        self.twin_next = true;
    }

    /// Whether the log writes twins of the partial segments callers wait for.
    #[must_use]
    pub fn twins_enabled(&self) -> bool {
        self.sb.incompat & crate::format::superblock::INCOMPAT_META_REDUNDANCY != 0 && !faults::active(Fault::NoTwins)
    }

    /// The placements a normal partial segment implies: every body block's
    /// node now lives where it was written, every inode in its inode block.
    /// Roll-forward calls this too, after the group's change records.
    pub(crate) fn apply_placements(&mut self, desc: &Descriptor, first_body: MetaBlock, first_inode_block: MetaBlock) {
        for (i, s) in desc.blocks.iter().enumerate() {
            if matches!(s.kind, BlockKind::Node | BlockKind::Blob) {
                self.ifile.place_node(NodeId(s.name), MetaBlock(first_body.0 + i as u64));
            }
        }
        for (i, list) in desc.inode_blocks.iter().enumerate() {
            let at = MetaBlock(first_inode_block.0 + i as u64);
            for s in list {
                self.ifile.place_inode(s.ino, s.generation, at, s.len);
            }
        }
    }

    /// Records that a sealed group is durable: frees it carried may now be
    /// reused, and what it wrote may leave the cache.
    pub fn complete(&mut self, sealed: &SealedGroup) {
        sealed.forget_read_ahead(&mut self.readahead);
        if let Some(seq) = sealed.seq {
            self.durable = self.durable.max(seq);
        }
        if !self.detached {
            self.vouched = self.durable;
        }
        self.space.release(self.durable);
        self.cache.trim(self.durable);
        self.trim_tables();
        self.free_segments_cached = self.free_segments();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbouring_data_blocks_become_one_request() {
        let blocks = vec![
            (DataBlock(5), vec![5u8; BLOCK_SIZE]),
            (DataBlock(3), vec![3u8; BLOCK_SIZE]),
            (DataBlock(4), vec![4u8; BLOCK_SIZE]),
            (DataBlock(9), vec![9u8; BLOCK_SIZE]),
        ];
        let runs = coalesce(blocks);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].0, DataBlock(3));
        assert_eq!(runs[0].1.blocks(), 3);
        let DataRun::Bytes(run) = &runs[0].1 else { panic!("coalesced blocks are one buffer") };
        assert_eq!(run.bytes()[BLOCK_SIZE], 4);
        assert_eq!(run.bytes().as_ptr() as usize % BLOCK_SIZE, 0);
        assert_eq!(runs[1].0, DataBlock(9));
    }
}
