//! Checkpoints: writing the IFile into the log and pointing a slot at it,
//! and loading it back at mount.
//!
//! Only IFile blocks that changed since the previous checkpoint are written,
//! with the index blocks that list them. The slot is written last and
//! alternates between two places, so a torn slot write leaves the previous
//! checkpoint intact (ordering rule 2: the segments the previous checkpoint
//! needs stay pinned until the new slot is durable).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::Log;
use super::seal::{Body, SealedGroup};
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::faults::{self, Fault};
use crate::format::block::BlockKind;
use crate::format::checkpoint::{
    Checkpoint, IndexRef, LogPosition, MAX_INDEX_BLOCKS, MAX_INDEX_BLOCKS_SPARSE, SparseTail, index_entries,
};
use crate::format::descriptor::{PsKind, Summary};
use crate::format::ifile::{INDEX_PER_BLOCK, IndexBlock, TableId};
use crate::format::superblock::CHECKPOINT_SLOTS;
use crate::table::TableAccess;
use crate::types::{InodeNo, MetaBlock, SegmentNo, Timestamp};

pub(crate) use super::ifile_load::{open_table_block, read_scattered};

/// The newest checkpoint known durable, and what it keeps alive.
#[derive(Debug, Clone, Default)]
pub struct DurableCheckpoint {
    /// Its number.
    pub number: u64,
    /// Where its roll-forward starts.
    pub log: LogPosition,
    /// Its IFile table and index blocks that no segment usage entry
    /// counts, by segment: on a sparse IFile those its own partial segments
    /// wrote (the entries it wrote count the others); otherwise all of them.
    pub pins: HashMap<SegmentNo, u32>,
    /// Its index blocks by (table, chunk).
    pub index: BTreeMap<(TableId, u32), MetaBlock>,
}

impl Default for LogPosition {
    fn default() -> Self {
        LogPosition {
            seq: crate::types::Seq(1),
            segment: SegmentNo(0),
            offset: 0,
            next_segment: SegmentNo(1),
            prev_crc: 0,
        }
    }
}

/// A checkpoint ready to be written: its partial segments, then its slot.
#[derive(Debug)]
pub struct SealedCheckpoint {
    part: Option<SealedGroup>,
    slot: MetaBlock,
    record: Checkpoint,
    index: BTreeMap<(TableId, u32), MetaBlock>,
    /// The volume has `INDEX_RUNS`: the record's entries may be runs.
    runs: bool,
    /// What it adds to the IFile blocks the segment usage entries count
    /// (sparse): the durable checkpoint's own blocks, less those it
    /// replaces. Its usage blocks were written so; memory follows once it
    /// is durable.
    adjust: BTreeMap<u32, i64>,
    /// Its own IFile blocks, by segment.
    own: HashMap<SegmentNo, u32>,
}

impl SealedCheckpoint {
    /// The checkpoint record.
    #[must_use]
    pub fn record(&self) -> &Checkpoint {
        &self.record
    }

    /// Writes the IFile partial segments, then the slot, each made durable.
    ///
    /// # Errors
    /// A device fails.
    pub fn write(&self, meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Result<()> {
        if let Some(p) = &self.part {
            p.write(meta, data)?;
        }
        let block = self.record.encode(self.runs);
        device::write(meta.as_ref(), DeviceRole::Meta, self.slot.0, &block)?;
        device::flush(meta.as_ref(), DeviceRole::Meta)
    }

    /// Blocks written in all.
    #[must_use]
    pub fn blocks(&self) -> usize {
        self.part.as_ref().map_or(0, SealedGroup::meta_blocks) + 1
    }
}

/// Every table of the IFile, in on-disk order.
pub(crate) fn tables(log: &mut Log) -> Vec<&mut dyn TableAccess> {
    let [s, i, n] = log.ifile.tables_mut();
    let [g, b] = log.space.tables_mut();
    let mut v: Vec<&mut dyn TableAccess> = vec![s, g, b, i, n];
    v.sort_by_key(|t| t.table_id());
    v
}

impl Log {
    /// The durable checkpoint's IFile blocks in `s` that its segment usage
    /// entry does not count.
    #[must_use]
    pub fn checkpoint_pins(&self, s: SegmentNo) -> u32 {
        self.ckpt.pins.get(&s).copied().unwrap_or(0)
    }

    /// Which table blocks and index chunks a checkpoint writes now, and the
    /// chunks its index names: every block changed, the chunks listing
    /// them, chunks no index block lists yet (not sparse), and every chunk
    /// again when the index's runs must be joined.
    #[allow(clippy::type_complexity)]
    fn checkpoint_plan(
        &mut self,
    ) -> Result<(Vec<(TableId, u32)>, BTreeSet<(TableId, u32)>, BTreeSet<(TableId, u32)>, bool)> {
        let sparse = self.sb.sparse_ifile();
        let mut dirty: Vec<(TableId, u32)> = Vec::new();
        let mut chunks: BTreeSet<(TableId, u32)> = BTreeSet::new();
        let mut wanted: BTreeSet<(TableId, u32)> = BTreeSet::new();
        for t in tables(self) {
            let id = t.table_id();
            for b in t.dirty() {
                dirty.push((id, b));
                chunks.insert((id, b / INDEX_PER_BLOCK as u32));
            }
            for c in 0..t.chunks() as u32 {
                // A sparse table's chunk with no block ever written needs
                // no index block.
                if !sparse || t.index_at(c).is_some() {
                    wanted.insert((id, c));
                }
            }
        }
        wanted.extend(chunks.iter().copied());
        let max = if sparse { MAX_INDEX_BLOCKS_SPARSE } else { MAX_INDEX_BLOCKS };
        if self.index_entries_bound(wanted.len()) > max {
            return Err(Error::NoSpace(DeviceRole::Meta));
        }
        for c in &wanted {
            if !self.ckpt.index.contains_key(c) {
                chunks.insert(*c);
            }
        }
        if self.sb.index_runs() {
            // Index blocks rewritten one here, one there split the runs of
            // those kept; before the entries could pass what a snapshot
            // record holds, every index block is written again, in runs.
            let kept: Vec<IndexRef> = self
                .ckpt
                .index
                .iter()
                .filter(|(k, _)| wanted.contains(k) && !chunks.contains(k))
                .map(|((t, c), a)| IndexRef { table: *t, first: c * INDEX_PER_BLOCK as u32, address: *a })
                .collect();
            if index_entries(&kept, true).len() + chunks.len() > self.index_entry_limit {
                chunks.clone_from(&wanted);
                return Ok((dirty, chunks, wanted, true));
            }
        }
        Ok((dirty, chunks, wanted, false))
    }

    /// The IFile blocks a checkpoint writing `dirty` and `chunks`, its
    /// index naming `wanted`, takes from the segments holding their durable
    /// copies, by segment: those it rewrites, and those no longer part of
    /// the IFile (a shrink cut them off).
    fn replaced_blocks(
        &mut self,
        dirty: &[(TableId, u32)],
        chunks: &BTreeSet<(TableId, u32)>,
        wanted: &BTreeSet<(TableId, u32)>,
    ) -> BTreeMap<u32, i64> {
        let geometry = self.ifile.geometry();
        let mut out: BTreeMap<u32, i64> = BTreeMap::new();
        let cut: Vec<MetaBlock> = tables(self).into_iter().flat_map(|t| t.cut_off()).collect();
        let addresses = dirty
            .iter()
            .map(|&(t, b)| self.table(t).block_address(b))
            .chain(chunks.iter().filter_map(|k| self.ckpt.index.get(k).copied()))
            .chain(self.ckpt.index.iter().filter(|(k, _)| !wanted.contains(k)).map(|(_, a)| *a))
            .chain(cut);
        for a in addresses {
            if let Some(s) = geometry.segment_of(a) {
                *out.entry(s.0).or_default() -= 1;
            }
        }
        out
    }

    /// One table, by id.
    fn table(&self, t: TableId) -> &dyn TableAccess {
        match t {
            TableId::SegmentUsage => &self.ifile.segments,
            TableId::InodeMap => &self.ifile.inodes,
            TableId::NodeMap => &self.ifile.nodes,
            TableId::GroupDesc => &self.space.groups,
            TableId::Bitmap => &self.space.bitmap,
        }
    }

    /// Builds a checkpoint of the current IFile. The caller has committed
    /// every dirty object first, so the IFile matches the log up to the head.
    ///
    /// # Errors
    /// The IFile outgrew what a checkpoint can index, no segment is left,
    /// or a block of the IFile it must rewrite cannot be read.
    pub fn seal_checkpoint(&mut self, now: Timestamp) -> Result<SealedCheckpoint> {
        debug_assert!(!self.has_dirty(), "checkpoint with dirty meta-data");
        // Segments emptied until now: this checkpoint's maps point elsewhere.
        self.tag_emptied();
        let sparse = self.sb.sparse_ifile();
        let source = self.table_source();
        let before = self.ckpt.log.seq;
        // Changes waiting for usage blocks on disk: those blocks are written now.
        for b in self.ifile.usage_blocks_waiting() {
            self.ifile.load_usage_block(b, &source, before)?;
        }
        // On a sparse IFile the usage entries this checkpoint writes count
        // the IFile blocks of the one it follows (now counted, not its own)
        // less those it replaces: the usage blocks holding those entries
        // are written too, which replaces more. Until nothing more changes.
        let mut adjust: BTreeMap<u32, i64> = BTreeMap::new();
        let (dirty_keys, index_now, wanted_chunks, rewrote) = loop {
            let (dirty, chunks, wanted, rewrote) = self.checkpoint_plan()?;
            // An index block lists every block of its chunk: a chunk never
            // read (rewritten to join the runs) is read first.
            for &(t, c) in &chunks {
                for tab in tables(self) {
                    if tab.table_id() == t {
                        tab.read_chunk(c, &source)?;
                    }
                }
            }
            if !sparse {
                break (dirty, chunks, wanted, rewrote);
            }
            let mut want = self.replaced_blocks(&dirty, &chunks, &wanted);
            // The broken rule counts the blocks of the checkpoint followed
            // nowhere: they are its own no longer, nor in any entry.
            if !faults::active(Fault::UncountedCheckpointBlocks) {
                for (s, n) in &self.ckpt.pins {
                    *want.entry(s.0).or_default() += i64::from(*n);
                }
            }
            want.retain(|_, n| *n != 0);
            let mut more = false;
            for &s in want.keys() {
                let b = self.ifile.usage_block_of(SegmentNo(s));
                self.ifile.load_usage_block(b, &source, before)?;
                if !self.ifile.segments.is_block_dirty(b) {
                    self.ifile.segments.mark_dirty(b);
                    more = true;
                }
            }
            adjust = want;
            if !more {
                break (dirty, chunks, wanted, rewrote);
            }
        };
        let replaced = self.replaced_blocks(&dirty_keys, &index_now, &wanted_chunks);
        if rewrote {
            self.stats.index_rewrites += 1;
        }
        // The usage blocks' entries as written; the sums they make.
        let (mut vacant, mut live) = (self.ifile.vacant_segments() as i64, self.ifile.live_total() as i64);
        let mut dirty: Vec<(TableId, u32, Vec<u8>)> = Vec::with_capacity(dirty_keys.len());
        for &(t, b) in &dirty_keys {
            let payload = if sparse && t == TableId::SegmentUsage {
                let (payload, dv, dl) = self.ifile.usage_block_adjusted(b, &adjust);
                vacant += dv;
                live += dl;
                payload
            } else {
                self.table(t).encode(b)
            };
            dirty.push((t, b, payload));
        }

        let mut bodies: Vec<Body> = dirty
            .into_iter()
            .map(|(t, b, payload)| Body {
                summary: Summary { kind: BlockKind::IFileTable, owner: InodeNo(0), name: t.block_name(b) },
                aux: 0,
                payload,
                inodes: None,
            })
            .collect();
        let index_list: Vec<(TableId, u32)> = index_now.iter().copied().collect();
        for (t, c) in &index_list {
            bodies.push(Body {
                summary: Summary {
                    kind: BlockKind::IFileIndex,
                    owner: InodeNo(0),
                    name: t.block_name(c * INDEX_PER_BLOCK as u32),
                },
                aux: 0,
                payload: Vec::new(),
                inodes: None,
            });
        }
        let ifile_bodies = bodies.len();
        // A change of the snapshot list rides on this checkpoint: its
        // blocks come last, after the IFile blocks and index blocks.
        let first_snapshot_body = bodies.len();
        bodies.extend(self.snapshot_bodies());
        self.snaps.staged = None;
        self.snaps.staged_records = None;
        if bodies.is_empty() && self.snaps.pending.is_some() {
            // Deleting the last snapshot writes no block (the checkpoint
            // names no list), and with no IFile block changed either there
            // is no partial segment whose filling would stage the change:
            // stage it here, or the checkpoint repeats the old list.
            self.fill_snapshot_bodies(&[], &mut []);
        }
        let mut part = None;
        let mut new_index: Vec<((TableId, u32), MetaBlock)> = Vec::new();
        let mut own: HashMap<SegmentNo, u32> = HashMap::new();
        if !bodies.is_empty() {
            let (sealed, (staged, written)) = self.encode_group(
                PsKind::Checkpoint,
                bodies,
                Vec::new(),
                now,
                Vec::new(),
                |log, addresses, bodies| {
                    // Table blocks first: their addresses go into the index blocks that follow.
                    for (i, (t, b)) in dirty_keys.iter().enumerate() {
                        for tab in tables(log) {
                            if tab.table_id() == *t {
                                tab.place(*b, addresses[i]);
                            }
                        }
                    }
                    let mut staged = Vec::new();
                    for (k, (t, c)) in index_list.iter().enumerate() {
                        let i = dirty_keys.len() + k;
                        let listed = log.table(*t).chunk_list(*c);
                        bodies[i].payload =
                            IndexBlock { table: *t, first: c * INDEX_PER_BLOCK as u32, addresses: listed }.encode();
                        staged.push(((*t, *c), addresses[i]));
                    }
                    log.fill_snapshot_bodies(&addresses[first_snapshot_body..], &mut bodies[first_snapshot_body..]);
                    (staged, addresses[..ifile_bodies].to_vec())
                },
            )?;
            let geometry = self.ifile.geometry();
            for a in written {
                if let Some(s) = geometry.segment_of(a) {
                    *own.entry(s).or_default() += 1;
                }
            }
            new_index = staged;
            part = Some(sealed);
        }
        // The segments just written must show their last write too; the
        // SUT blocks this dirties go into the next checkpoint, which is
        // harmless: these segments stay pinned while this checkpoint is needed.
        let mut index = self.ckpt.index.clone();
        index.retain(|k, _| wanted_chunks.contains(k));
        index.extend(new_index);
        let tail = sparse.then(|| {
            // Where its first partial segment starts: the head, if nothing
            // was written (no IFile block of its own then).
            let start = part.as_ref().and_then(SealedGroup::start);
            let geometry = self.ifile.geometry();
            let (segment, offset) = start
                .and_then(|a| geometry.segment_of(a).map(|s| (s, (a.0 - geometry.start(s).0) as u32)))
                .unwrap_or((self.head.segment, self.head.offset));
            SparseTail {
                ifile_segment: segment,
                ifile_offset: offset,
                vacant_segments: u32::try_from(vacant.max(0)).unwrap_or(u32::MAX),
                live_bytes: live.max(0) as u64,
            }
        });
        let record = Checkpoint {
            number: self.ckpt.number + 1,
            time: now,
            log: self.head,
            inode_count: self.ifile.inodes.len() as u64,
            node_count: self.ifile.nodes.len() as u64,
            free_data_blocks: self.space.free_blocks(),
            geometry: self.sb.resized().then(|| self.sb.geometry()),
            index: index
                .iter()
                .map(|((t, c), a)| IndexRef { table: *t, first: c * INDEX_PER_BLOCK as u32, address: *a })
                .collect(),
            snapshot_list: self.list_for_checkpoint(),
            sparse: tail,
        };
        let slot = if faults::active(Fault::CheckpointInPlace) {
            CHECKPOINT_SLOTS[0]
        } else {
            CHECKPOINT_SLOTS[(record.number % 2) as usize]
        };
        let runs = self.sb.index_runs();
        debug_assert!(index_entries(&record.index, runs).len() <= MAX_INDEX_BLOCKS, "index bound broken");
        // The blocks just placed are clean but not on disk until the
        // checkpoint is written: none may be given back before.
        self.checkpoint_unwritten = true;
        let own = if sparse {
            own
        } else {
            // Every IFile block is a pin: the old ones less those replaced,
            // and the new.
            let mut all = self.ckpt.pins.clone();
            for (s, n) in replaced {
                let e = all.entry(SegmentNo(s)).or_default();
                *e = u32::try_from(i64::from(*e) + n).unwrap_or(0);
            }
            for (s, n) in own {
                *all.entry(s).or_default() += n;
            }
            all.retain(|_, n| *n > 0);
            all
        };
        if !sparse {
            adjust.clear();
        }
        Ok(SealedCheckpoint { part, slot, record, index, runs, adjust, own })
    }

    /// Records that a checkpoint is durable: the previous one's IFile blocks
    /// and roll-forward range are no longer needed.
    pub fn complete_checkpoint(&mut self, c: &SealedCheckpoint) {
        // What was emptied before this checkpoint was sealed carries its
        // number already; what was emptied while it was written, the next.
        self.keep_previous_checkpoint();
        self.checkpoint_unwritten = false;
        if let Some(part) = &c.part {
            part.forget_read_ahead(&mut self.readahead);
        }
        if let Some(seq) = c.part.as_ref().and_then(|p| p.seq) {
            self.durable = self.durable.max(seq);
        }
        // The new checkpoint starts a chain that reaches the head.
        self.detached = false;
        self.vouched = self.durable;
        self.ckpt.number = c.record.number;
        self.ckpt.log = c.record.log;
        for ((t, chunk), at) in &c.index {
            if self.ckpt.index.get(&(*t, *chunk)) != Some(at) {
                for tab in tables(self) {
                    if tab.table_id() == *t {
                        tab.set_index_at(*chunk, *at);
                    }
                }
            }
        }
        self.ckpt.index = c.index.clone();
        for t in tables(self) {
            t.clear_cut();
        }
        self.ifile.apply_written_adjustment(&c.adjust);
        self.ckpt.pins = c.own.clone();
        self.ifile.checkpoint_moved(c.record.log.seq);
        self.blocks_since_checkpoint = 0;
        self.stats.checkpoints += 1;
        self.space.release(self.durable);
        self.last_record = Some(c.record.clone());
        self.complete_snapshots();
        self.retire_deleted();
        // Segments a grow added are named by a durable checkpoint now.
        self.usable_segments = c.record.geometry.map_or(self.sb.segment_count, |g| g.segment_count);
        self.free_segments_cached = self.free_segments();
        self.tag_emptied();
    }

    /// Segments holding the current IFile's table and index blocks, from
    /// every address (all of the index read).
    pub(crate) fn ifile_pins(&mut self) -> HashMap<SegmentNo, u32> {
        let geometry = self.ifile.geometry();
        let mut pins: HashMap<SegmentNo, u32> = HashMap::new();
        let mut addrs: Vec<MetaBlock> = Vec::new();
        for t in tables(self) {
            addrs.extend((0..t.chunks() as u32).flat_map(|c| t.chunk_list(c)).filter(|a| a.0 != 0));
        }
        addrs.extend(self.ckpt.index.values().copied());
        // Blocks written together lie together: count runs in one segment
        // before touching the map (a large bitmap has 100,000 blocks).
        let mut run: Option<(SegmentNo, u32)> = None;
        for a in addrs {
            let seg = geometry.segment_of(a);
            match (&mut run, seg) {
                (Some((r, n)), Some(s)) if *r == s => *n += 1,
                (_, s) => {
                    if let Some((r, n)) = run.take() {
                        *pins.entry(r).or_default() += n;
                    }
                    run = s.map(|s| (s, 1));
                }
            }
        }
        if let Some((r, n)) = run {
            *pins.entry(r).or_default() += n;
        }
        pins
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;
    use crate::format::ifile::TableId;
    use crate::format::superblock::{INCOMPAT_INDEX_RUNS, Role, Superblock};

    /// A log whose bitmap takes 21 index blocks (1.25 TiB of data), its
    /// first checkpoint written, opened again; and the devices.
    fn big() -> (Log, Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        let data_blocks = 21 * 503 * 32_320;
        let sb = Superblock {
            incompat: INCOMPAT_INDEX_RUNS,
            meta_blocks: 256 * 156,
            segment_count: 155,
            data_blocks,
            group_count: data_blocks.div_ceil(32_768) as u32,
            ..crate::format::superblock::sample()
        };
        let meta: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(sb.meta_blocks));
        let data: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(data_blocks));
        device::write(meta.as_ref(), DeviceRole::Meta, 0, &sb.encode()).unwrap();
        device::write(data.as_ref(), DeviceRole::Data, 0, &Superblock { role: Role::Data, ..sb.clone() }.encode())
            .unwrap();
        let mut fresh = Log::fresh(sb, meta.clone(), data.clone());
        checkpoint(&mut fresh, &meta, &data);
        let (log, _) = Log::open(meta.clone(), data.clone()).unwrap();
        (log, meta, data)
    }

    fn checkpoint(log: &mut Log, meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Checkpoint {
        let c = log.seal_checkpoint(Timestamp { sec: 10, nsec: 0 }).unwrap();
        c.write(meta, data).unwrap();
        log.complete_checkpoint(&c);
        c.record().clone()
    }

    #[test]
    fn index_blocks_rewritten_one_by_one_are_joined_again_into_runs() {
        let (mut log, meta, data) = big();
        assert!(log.sb.index_runs());
        let limit = 8;
        log.index_entry_limit = limit;
        let first = checkpoint(&mut log, &meta, &data);
        let blocks = first.index.len();
        assert!(blocks >= 25, "{blocks} index blocks");
        assert!(index_entries(&first.index, true).len() <= limit);
        // Every other bitmap chunk rewritten alone splits a run each time,
        // until the writer joins them all again.
        for k in 0..12u32 {
            log.space.tables_mut()[1].touch(((2 * k + 1) % 21) * INDEX_PER_BLOCK as u32);
            let c = checkpoint(&mut log, &meta, &data);
            assert!(index_entries(&c.index, true).len() <= limit, "checkpoint {k}");
        }
        assert!(log.stats.index_rewrites >= 1);
        assert!(log.stats.index_rewrites < 12, "every checkpoint rewrote the whole index");
        // The index as written loads back whole, every table block named.
        let words = log.space.bitmap.len();
        let (mut again, _) = Log::open(meta.clone(), data.clone()).unwrap();
        assert_eq!(again.space.bitmap.len(), words);
        assert_eq!(again.ckpt.index, log.ckpt.index);
        assert_eq!(again.ckpt.index.keys().filter(|(t, _)| *t == TableId::Bitmap).count(), 21);
        let c = checkpoint(&mut again, &meta, &data);
        assert!(index_entries(&c.index, true).len() <= crate::format::snapshot::MAX_SNAPSHOT_INDEX);
    }
}
