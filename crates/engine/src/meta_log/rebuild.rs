//! The IFile's maps rebuilt from the log itself, for repair when no
//! checkpoint loads (both slots damaged, or the IFile blocks both share).
//!
//! The log describes itself: every block names its sequence, every IFile
//! table block its table and place, every partial segment the placements
//! and frees it makes. Replaying, in sequence order, every IFile table
//! block still intact (a snapshot of its entries as of its checkpoint) and
//! every complete commit group still intact (placements and frees of
//! single entries) gives the newest state of the inode map and node map the
//! log still holds. Where a newer copy is lost and the groups since it were
//! cleaned away, an entry is as old as the newest copy left: repair's walk
//! of the namespace decides what of it is kept. Segment usage is recounted
//! from the maps, and the data bitmap is left for repair to rebuild from
//! the files' extents.

use std::collections::HashMap;
use std::sync::Arc;

use super::Log;
use super::recovery::ReadPs;
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Result};
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::{Checkpoint, LogPosition};
use crate::format::codec::Reader;
use crate::format::descriptor::{Change, PS_GROUP_END, PsKind};
use crate::format::ifile::{IMAP_ORPHAN, IMAP_USED, ImapEntry, SegUsage, TableId};
use crate::format::superblock::CHECKPOINT_SLOTS;
use crate::types::{BLOCK_SIZE, MetaBlock, SegmentNo, Seq};

/// Blocks read per request while scanning.
const SCAN_CHUNK_BLOCKS: u64 = 256;

/// What a rebuild found and used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Valid partial segments found anywhere in the log.
    pub partial_segments: u64,
    /// Complete commit groups replayed.
    pub groups: u64,
    /// Intact IFile table blocks (inode map, node map, segment usage) replayed.
    pub table_blocks: u64,
    /// Blocks that could not be read at all (device errors).
    pub unreadable: u64,
    /// The highest sequence number any block carries.
    pub last_seq: Seq,
}

/// One thing to replay, in sequence order.
enum Event {
    /// An IFile table block as of its checkpoint.
    Snapshot { table: TableId, index: u32, payload: Vec<u8> },
    /// A complete commit group.
    Group(Vec<ReadPs>),
}

impl Log {
    /// Builds a log whose inode map and node map come from a scan of the
    /// whole log (see the module documentation), for repair. The head is
    /// put in a free segment past every sequence number found, detached
    /// from any checkpoint's chain; the next checkpoint writes every table.
    ///
    /// # Errors
    /// The superblocks are not a volume's; a device fails.
    pub fn rebuild(meta: Arc<dyn BlockDevice>, data: Arc<dyn BlockDevice>) -> Result<(Log, RebuildReport)> {
        let (sb, _) = Log::read_superblocks_noting(meta.as_ref(), data.as_ref())?;
        let mut log = Log::fresh(sb, meta, data);
        let mut report = RebuildReport::default();
        let mut events: Vec<(Seq, Event)> = Vec::new();
        let mut starts: Vec<(SegmentNo, u32)> = Vec::new();
        let mut last_seq_of: HashMap<u32, Seq> = HashMap::new();
        let geometry = log.ifile.geometry();
        for s in 0..log.sb.segment_count {
            let seg = SegmentNo(s);
            let start = geometry.start(seg).0;
            let mut off = 0u64;
            while off < u64::from(geometry.blocks) {
                let n = (u64::from(geometry.blocks) - off).min(SCAN_CHUNK_BLOCKS);
                let raw = log.read_tolerant(start + off, n as usize, &mut report.unreadable)?;
                for (i, b) in raw.chunks_exact(BLOCK_SIZE).enumerate() {
                    let at = MetaBlock(start + off + i as u64);
                    let Ok((h, payload)) = block::open_block(b, at, log.volume_id) else { continue };
                    report.last_seq = report.last_seq.max(h.seq);
                    match h.kind {
                        BlockKind::Descriptor if h.aux == 0 => starts.push((seg, (off + i as u64) as u32)),
                        BlockKind::IFileTable => {
                            let table = TableId::from_code((h.name >> 32) as u8);
                            if let Some(table @ (TableId::InodeMap | TableId::NodeMap | TableId::SegmentUsage)) = table
                            {
                                let index = (h.name & 0xffff_ffff) as u32;
                                events.push((h.seq, Event::Snapshot { table, index, payload: payload.to_vec() }));
                                report.table_blocks += 1;
                            }
                        }
                        _ => {}
                    }
                }
                off += n;
            }
        }
        // Every valid partial segment, by the checksum its successor names.
        let mut by_crc: HashMap<u32, ReadPs> = HashMap::new();
        for (seg, off) in starts {
            if let Some(ps) = log.read_any_ps(seg, off)? {
                let e = last_seq_of.entry(ps.desc.segment.0).or_default();
                *e = (*e).max(ps.desc.seq);
                report.partial_segments += 1;
                by_crc.insert(ps.desc_crc, ps);
            }
        }
        // Complete groups: from each partial segment ending one, back along
        // the chain while the predecessor belongs to the same group.
        let ends: Vec<u32> = by_crc.iter().filter(|(_, p)| p.desc.flags & PS_GROUP_END != 0).map(|(c, _)| *c).collect();
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for end in ends {
            let mut chain = vec![end];
            let mut cur = end;
            while let Some(prev) = by_crc.get(&cur).map(|p| (p.desc.prev_crc, p.desc.seq)).and_then(|(crc, seq)| {
                by_crc.get(&crc).filter(|q| q.desc.seq.next() == seq && q.desc.flags & PS_GROUP_END == 0).map(|_| crc)
            }) {
                if chain.contains(&prev) {
                    break;
                }
                chain.push(prev);
                cur = prev;
            }
            chain.reverse();
            groups.push(chain);
        }
        for chain in groups {
            let group: Vec<ReadPs> = chain.iter().filter_map(|c| by_crc.get(c).cloned()).collect();
            if let Some(first) = group.first() {
                events.push((first.desc.seq, Event::Group(group)));
            }
        }
        // Sequence order; at one sequence number, a snapshot after the group
        // (the checkpoint that wrote it came after everything before it).
        events.sort_by_key(|(seq, e)| (*seq, matches!(e, Event::Snapshot { .. })));
        // Fsync partial segments after the last commit group are replayed
        // by the volume, as after a roll-forward (a group folds those before
        // it: it carries all that they said).
        let mut fsyncs: Vec<ReadPs> = Vec::new();
        for (seq, e) in events {
            match e {
                Event::Snapshot { table, index, payload } => log.apply_snapshot(table, index, &payload, seq),
                Event::Group(g) => {
                    if g.iter().all(|p| p.desc.kind == PsKind::Normal || p.desc.kind == PsKind::Checkpoint) {
                        log.replay_group_for_rebuild(&g);
                        report.groups += 1;
                        if g.iter().any(|p| p.desc.kind == PsKind::Normal) {
                            fsyncs.clear();
                        }
                    } else if let [ps] = g.as_slice()
                        && ps.desc.kind == PsKind::Fsync
                    {
                        fsyncs.push(ps.clone());
                    }
                }
            }
        }
        for ps in fsyncs {
            let at = MetaBlock(log.ifile.geometry().start(ps.desc.segment).0 + u64::from(ps.desc.offset));
            log.pending_fsync.push(super::fsync::PendingFsync {
                seq: ps.desc.seq,
                at,
                records: ps.desc.fsync,
                copies: ps.copies,
            });
        }
        for (s, seq) in last_seq_of {
            log.ifile.note_write(SegmentNo(s), seq);
        }
        log.ifile.recount_live_bytes();
        log.ifile.rebuild_free_lists();
        // The newest slot's number, whatever its state: the next checkpoint
        // must be newer than anything a later open could still decode.
        let number = CHECKPOINT_SLOTS
            .iter()
            .filter_map(|s| device::read(log.meta.as_ref(), DeviceRole::Meta, s.0, 1).ok())
            .filter_map(|raw| Checkpoint::decode(&raw).ok())
            .map(|c| c.number)
            .max()
            .unwrap_or(0);
        let head = LogPosition {
            seq: report.last_seq.next(),
            segment: SegmentNo(0),
            offset: 0,
            next_segment: SegmentNo(0),
            prev_crc: 0,
        };
        log.ckpt.number = number;
        log.ckpt.log = head;
        log.head = head;
        let first = log.pick_free_segment()?.unwrap_or(SegmentNo(0));
        log.head.segment = first;
        log.head.next_segment = first;
        if let Some(next) = log.pick_free_segment()? {
            log.head.next_segment = next;
        }
        log.durable = Seq(head.seq.0 - 1);
        // Nothing is reachable from a durable checkpoint until repair writes one.
        log.vouched = Seq(0);
        log.detached = true;
        let _ = log.space.recount();
        log.recount_free_segments();
        Ok((log, report))
    }

    /// Reads `count` blocks from `first`, a failed request again block by
    /// block, with unreadable blocks as zeros (counted in `unreadable`).
    fn read_tolerant(&self, first: u64, count: usize, unreadable: &mut u64) -> Result<Vec<u8>> {
        if let Ok(raw) = self.read_meta(MetaBlock(first), count) {
            return Ok(raw);
        }
        let mut out = vec![0u8; count * BLOCK_SIZE];
        for i in 0..count {
            match self.read_meta(MetaBlock(first + i as u64), 1) {
                Ok(b) => out[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE].copy_from_slice(&b),
                Err(_) => *unreadable += 1,
            }
        }
        Ok(out)
    }

    /// Sets the entries an IFile table block lists (whatever the table's
    /// size now: a table grows to hold them).
    fn apply_snapshot(&mut self, table: TableId, index: u32, payload: &[u8], seq: Seq) {
        let first = index as usize * table.per_block();
        let n = payload.len() / table.entry_len();
        let bound = match table {
            TableId::InodeMap => self.max_inode_number(),
            _ => self.max_node_id(),
        };
        if n > table.per_block() || (first + n) as u64 > bound {
            return;
        }
        let mut r = Reader::new(payload);
        match table {
            TableId::InodeMap => {
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    match ImapEntry::decode(&mut r) {
                        Ok(e) => entries.push(e),
                        Err(_) => return,
                    }
                }
                self.ifile.inodes.grow(first + n);
                for (i, e) in entries.into_iter().enumerate() {
                    // Entry 0 is reserved whatever the block says.
                    if first + i != 0 {
                        self.ifile.inodes.set(first + i, e);
                    }
                }
            }
            TableId::NodeMap => {
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    match r.u64() {
                        Ok(a) => entries.push(a),
                        Err(_) => return,
                    }
                }
                self.ifile.nodes.grow(first + n);
                for (i, a) in entries.into_iter().enumerate() {
                    if first + i != 0 {
                        self.ifile.nodes.set(first + i, a);
                    }
                }
            }
            TableId::SegmentUsage => {
                for i in 0..n {
                    let Ok(u) = SegUsage::decode(&mut r) else { return };
                    if first + i < self.ifile.segments.len() {
                        let s = SegmentNo((first + i) as u32);
                        self.ifile.note_write(s, u.last_seq.min(seq));
                    }
                }
            }
            TableId::GroupDesc | TableId::Bitmap => {}
        }
    }

    /// A group's placements and frees on the maps, in roll-forward's order
    /// (data-space records are left out: repair recounts the bitmap from
    /// the files). Entries are set directly: live bytes are recounted from
    /// the maps once everything is replayed.
    fn replay_group_for_rebuild(&mut self, group: &[ReadPs]) {
        let normal: Vec<&ReadPs> = group.iter().filter(|p| p.desc.kind == PsKind::Normal).collect();
        for ps in &normal {
            for c in &ps.desc.changes {
                match *c {
                    Change::NodeFree(id) => self.set_node_entry(id.0, 0),
                    Change::InodeFree { ino, generation } => {
                        self.set_inode_entry(ino.0, |_| ImapEntry { generation, ..ImapEntry::default() });
                    }
                    _ => {}
                }
            }
        }
        for ps in &normal {
            for (i, s) in ps.desc.blocks.iter().enumerate() {
                if matches!(s.kind, BlockKind::Node | BlockKind::Blob) {
                    self.set_node_entry(s.name, ps.first_body.0 + i as u64);
                }
            }
            let first_inode_block = ps.first_body.0 + ps.desc.blocks.len() as u64;
            for (i, list) in ps.desc.inode_blocks.iter().enumerate() {
                for s in list {
                    self.set_inode_entry(s.ino.0, |old| ImapEntry {
                        address: MetaBlock(first_inode_block + i as u64),
                        generation: s.generation,
                        flags: IMAP_USED | (old.flags & IMAP_ORPHAN),
                        record_len: s.len,
                    });
                }
            }
        }
        for ps in &normal {
            for c in &ps.desc.changes {
                match *c {
                    Change::OrphanAdd(ino) => self.set_inode_entry(ino.0, |old| ImapEntry {
                        flags: if old.in_use() { old.flags | IMAP_ORPHAN } else { old.flags },
                        ..old
                    }),
                    Change::OrphanRemove(ino) => {
                        self.set_inode_entry(ino.0, |old| ImapEntry { flags: old.flags & !IMAP_ORPHAN, ..old });
                    }
                    _ => {}
                }
            }
        }
    }

    /// Sets node map entry `id` (growing the map; id 0 stays reserved).
    /// Ids beyond what any volume could use are ignored.
    fn set_node_entry(&mut self, id: u64, address: u64) {
        if id == 0 || id > self.max_node_id() {
            return;
        }
        self.ifile.nodes.grow(id as usize + 1);
        self.ifile.nodes.set(id as usize, address);
    }

    /// Sets inode map entry `ino` from its old value (growing the map;
    /// inode 0 stays reserved).
    fn set_inode_entry(&mut self, ino: u64, f: impl FnOnce(ImapEntry) -> ImapEntry) {
        if ino == 0 || ino > self.max_inode_number() {
            return;
        }
        self.ifile.inodes.grow(ino as usize + 1);
        let old = self.ifile.inodes.get(ino as usize);
        self.ifile.inodes.set(ino as usize, f(old));
    }
}
