//! Sealing: turning the dirty meta-data into one partial segment.
//!
//! Sealing is pure computation under the volume lock: it packs the dirty
//! inodes, encodes every block, assigns addresses, applies the placements to
//! the IFile and hands back a [`SealedPs`]. Writing it ([`SealedPs::write`])
//! needs no lock; [`Log::complete`] then records it as durable.

use std::sync::Arc;

use super::{Log, Object};
use crate::device::BlockDevice;
use crate::error::{DeviceRole, Error, Result};
use crate::format::block::{self, BlockHeader, BlockKind};
use crate::format::checksum;
use crate::format::codec::Writer;
use crate::format::descriptor::{Change, Descriptor, InodeSummary, PsKind, Summary};
use crate::format::inode_block;
use crate::types::{BLOCK_SIZE, DataBlock, InodeNo, MetaBlock, NodeId, SegmentNo, Seq, Timestamp};

/// Longest single write request to the data device.
const MAX_DATA_RUN_BLOCKS: usize = 2048;

/// A partial segment ready to be written, with the data it makes reachable.
#[derive(Debug)]
pub struct SealedPs {
    /// Its sequence number (None when only data is written: in-place
    /// overwrites need no meta-data).
    pub seq: Option<Seq>,
    meta_at: MetaBlock,
    meta: Vec<u8>,
    data: Vec<(DataBlock, Vec<u8>)>,
}

impl SealedPs {
    /// Blocks it puts on the meta-data device.
    #[must_use]
    pub fn meta_blocks(&self) -> usize {
        self.meta.len() / BLOCK_SIZE
    }

    /// Blocks it puts on the data device.
    #[must_use]
    pub fn data_blocks(&self) -> usize {
        self.data.iter().map(|(_, b)| b.len() / BLOCK_SIZE).sum()
    }

    /// Writes it. Ordering rule 1 is enforced here and only here: the data
    /// is written and flushed before the partial segment that makes it
    /// reachable, and the partial segment is flushed before it counts as
    /// committed.
    ///
    /// # Errors
    /// A device fails; the caller turns the volume read-only.
    pub fn write(&self, meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Result<()> {
        if !self.data.is_empty() {
            for (at, buf) in &self.data {
                data.write_blocks(at.0, buf).map_err(|source| Error::Io {
                    device: DeviceRole::Data,
                    op: "write",
                    block: at.0,
                    source,
                })?;
            }
            data.flush().map_err(|source| Error::Io {
                device: DeviceRole::Data,
                op: "flush",
                block: 0,
                source,
            })?;
        }
        if !self.meta.is_empty() {
            meta.write_blocks(self.meta_at.0, &self.meta)
                .map_err(|source| Error::Io {
                    device: DeviceRole::Meta,
                    op: "write",
                    block: self.meta_at.0,
                    source,
                })?;
            meta.flush().map_err(|source| Error::Io {
                device: DeviceRole::Meta,
                op: "flush",
                block: 0,
                source,
            })?;
        }
        Ok(())
    }
}

/// A body block before its address is known.
pub(crate) struct Body {
    pub summary: Summary,
    pub aux: u16,
    pub payload: Vec<u8>,
}

/// Sorts data blocks by address and merges neighbours into large requests.
fn coalesce(mut blocks: Vec<(DataBlock, Vec<u8>)>) -> Vec<(DataBlock, Vec<u8>)> {
    blocks.sort_unstable_by_key(|(b, _)| *b);
    let mut runs: Vec<(DataBlock, Vec<u8>)> = Vec::new();
    for (b, buf) in blocks {
        match runs.last_mut() {
            Some((start, run))
                if start.0 + (run.len() / BLOCK_SIZE) as u64 == b.0
                    && run.len() / BLOCK_SIZE < MAX_DATA_RUN_BLOCKS =>
            {
                run.extend_from_slice(&buf);
            }
            _ => runs.push((b, buf)),
        }
    }
    runs
}

impl Log {
    /// Seals the active partial segment together with `data` (whole data
    /// blocks to write first). Returns None when there is nothing to write.
    ///
    /// # Errors
    /// No segment left to move the log into.
    pub fn seal(
        &mut self,
        data: Vec<(DataBlock, Vec<u8>)>,
        now: Timestamp,
    ) -> Result<Option<SealedPs>> {
        let data = coalesce(data);
        if !self.has_dirty() {
            if data.is_empty() {
                return Ok(None);
            }
            return Ok(Some(SealedPs {
                seq: None,
                meta_at: MetaBlock(0),
                meta: Vec::new(),
                data,
            }));
        }
        let objects = self.cache.dirty_objects();
        let inodes = self.cache.dirty_inodes();
        let changes = std::mem::take(&mut self.changes);
        self.change_bytes = 0;

        let mut bodies = Vec::with_capacity(objects.len());
        for &(owner, id) in &objects {
            let Some(obj) = self.cache.peek_object(id) else {
                continue;
            };
            let (kind, aux, payload) = match obj {
                Object::Node(n) => (BlockKind::Node, n.level, n.encode()),
                Object::Blob(b) => (BlockKind::Blob, 0, b.clone()),
            };
            bodies.push(Body {
                summary: Summary {
                    kind,
                    owner,
                    name: id.0,
                },
                aux,
                payload,
            });
        }

        // Pack inode records in order, closing a block when the next one does not fit.
        let mut packs: Vec<(Vec<InodeSummary>, Vec<InodeNo>)> = Vec::new();
        let (mut count, mut bytes) = (0usize, 0usize);
        for &ino in &inodes {
            let Some(rec) = self.cache.peek_inode(ino) else {
                continue;
            };
            let len = rec.encoded_len();
            if packs.is_empty() || !inode_block::fits(count, bytes, len) {
                packs.push((Vec::new(), Vec::new()));
                (count, bytes) = (0, 0);
            }
            let last = packs.last_mut().expect("a pack was just pushed");
            last.0.push(InodeSummary {
                ino,
                generation: rec.generation,
                len: len as u16,
            });
            last.1.push(ino);
            count += 1;
            bytes += len;
        }
        let inode_payloads: Vec<(Vec<InodeSummary>, Vec<u8>)> = packs
            .into_iter()
            .map(|(summaries, inos)| {
                let recs: Vec<_> = inos
                    .iter()
                    .filter_map(|i| self.cache.peek_inode(*i))
                    .collect();
                (summaries, inode_block::encode(&recs))
            })
            .collect();

        let sealed = self.write_ps(PsKind::Normal, bodies, inode_payloads, changes, now, data)?;
        let ids: Vec<NodeId> = objects.iter().map(|(_, id)| *id).collect();
        if let Some(seq) = sealed.seq {
            self.cache.mark_sealed(&inodes, &ids, seq);
        }
        Ok(Some(sealed))
    }

    /// Moves the log into its reserved next segment and reserves another.
    fn advance_segment(&mut self) -> Result<()> {
        let next = self.head.next_segment;
        self.head.segment = next;
        self.head.offset = 0;
        // With the head moved, the old next segment is no longer a candidate.
        self.head.next_segment = next;
        let after = self
            .pick_free_segment()
            .ok_or(Error::NoSpace(DeviceRole::Meta))?;
        self.head.next_segment = after;
        Ok(())
    }

    /// Places and encodes one partial segment and applies its placements to
    /// the IFile. Shared by sealing and checkpointing.
    pub(crate) fn write_ps(
        &mut self,
        kind: PsKind,
        bodies: Vec<Body>,
        inode_payloads: Vec<(Vec<InodeSummary>, Vec<u8>)>,
        changes: Vec<Change>,
        now: Timestamp,
        data: Vec<(DataBlock, Vec<u8>)>,
    ) -> Result<SealedPs> {
        let (sealed, ()) = self.write_ps_full(
            kind,
            bodies,
            inode_payloads,
            changes,
            now,
            data,
            |_, _, _| (),
        )?;
        Ok(sealed)
    }

    /// A partial segment of body blocks whose payloads depend on where they
    /// land: `fill` sees the address of the first body block before encoding.
    pub(crate) fn write_ps_with<R>(
        &mut self,
        kind: PsKind,
        bodies: Vec<Body>,
        now: Timestamp,
        fill: impl FnOnce(&mut Log, MetaBlock, &mut [Body]) -> R,
    ) -> Result<(SealedPs, R)> {
        self.write_ps_full(kind, bodies, Vec::new(), Vec::new(), now, Vec::new(), fill)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_ps_full<R>(
        &mut self,
        kind: PsKind,
        mut bodies: Vec<Body>,
        inode_payloads: Vec<(Vec<InodeSummary>, Vec<u8>)>,
        changes: Vec<Change>,
        now: Timestamp,
        data: Vec<(DataBlock, Vec<u8>)>,
        fill: impl FnOnce(&mut Log, MetaBlock, &mut [Body]) -> R,
    ) -> Result<(SealedPs, R)> {
        let mut desc = Descriptor {
            kind,
            seq: self.head.seq,
            time: now,
            segment: SegmentNo(0),
            offset: 0,
            next_segment: SegmentNo(0),
            prev_crc: self.head.prev_crc,
            body_crc: 0,
            blocks: bodies.iter().map(|b| b.summary).collect(),
            inode_blocks: inode_payloads.iter().map(|(s, _)| s.clone()).collect(),
            changes,
        };
        let total = desc.total_blocks();
        let seg_blocks = self.sb.segment_blocks as usize;
        if total > seg_blocks {
            // The operation-size bound makes this impossible; refuse rather
            // than write a partial segment that roll-forward would reject.
            return Err(Error::Invalid("partial segment larger than a segment"));
        }
        if self.head.offset as usize + total > seg_blocks {
            self.advance_segment()?;
        }
        desc.segment = self.head.segment;
        desc.offset = self.head.offset;
        desc.next_segment = self.head.next_segment;
        let seq = self.head.seq;
        let start = self.ifile.geometry().start(self.head.segment).0 + u64::from(self.head.offset);
        let desc_blocks = desc.desc_blocks();
        let filled = fill(self, MetaBlock(start + desc_blocks as u64), &mut bodies);

        let mut body_bytes = Vec::with_capacity((total - desc_blocks) * BLOCK_SIZE);
        let mut crcs = Writer::with_capacity((total - desc_blocks) * 4);
        let mut at = start + desc_blocks as u64;
        for b in &bodies {
            let header = BlockHeader {
                kind: b.summary.kind,
                aux: b.aux,
                payload_len: b.payload.len() as u32,
                volume_id: self.volume_id,
                address: MetaBlock(at),
                seq,
                owner: b.summary.owner,
                name: b.summary.name,
            };
            let blk = block::seal_block(&header, &b.payload);
            crcs.u32(block::stored_crc(&blk));
            body_bytes.extend_from_slice(&blk);
            at += 1;
        }
        let inode_start = at;
        for (_, payload) in &inode_payloads {
            let header = BlockHeader {
                kind: BlockKind::Inodes,
                aux: 0,
                payload_len: payload.len() as u32,
                volume_id: self.volume_id,
                address: MetaBlock(at),
                seq,
                owner: InodeNo(0),
                name: 0,
            };
            let blk = block::seal_block(&header, payload);
            crcs.u32(block::stored_crc(&blk));
            body_bytes.extend_from_slice(&blk);
            at += 1;
        }
        desc.body_crc = checksum::crc32c(&crcs.into_inner());
        let (payloads, desc_crc) = desc.encode();
        debug_assert_eq!(payloads.len(), desc_blocks);
        let mut meta = Vec::with_capacity(total * BLOCK_SIZE);
        for (i, p) in payloads.iter().enumerate() {
            let header = BlockHeader {
                kind: BlockKind::Descriptor,
                aux: i as u16,
                payload_len: p.len() as u32,
                volume_id: self.volume_id,
                address: MetaBlock(start + i as u64),
                seq,
                owner: InodeNo(0),
                name: desc_blocks as u64,
            };
            meta.extend_from_slice(&block::seal_block(&header, p));
        }
        meta.extend_from_slice(&body_bytes);

        if kind == PsKind::Normal {
            let first_body = start + desc_blocks as u64;
            self.apply_placements(&desc, MetaBlock(first_body), MetaBlock(inode_start));
        }
        self.ifile.note_write(self.head.segment, seq);
        self.head.offset += total as u32;
        self.head.seq = seq.next();
        self.head.prev_crc = desc_crc;
        self.blocks_since_checkpoint += total as u64;
        self.stats.partial_segments += 1;
        self.stats.meta_blocks_written += total as u64;
        self.stats.data_blocks_written += data
            .iter()
            .map(|(_, b)| (b.len() / BLOCK_SIZE) as u64)
            .sum::<u64>();
        Ok((
            SealedPs {
                seq: Some(seq),
                meta_at: MetaBlock(start),
                meta,
                data,
            },
            filled,
        ))
    }

    /// The placements a normal partial segment implies: every body block's
    /// node now lives where it was written, every inode in its inode block.
    /// Roll-forward calls this too, after the change records.
    pub(crate) fn apply_placements(
        &mut self,
        desc: &Descriptor,
        first_body: MetaBlock,
        first_inode_block: MetaBlock,
    ) {
        for (i, s) in desc.blocks.iter().enumerate() {
            if matches!(s.kind, BlockKind::Node | BlockKind::Blob) {
                self.ifile
                    .place_node(NodeId(s.name), MetaBlock(first_body.0 + i as u64));
            }
        }
        for (i, list) in desc.inode_blocks.iter().enumerate() {
            let at = MetaBlock(first_inode_block.0 + i as u64);
            for s in list {
                self.ifile.place_inode(s.ino, s.generation, at, s.len);
            }
        }
    }

    /// Records that a sealed partial segment is durable: frees it carried may
    /// now be reused, and what it wrote may leave the cache.
    pub fn complete(&mut self, sealed: &SealedPs, cache_budget: usize) {
        if let Some(seq) = sealed.seq {
            self.durable = self.durable.max(seq);
        }
        self.space.release(self.durable);
        self.cache.evict(cache_budget, self.durable);
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
        assert_eq!(runs[0].1.len(), 3 * BLOCK_SIZE);
        assert_eq!(runs[0].1[BLOCK_SIZE], 4);
        assert_eq!(runs[1].0, DataBlock(9));
    }
}
