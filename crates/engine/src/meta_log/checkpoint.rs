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
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::{Checkpoint, IndexRef, LogPosition, MAX_INDEX_BLOCKS, index_entries};
use crate::format::descriptor::{PsKind, Summary};
use crate::format::ifile::{INDEX_PER_BLOCK, IndexBlock, TableId};
use crate::format::superblock::CHECKPOINT_SLOTS;
use crate::table::{TableAccess, TableSource};
use crate::types::{InodeNo, MetaBlock, SegmentNo, Timestamp};

/// The newest checkpoint known durable, and what it keeps alive.
#[derive(Debug, Clone, Default)]
pub struct DurableCheckpoint {
    /// Its number.
    pub number: u64,
    /// Where its roll-forward starts.
    pub log: LogPosition,
    /// Segments holding its IFile and index blocks, with how many.
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
    /// Builds a checkpoint of the current IFile. The caller has committed
    /// every dirty object first, so the IFile matches the log up to the head.
    ///
    /// # Errors
    /// The IFile outgrew what a checkpoint can index, or no segment is left.
    pub fn seal_checkpoint(&mut self, now: Timestamp) -> Result<SealedCheckpoint> {
        debug_assert!(!self.has_dirty(), "checkpoint with dirty meta-data");
        // Which table blocks changed, and which index chunks must follow them.
        let mut dirty: Vec<(TableId, u32, Vec<u8>)> = Vec::new();
        let mut chunks: BTreeSet<(TableId, u32)> = BTreeSet::new();
        let mut wanted_chunks: BTreeSet<(TableId, u32)> = BTreeSet::new();
        for t in tables(self) {
            let id = t.table_id();
            for b in t.dirty() {
                dirty.push((id, b, t.encode(b)));
                chunks.insert((id, b / INDEX_PER_BLOCK as u32));
            }
            for c in 0..t.blocks().div_ceil(INDEX_PER_BLOCK) {
                wanted_chunks.insert((id, c as u32));
            }
        }
        if self.index_entries_bound(wanted_chunks.len()) > MAX_INDEX_BLOCKS {
            return Err(Error::NoSpace(DeviceRole::Meta));
        }
        for c in &wanted_chunks {
            if !self.ckpt.index.contains_key(c) {
                chunks.insert(*c);
            }
        }
        let runs = self.sb.index_runs();
        if runs {
            // Index blocks rewritten one here, one there split the runs of
            // those kept; before the entries could pass what a snapshot
            // record holds, every index block is written again, in runs.
            let kept: Vec<IndexRef> = self
                .ckpt
                .index
                .iter()
                .filter(|(k, _)| wanted_chunks.contains(k) && !chunks.contains(k))
                .map(|((t, c), a)| IndexRef { table: *t, first: c * INDEX_PER_BLOCK as u32, address: *a })
                .collect();
            if index_entries(&kept, true).len() + chunks.len() > self.index_entry_limit {
                chunks.clone_from(&wanted_chunks);
                self.stats.index_rewrites += 1;
            }
        }

        let dirty_keys: Vec<(TableId, u32)> = dirty.iter().map(|(t, b, _)| (*t, *b)).collect();
        let index_now: Vec<(TableId, u32)> = chunks.iter().copied().collect();
        let mut bodies: Vec<Body> = dirty
            .into_iter()
            .map(|(t, b, payload)| Body {
                summary: Summary { kind: BlockKind::IFileTable, owner: InodeNo(0), name: t.block_name(b) },
                aux: 0,
                payload,
                inodes: None,
            })
            .collect();
        for (t, c) in &index_now {
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
        // A change of the snapshot list rides on this checkpoint: its
        // blocks come last, after the IFile blocks and index blocks.
        let first_snapshot_body = bodies.len();
        bodies.extend(self.snapshot_bodies());
        self.snaps.staged = None;
        if bodies.is_empty() && self.snaps.pending.is_some() {
            // Deleting the last snapshot writes no block (the checkpoint
            // names no list), and with no IFile block changed either there
            // is no partial segment whose filling would stage the change:
            // stage it here, or the checkpoint repeats the old list.
            self.fill_snapshot_bodies(&[], &mut []);
        }
        let mut part = None;
        let mut new_index: Vec<((TableId, u32), MetaBlock)> = Vec::new();
        if !bodies.is_empty() {
            let (sealed, staged) = self.encode_group(
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
                    for (k, (t, c)) in index_now.iter().enumerate() {
                        let i = dirty_keys.len() + k;
                        let listed = tables(log)
                            .into_iter()
                            .find(|tab| tab.table_id() == *t)
                            .map(|tab| {
                                let start = (*c as usize) * INDEX_PER_BLOCK;
                                let end = (start + INDEX_PER_BLOCK).min(tab.blocks());
                                (start..end).map(|b| tab.block_address(b as u32)).collect::<Vec<_>>()
                            })
                            .unwrap_or_default();
                        bodies[i].payload =
                            IndexBlock { table: *t, first: c * INDEX_PER_BLOCK as u32, addresses: listed }.encode();
                        staged.push(((*t, *c), addresses[i]));
                    }
                    log.fill_snapshot_bodies(&addresses[first_snapshot_body..], &mut bodies[first_snapshot_body..]);
                    staged
                },
            )?;
            new_index = staged;
            part = Some(sealed);
        }
        // The segments just written must show their last write too; the
        // SUT blocks this dirties go into the next checkpoint, which is
        // harmless: these segments stay pinned while this checkpoint is needed.
        let mut index = self.ckpt.index.clone();
        index.retain(|k, _| wanted_chunks.contains(k));
        index.extend(new_index);
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
        };
        let slot = if faults::active(Fault::CheckpointInPlace) {
            CHECKPOINT_SLOTS[0]
        } else {
            CHECKPOINT_SLOTS[(record.number % 2) as usize]
        };
        debug_assert!(index_entries(&record.index, runs).len() <= MAX_INDEX_BLOCKS, "index bound broken");
        // The blocks just placed are clean but not on disk until the
        // checkpoint is written: none may be given back before.
        self.checkpoint_unwritten = true;
        Ok(SealedCheckpoint { part, slot, record, index, runs })
    }

    /// Records that a checkpoint is durable: the previous one's IFile blocks
    /// and roll-forward range are no longer needed.
    pub fn complete_checkpoint(&mut self, c: &SealedCheckpoint) {
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
        self.ckpt.index = c.index.clone();
        self.ckpt.pins = self.ifile_pins();
        self.blocks_since_checkpoint = 0;
        self.stats.checkpoints += 1;
        self.space.release(self.durable);
        self.last_record = Some(c.record.clone());
        self.complete_snapshots();
        // Segments a grow added are named by a durable checkpoint now.
        self.usable_segments = c.record.geometry.map_or(self.sb.segment_count, |g| g.segment_count);
        self.free_segments_cached = self.free_segments();
    }

    /// Segments holding the current IFile's table and index blocks.
    fn ifile_pins(&mut self) -> HashMap<SegmentNo, u32> {
        let geometry = self.ifile.geometry();
        let mut pins: HashMap<SegmentNo, u32> = HashMap::new();
        let mut addrs: Vec<MetaBlock> = Vec::new();
        for t in tables(self) {
            addrs.extend((0..t.blocks() as u32).map(|b| t.block_address(b)));
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

    /// Loads the IFile a checkpoint points at (mount). With `lazy`, the data
    /// bitmap stays on disk, read a group at a time when the allocator
    /// first needs it (its blocks' addresses are all checked here, its
    /// contents when read), and so does an inode map of at least that many
    /// blocks ([`super::lazy_imap`]); otherwise every block is read and
    /// checked.
    ///
    /// # Errors
    /// An index or table block is missing, unreadable or corrupt.
    pub(crate) fn load_checkpoint(&mut self, c: &Checkpoint, lazy_from: Option<usize>) -> Result<()> {
        self.load_checkpoint_with(c, lazy_from.is_some(), lazy_from)
    }

    /// As [`Log::load_checkpoint`], the bitmap left on disk if `lazy`, the
    /// inode map if it has `lazy_from` blocks or more (a snapshot's
    /// image wants its bitmap whole and its map on disk).
    ///
    /// # Errors
    /// As [`Log::load_checkpoint`].
    pub(crate) fn load_checkpoint_with(&mut self, c: &Checkpoint, lazy: bool, lazy_from: Option<usize>) -> Result<()> {
        let geometry = self.ifile.geometry();
        let source = IFileBlocks { meta: self.meta.clone(), volume_id: self.volume_id };
        // Index blocks first: they say how large each table is, which bounds
        // the counts in the checkpoint before anything is allocated for them.
        for r in &c.index {
            if geometry.segment_of(r.address).is_none() {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    r.address.0,
                    "an IFile index block lies outside the log",
                ));
            }
        }
        let raws = read_scattered(self.meta.as_ref(), c.index.iter().map(|r| r.address))?;
        let mut listed: BTreeMap<TableId, usize> = BTreeMap::new();
        let mut index_blocks = Vec::with_capacity(c.index.len());
        for (r, raw) in c.index.iter().zip(raws) {
            let (h, payload) = block::open_block_of_kind(&raw, r.address, self.volume_id, BlockKind::IFileIndex)
                .map_err(|e| Error::corrupt_meta("IFile index block", r.address.0, e.0))?;
            let ib =
                IndexBlock::decode(payload).map_err(|e| Error::corrupt_meta("IFile index block", r.address.0, e.0))?;
            if ib.table != r.table || ib.first != r.first || h.name != r.table.block_name(r.first) {
                return Err(Error::corrupt_meta(
                    "IFile index block",
                    r.address.0,
                    "does not list the blocks the checkpoint names",
                ));
            }
            *listed.entry(r.table).or_default() += ib.addresses.len();
            index_blocks.push((*r, ib));
        }
        for (table, count) in [(TableId::InodeMap, c.inode_count), (TableId::NodeMap, c.node_count)] {
            let blocks = listed.get(&table).copied().unwrap_or(0);
            if count == 0 || count.div_ceil(table.per_block() as u64) != blocks as u64 {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    0,
                    format!("{} of {count} entries does not match its {blocks} listed blocks", table.name()),
                ));
            }
        }
        if c.inode_count > self.max_inode_number() + 1 || c.node_count > self.max_node_id() + 1 {
            return Err(Error::corrupt_meta(
                "checkpoint",
                0,
                format!("{} inodes and {} nodes: more than the log can hold", c.inode_count, c.node_count),
            ));
        }
        // A large inode map stays on disk but for its last block, where it
        // grows (see `lazy_imap`): its blocks are not even allocated.
        let imap_blocks = c.inode_count.div_ceil(TableId::InodeMap.per_block() as u64) as u32;
        let lazy_imap = lazy_from.is_some_and(|min| imap_blocks as usize >= min.max(2));
        if lazy_imap {
            self.ifile.inodes.grow_on_disk(c.inode_count as usize);
        } else {
            self.ifile.inodes.grow(c.inode_count as usize);
        }
        self.ifile.nodes.grow(c.node_count as usize);
        let mut loaded: BTreeMap<TableId, Vec<bool>> =
            tables(self).into_iter().map(|t| (t.table_id(), vec![false; t.blocks()])).collect();
        let mut index = BTreeMap::new();
        // Every listed block is checked to be one of its table's; those to
        // read now are then read in runs of neighbouring addresses.
        let mut to_read: Vec<(TableId, u32, MetaBlock, MetaBlock)> = Vec::new();
        for (r, ib) in index_blocks {
            index.insert((r.table, r.first / INDEX_PER_BLOCK as u32), r.address);
            for (i, at) in ib.addresses.iter().enumerate() {
                let b = ib.first + i as u32;
                if geometry.segment_of(*at).is_none() {
                    return Err(Error::corrupt_meta(
                        "IFile index block",
                        r.address.0,
                        format!("table block {b} at {at:?} lies outside the log"),
                    ));
                }
                let table = tables(self).into_iter().find(|t| t.table_id() == r.table);
                let Some(table) = table else { continue };
                if b as usize >= table.blocks() {
                    return Err(Error::corrupt_meta(
                        "IFile index block",
                        r.address.0,
                        format!("names block {b} beyond the {}", r.table.name()),
                    ));
                }
                table.place(b, *at);
                if let Some(l) = loaded.get_mut(&r.table) {
                    l[b as usize] = true;
                }
                let on_disk = match r.table {
                    TableId::Bitmap => lazy,
                    TableId::InodeMap => lazy_imap && b + 1 < imap_blocks,
                    _ => false,
                };
                if !on_disk {
                    to_read.push((r.table, b, *at, r.address));
                }
            }
        }
        let raws = read_scattered(self.meta.as_ref(), to_read.iter().map(|x| x.2))?;
        for ((t, b, at, _), raw) in to_read.into_iter().zip(raws) {
            let payload = open_table_block(&raw, t, b, at, self.volume_id)?;
            let table = tables(self).into_iter().find(|tab| tab.table_id() == t);
            if let Some(table) = table {
                table.decode(b, payload).map_err(|e| Error::corrupt_meta(t.name(), at.0, e.0))?;
            }
        }
        for t in tables(self) {
            let listed = loaded.get(&t.table_id()).map_or(&[][..], Vec::as_slice);
            for b in 0..t.blocks() as u32 {
                if !listed.get(b as usize).copied().unwrap_or(false) {
                    return Err(Error::corrupt_meta(
                        "checkpoint",
                        0,
                        format!("block {b} of the {} is missing from the checkpoint", t.table_id().name()),
                    ));
                }
            }
            t.loaded();
        }
        self.ckpt = DurableCheckpoint { number: c.number, log: c.log, pins: HashMap::new(), index };
        self.ckpt.pins = self.ifile_pins();
        self.head = c.log;
        // The checkpoint decoder refuses a log position of sequence 0.
        self.durable = crate::types::Seq(c.log.seq.0 - 1);
        self.vouched = self.durable;
        if lazy_imap {
            self.ifile.leave_inodes_on_disk_but(imap_blocks - 1);
        } else {
            self.ifile.rebuild_free_lists();
        }
        // What the segment usage derives from the maps is checked here, so
        // that every change after adds and takes amounts that add up (a
        // wrong sum is then a bug, and asserted); a wrong one is recounted
        // and said. A segment written after the checkpoint's log position
        // cannot be in its table.
        for s in 0..self.sb.segment_count as usize {
            let u = self.ifile.segments.get(s);
            if u.last_seq >= c.log.seq {
                return Err(Error::corrupt_meta(
                    "segment usage table",
                    0,
                    format!(
                        "segment {s} was last written at sequence {}, not before the checkpoint's {}",
                        u.last_seq.0, c.log.seq.0
                    ),
                ));
            }
        }
        // (With the inode map on disk, when its last block comes in.)
        let recounted = if lazy_imap { Vec::new() } else { self.ifile.recount_live_bytes() };
        for (seg, had, want) in recounted {
            if want > u64::from(u32::MAX) {
                return Err(Error::corrupt_meta(
                    "inode map",
                    0,
                    format!("segment {} would hold {want} live bytes", seg.0),
                ));
            }
            self.recounted.push(format!(
                "segment {} says {had} live bytes, its live inodes and nodes hold {want} (recounted)",
                seg.0
            ));
        }
        if lazy {
            self.space.load_lazily(Arc::new(source), c.free_data_blocks)?;
        } else {
            // A lazy mount refuses a group whose count is wrong when it
            // reads its bitmap: say it here, so that fsck names it too.
            for (g, said, n) in self.space.recount() {
                self.recounted.push(format!("data group {} says {said} free blocks, its bitmap {n} (recounted)", g.0));
            }
            if self.space.free_blocks() != c.free_data_blocks {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    0,
                    format!(
                        "the data bitmap has {} free blocks, the checkpoint recorded {}",
                        self.space.free_blocks(),
                        c.free_data_blocks
                    ),
                ));
            }
        }
        if let Some(list) = c.snapshot_list {
            self.load_snapshots(list, lazy_from)?;
        }
        self.last_record = Some(c.clone());
        self.recount_free_segments();
        Ok(())
    }
}

/// Reads the IFile's table blocks for a data space loaded lazily.
#[derive(Debug)]
struct IFileBlocks {
    meta: Arc<dyn BlockDevice>,
    volume_id: u64,
}

impl TableSource for IFileBlocks {
    fn read_block(&self, table: TableId, b: u32, at: MetaBlock) -> Result<Vec<u8>> {
        let raw = device::read(self.meta.as_ref(), DeviceRole::Meta, at.0, 1)?;
        open_table_block(&raw, table, b, at, self.volume_id).map(<[u8]>::to_vec)
    }
}

/// The payload of table block `b` of `table`, read at `at`: checksum,
/// kind and name checked.
pub(super) fn open_table_block(raw: &[u8], table: TableId, b: u32, at: MetaBlock, volume_id: u64) -> Result<&[u8]> {
    let (h, payload) = block::open_block_of_kind(raw, at, volume_id, BlockKind::IFileTable)
        .map_err(|e| Error::corrupt_meta(table.name(), at.0, e.0))?;
    if h.name != table.block_name(b) {
        return Err(Error::corrupt_meta(table.name(), at.0, format!("holds another block than block {b}")));
    }
    Ok(payload)
}

/// Reads single blocks at `addresses`, in runs of neighbouring addresses
/// (a checkpoint writes its IFile blocks together): one request per run
/// instead of one per block. Returns them in the order asked.
pub(super) fn read_scattered(
    meta: &dyn BlockDevice,
    addresses: impl Iterator<Item = MetaBlock>,
) -> Result<Vec<Vec<u8>>> {
    const RUN_MAX: u64 = 256;
    let addrs: Vec<MetaBlock> = addresses.collect();
    let mut order: Vec<usize> = (0..addrs.len()).collect();
    order.sort_by_key(|&i| addrs[i].0);
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); addrs.len()];
    let mut i = 0;
    while i < order.len() {
        let first = addrs[order[i]].0;
        let mut j = i + 1;
        while j < order.len() && addrs[order[j]].0 <= addrs[order[j - 1]].0 + 1 && addrs[order[j]].0 - first < RUN_MAX {
            j += 1;
        }
        let count = (addrs[order[j - 1]].0 - first + 1) as usize;
        let raw = device::read(meta, DeviceRole::Meta, first, count)?;
        for &k in &order[i..j] {
            let off = (addrs[k].0 - first) as usize * crate::types::BLOCK_SIZE;
            out[k] = raw[off..off + crate::types::BLOCK_SIZE].to_vec();
        }
        i = j;
    }
    Ok(out)
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
