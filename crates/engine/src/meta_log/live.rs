//! What a scrub reads: every meta-data block the durable checkpoint and the
//! log after it reach, each with what it must hold, and the check of one
//! such block read back (the decoders' own checks: checksum, kind, address,
//! name, then the structure's decoder).
//!
//! The list comes from the maps in memory (inode map, node map, the IFile's
//! block and index addresses, the snapshot list), so it costs no reads past
//! the map blocks a lazy mount left on disk. The blocks are read by the
//! caller, without the volume's lock on a mounted volume; a block that
//! fails is looked up again with [`Log::still_live`] before it is reported,
//! since the log may have moved the object meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Log;
use super::cache::Object;
use super::checkpoint::{open_table_block, tables};
use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::Checkpoint;
use crate::format::ifile::{INDEX_PER_BLOCK, IndexBlock, TableId};
use crate::format::inode::InodeRecord;
use crate::format::inode_block;
use crate::format::node::Node;
use crate::format::superblock::CHECKPOINT_SLOTS;
use crate::ifile::SegmentGeometry;
use crate::types::{InodeNo, MetaBlock, NodeId};

/// What a live meta-data block must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveKind {
    /// A block of an IFile table.
    Table {
        /// The table.
        table: TableId,
        /// Its block number in the table.
        block: u32,
    },
    /// An index block of an IFile table.
    Index {
        /// The table.
        table: TableId,
        /// The chunk it lists.
        chunk: u32,
    },
    /// Packed inode records: these inodes' current records among them.
    Inodes(Vec<InodeNo>),
    /// A B-tree node or blob.
    Node(NodeId),
    /// The snapshot list.
    SnapshotList,
    /// A snapshot's block.
    Snapshot(String),
}

impl LiveKind {
    /// The structure in words, as a report names it.
    #[must_use]
    pub fn structure(&self) -> String {
        match self {
            LiveKind::Table { table, block } => format!("{} block {block}", table.name()),
            LiveKind::Index { table, chunk } => format!("{} index block {chunk}", table.name()),
            LiveKind::Inodes(_) => "inode block".into(),
            LiveKind::Node(id) => format!("node {id}"),
            LiveKind::SnapshotList => "snapshot list".into(),
            LiveKind::Snapshot(name) => format!("snapshot block of {name}"),
        }
    }
}

/// One live meta-data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    /// Where it is.
    pub at: MetaBlock,
    /// What it holds.
    pub kind: LiveKind,
}

/// What a block that passed its check held, for the walk of the files.
#[derive(Debug)]
pub enum Decoded {
    /// Nothing the walk needs.
    Nothing,
    /// The records of the inodes it was listed for.
    Inodes(Vec<InodeRecord>),
    /// A node or blob, with the inode its header names.
    Object(NodeId, InodeNo, Object),
}

/// A block of the checkpoint slots or the log after the checkpoint that
/// failed: its address, the structure, what is wrong.
pub type TailDamage = (u64, &'static str, String);

/// Checks blocks read back against what they must hold; needs nothing of
/// the log but its identity, so it runs without the volume's lock.
#[derive(Clone, Copy, Debug)]
pub struct Verifier {
    volume_id: u64,
    geometry: SegmentGeometry,
}

impl Verifier {
    /// Checks `raw`, read at `b.at`: the decoders' checks, and that it holds
    /// what the maps say. `Err` says what is wrong.
    ///
    /// # Errors
    /// The block is damaged, misplaced, or holds something else.
    pub fn verify(&self, raw: &[u8], b: &LiveBlock) -> std::result::Result<Decoded, String> {
        let at = b.at;
        let kind_of = |k| block::open_block_of_kind(raw, at, self.volume_id, k).map_err(|e| e.0);
        match &b.kind {
            LiveKind::Table { table, block } => {
                open_table_block(raw, *table, *block, at, self.volume_id).map_err(|e| e.to_string())?;
                Ok(Decoded::Nothing)
            }
            LiveKind::Index { table, chunk } => {
                let (h, payload) = kind_of(BlockKind::IFileIndex)?;
                let first = chunk * INDEX_PER_BLOCK as u32;
                let ib = IndexBlock::decode(payload).map_err(|e| e.0)?;
                if ib.table != *table || ib.first != first || h.name != table.block_name(first) {
                    return Err("does not list the blocks the checkpoint names".into());
                }
                if let Some(a) = ib.addresses.iter().find(|a| a.0 != 0 && self.geometry.segment_of(**a).is_none()) {
                    return Err(format!("lists block {} outside the log", a.0));
                }
                Ok(Decoded::Nothing)
            }
            LiveKind::Inodes(inos) => {
                let (_, payload) = kind_of(BlockKind::Inodes)?;
                let records = inode_block::decode_all(payload).map_err(|e| e.0)?;
                let mut out = Vec::with_capacity(inos.len());
                for ino in inos {
                    match records.iter().find(|r| r.ino == *ino) {
                        Some(r) => out.push(r.clone()),
                        None => return Err(format!("lacks the record of inode {ino} the inode map puts there")),
                    }
                }
                Ok(Decoded::Inodes(out))
            }
            LiveKind::Node(id) => {
                let (h, payload) = block::open_block(raw, at, self.volume_id).map_err(|e| e.0)?;
                if h.name != id.0 {
                    return Err(format!("holds node {} instead of {id}", h.name));
                }
                let obj = match h.kind {
                    BlockKind::Node => Object::Node(Node::decode(payload, h.aux).map_err(|e| e.0)?),
                    BlockKind::Blob => Object::Blob(payload.to_vec()),
                    k => return Err(format!("is a {} block, not node {id}", k.name())),
                };
                Ok(Decoded::Object(*id, h.owner, obj))
            }
            LiveKind::SnapshotList => kind_of(BlockKind::SnapshotList).map(|_| Decoded::Nothing),
            LiveKind::Snapshot(_) => kind_of(BlockKind::Snapshot).map(|_| Decoded::Nothing),
        }
    }
}

impl Log {
    /// What checks blocks of this log.
    #[must_use]
    pub fn verifier(&self) -> Verifier {
        Verifier { volume_id: self.volume_id, geometry: self.ifile.geometry() }
    }

    /// Every meta-data block the durable checkpoint reaches and the maps
    /// in memory name (roll-forward and later commits included), in
    /// address order. `with_snapshots`: the snapshot list and snapshot
    /// blocks too (their images are listed by opening each).
    ///
    /// # Errors
    /// An inode-map or index block left on disk cannot be read.
    pub fn live_blocks(&mut self, with_snapshots: bool) -> Result<Vec<LiveBlock>> {
        self.load_whole_inode_map()?;
        self.load_ifile_index()?;
        let mut out = Vec::new();
        for t in tables(self) {
            let table = t.table_id();
            for block in 0..t.blocks() as u32 {
                let at = t.block_address(block);
                if at.0 != 0 {
                    out.push(LiveBlock { at, kind: LiveKind::Table { table, block } });
                }
            }
        }
        for (&(table, chunk), &at) in &self.ckpt.index {
            out.push(LiveBlock { at, kind: LiveKind::Index { table, chunk } });
        }
        let mut inode_blocks: BTreeMap<MetaBlock, Vec<InodeNo>> = BTreeMap::new();
        for i in 1..self.ifile.inodes.len() as u64 {
            let e = self.ifile.inodes.get(i as usize);
            // Never written yet: its first commit is still to come.
            if e.in_use() && e.address.0 != 0 {
                inode_blocks.entry(e.address).or_default().push(InodeNo(i));
            }
        }
        out.extend(inode_blocks.into_iter().map(|(at, inos)| LiveBlock { at, kind: LiveKind::Inodes(inos) }));
        for id in 1..self.ifile.nodes.len() as u64 {
            let at = self.ifile.node_address(NodeId(id));
            if at.0 != 0 {
                out.push(LiveBlock { at, kind: LiveKind::Node(NodeId(id)) });
            }
        }
        if with_snapshots {
            if let Some(at) = self.snaps.list {
                out.push(LiveBlock { at, kind: LiveKind::SnapshotList });
            }
            for s in &self.snaps.all {
                if s.address.0 != 0 {
                    out.push(LiveBlock { at: s.address, kind: LiveKind::Snapshot(s.name.clone()) });
                }
            }
        }
        out.sort_by_key(|b| b.at);
        Ok(out)
    }

    /// Whether `b` is still what the maps name at its address (a block
    /// that failed its check while the volume kept changing may have been
    /// moved, and its segment reused).
    ///
    /// # Errors
    /// A map block left on disk cannot be read.
    pub fn still_live(&mut self, b: &LiveBlock) -> Result<bool> {
        Ok(match &b.kind {
            LiveKind::Table { table, block } => {
                let source = self.table_source();
                let mut found = false;
                for t in tables(self) {
                    if t.table_id() == *table && (*block as usize) < t.blocks() {
                        t.read_chunk(block / INDEX_PER_BLOCK as u32, &source)?;
                        found = t.block_address(*block) == b.at;
                    }
                }
                found
            }
            LiveKind::Index { table, chunk } => self.ckpt.index.get(&(*table, *chunk)) == Some(&b.at),
            LiveKind::Inodes(inos) => {
                self.ensure_inode_blocks(inos.iter().copied())?;
                inos.iter().any(|&i| self.ifile.inode(i).is_some_and(|e| e.in_use() && e.address == b.at))
            }
            LiveKind::Node(id) => self.ifile.node_address(*id) == b.at,
            LiveKind::SnapshotList => self.snaps.list == Some(b.at),
            LiveKind::Snapshot(name) => self.snaps.all.iter().any(|s| &s.name == name && s.address == b.at),
        })
    }

    /// The inodes the log's own summaries say own the block at `at`: the
    /// owner of a node or blob, the inodes packed in an inode block, read
    /// from the descriptor of its partial segment (so they are known when
    /// the block itself is unreadable). Empty when no descriptor of its
    /// segment lists it, or the block is an IFile block.
    ///
    /// # Errors
    /// The device fails.
    pub fn owners_of(&self, at: MetaBlock) -> Result<Vec<InodeNo>> {
        let geometry = self.ifile.geometry();
        let Some(s) = geometry.segment_of(at) else { return Ok(Vec::new()) };
        let start = geometry.start(s).0;
        let mut off = 0u32;
        let mut last_seq = None;
        while off < self.sb.segment_blocks {
            let Ok((desc, _, n)) = self.read_descriptor(s, off, None)? else { break };
            if last_seq.is_some_and(|l| desc.seq <= l) {
                break;
            }
            last_seq = Some(desc.seq);
            let first_body = start + u64::from(off) + n as u64;
            let end = start + u64::from(off) + desc.total_blocks() as u64;
            if (first_body..end).contains(&at.0) {
                let i = (at.0 - first_body) as usize;
                if let Some(sum) = desc.blocks.get(i) {
                    return Ok(match sum.kind {
                        BlockKind::Node | BlockKind::Blob => vec![sum.owner],
                        _ => Vec::new(),
                    });
                }
                let list = desc.inode_blocks.get(i - desc.blocks.len());
                return Ok(list.map(|l| l.iter().map(|s| s.ino).collect()).unwrap_or_default());
            }
            off += desc.total_blocks() as u32;
        }
        Ok(Vec::new())
    }

    /// Reads the checkpoint slots and the log from the durable checkpoint
    /// to the newest durable partial segment, checking each partial
    /// segment as roll-forward does. Returns the blocks read and what
    /// failed: `(block, structure, what is wrong)`.
    ///
    /// # Errors
    /// The device fails.
    pub fn scrub_log_tail(&self) -> Result<(u64, Vec<TailDamage>)> {
        let mut bad = Vec::new();
        let mut read = 0u64;
        let mut newest_ok = false;
        for slot in CHECKPOINT_SLOTS {
            let raw = self.read_meta(slot, 1)?;
            read += 1;
            match Checkpoint::decode(&raw) {
                Ok(c) if c.number == self.ckpt.number => newest_ok = true,
                Ok(_) => {}
                // Never written: a young volume has used one slot only.
                Err(_) if raw.iter().all(|&b| b == 0) => {}
                Err(e) => {
                    bad.push((slot.0, "checkpoint slot", format!("the older checkpoint, kept to fall back to: {e}")))
                }
            }
        }
        if !newest_ok {
            bad.push((
                CHECKPOINT_SLOTS[0].0,
                "checkpoint slot",
                format!("no slot holds checkpoint {}, the one in use", self.ckpt.number),
            ));
        }
        let mut pos = self.ckpt.log;
        while pos.seq <= self.durable {
            let found = match self.read_ps(pos.segment, pos.offset, pos.seq, pos.prev_crc)? {
                Ok(ps) => Some(ps),
                Err(here) => match self.read_ps(pos.next_segment, 0, pos.seq, pos.prev_crc)? {
                    Ok(ps) => Some(ps),
                    Err(_) => match self.walk_over_checkpoint(pos)? {
                        Some((ps, why)) => {
                            bad.push((ps.first_body.0, "checkpoint partial segment", why));
                            Some(ps)
                        }
                        None => {
                            let at = here.block().unwrap_or(0);
                            bad.push((
                                at,
                                "log after the checkpoint",
                                format!("partial segment {}: {here}", pos.seq.0),
                            ));
                            None
                        }
                    },
                },
            };
            let Some(ps) = found else { break };
            read += u64::from(ps.blocks);
            pos = ps.after();
        }
        Ok((read, bad))
    }
}

impl Log {
    /// [`Log::scrub_log_tail`] reading from `copy` alone, one copy of a
    /// mirrored meta-data device (whose own reads would mend the first
    /// copy from the second and hide what each holds). The log reads from
    /// `copy` only for the walk; its device is put back before this
    /// returns, also when the walk fails.
    ///
    /// # Errors
    /// As [`Log::scrub_log_tail`].
    pub fn scrub_log_tail_on(&mut self, copy: Arc<dyn BlockDevice>) -> Result<(u64, Vec<TailDamage>)> {
        /// Puts the log's own device back when dropped.
        struct Restore<'a> {
            log: &'a mut Log,
            saved: Option<Arc<dyn BlockDevice>>,
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                if let Some(d) = self.saved.take() {
                    self.log.meta = d;
                }
            }
        }
        let saved = std::mem::replace(&mut self.meta, copy);
        let g = Restore { log: self, saved: Some(saved) };
        g.log.scrub_log_tail()
    }
}
