//! Loading the IFile a checkpoint names: what a mount reads now, what it
//! leaves on disk for later, and the pins of the checkpoint's own blocks.
//!
//! A mount of a sparse IFile reads the checkpoint slot, the index blocks
//! of the inode and node maps and those maps (the inode map lazily when
//! large), and the descriptors of the checkpoint's own partial segments;
//! nothing of the segment usage table, the group table or the bitmap,
//! whose sums the slot's tail carries. So it reads the same whatever the
//! size of either device.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Log;
use super::checkpoint::{DurableCheckpoint, tables};
use crate::data_space::DataSpace;
use crate::device::{self, BlockDevice};
use crate::error::{DeviceRole, Error, Result};
use crate::format::block::{self, BlockKind};
use crate::format::checkpoint::{Checkpoint, LogPosition, SparseTail};
use crate::format::descriptor::{PS_GROUP_END, PsKind};
use crate::format::ifile::{INDEX_PER_BLOCK, IndexBlock, TableId};
use crate::ifile::IFile;
use crate::table::TableSource;
use crate::types::{MetaBlock, SegmentNo, Seq};

/// Reads the IFile's table and index blocks for tables loaded lazily.
#[derive(Debug)]
pub(crate) struct IFileBlocks {
    pub(crate) meta: Arc<dyn BlockDevice>,
    pub(crate) volume_id: u64,
    pub(crate) geometry: crate::ifile::SegmentGeometry,
}

impl TableSource for IFileBlocks {
    fn read_block(&self, table: TableId, b: u32, at: MetaBlock) -> Result<Vec<u8>> {
        let raw = device::read(self.meta.as_ref(), DeviceRole::Meta, at.0, 1)?;
        open_table_block(&raw, table, b, at, self.volume_id).map(<[u8]>::to_vec)
    }

    fn read_index(&self, table: TableId, c: u32, at: MetaBlock) -> Result<Vec<MetaBlock>> {
        let raw = device::read(self.meta.as_ref(), DeviceRole::Meta, at.0, 1)?;
        open_index_block(&raw, table, c, at, self.volume_id, self.geometry)
    }
}

/// The payload of table block `b` of `table`, read at `at`: checksum,
/// kind and name checked.
pub(crate) fn open_table_block(raw: &[u8], table: TableId, b: u32, at: MetaBlock, volume_id: u64) -> Result<&[u8]> {
    let (h, payload) = block::open_block_of_kind(raw, at, volume_id, BlockKind::IFileTable)
        .map_err(|e| Error::corrupt_meta(table.name(), at.0, e.0))?;
    if h.name != table.block_name(b) {
        return Err(Error::corrupt_meta(table.name(), at.0, format!("holds another block than block {b}")));
    }
    Ok(payload)
}

/// The addresses index block `c` of `table`, read at `at`, lists: kind,
/// name, table and first block checked, and every address 0 or in the log.
fn open_index_block(
    raw: &[u8],
    table: TableId,
    c: u32,
    at: MetaBlock,
    volume_id: u64,
    geometry: crate::ifile::SegmentGeometry,
) -> Result<Vec<MetaBlock>> {
    let first = c * INDEX_PER_BLOCK as u32;
    let (h, payload) = block::open_block_of_kind(raw, at, volume_id, BlockKind::IFileIndex)
        .map_err(|e| Error::corrupt_meta("IFile index block", at.0, e.0))?;
    let ib = IndexBlock::decode(payload).map_err(|e| Error::corrupt_meta("IFile index block", at.0, e.0))?;
    if ib.table != table || ib.first != first || h.name != table.block_name(first) {
        return Err(Error::corrupt_meta("IFile index block", at.0, "does not list the blocks the checkpoint names"));
    }
    for (i, a) in ib.addresses.iter().enumerate() {
        if a.0 != 0 && geometry.segment_of(*a).is_none() {
            return Err(Error::corrupt_meta(
                "IFile index block",
                at.0,
                format!("table block {} at {a:?} lies outside the log", first + i as u32),
            ));
        }
    }
    Ok(ib.addresses)
}

/// Reads single blocks at `addresses`, in runs of neighbouring addresses
/// (a checkpoint writes its IFile blocks together): one request per run
/// instead of one per block. Returns them in the order asked.
pub(crate) fn read_scattered(
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

impl Log {
    /// What reads the IFile's blocks on demand.
    pub(crate) fn table_source(&self) -> IFileBlocks {
        IFileBlocks { meta: self.meta.clone(), volume_id: self.volume_id, geometry: self.ifile.geometry() }
    }

    /// Reads the usage entry of segment `s` if it is not at hand.
    ///
    /// # Errors
    /// Its block cannot be read, or is damaged.
    pub(crate) fn ensure_usage(&mut self, s: SegmentNo) -> Result<()> {
        let b = self.ifile.usage_block_of(s);
        if self.ifile.segment_known(s).is_some() {
            return Ok(());
        }
        let source = self.table_source();
        self.ifile.load_usage_block(b, &source, self.ckpt.log.seq)
    }

    /// Reads the whole segment usage table (the cleaner's choice of
    /// victims, a resize, a snapshot).
    ///
    /// # Errors
    /// As [`Log::ensure_usage`].
    pub fn load_segment_usage(&mut self) -> Result<()> {
        let source = self.table_source();
        for b in 0..self.ifile.segments.block_count() as u32 {
            self.ifile.load_usage_block(b, &source, self.ckpt.log.seq)?;
        }
        Ok(())
    }

    /// Reads every index block of every table (what a snapshot of the
    /// live IFile or a walk over every IFile block needs).
    ///
    /// # Errors
    /// An index block cannot be read, or is damaged.
    pub fn load_ifile_index(&mut self) -> Result<()> {
        let source = self.table_source();
        for t in tables(self) {
            for c in 0..t.chunks() as u32 {
                t.read_chunk(c, &source)?;
            }
        }
        Ok(())
    }

    /// Loads the IFile a checkpoint points at (mount). With `lazy`, the data
    /// bitmap stays on disk, read a group at a time when the allocator
    /// first needs it (its blocks' addresses are all checked here, its
    /// contents when read), and so does an inode map of at least that many
    /// blocks ([`super::lazy_imap`]), and on a sparse IFile the segment
    /// usage and group tables with every index block but the maps';
    /// otherwise every block is read and checked.
    ///
    /// # Errors
    /// An index or table block is missing, unreadable or corrupt.
    pub(crate) fn load_checkpoint(&mut self, c: &Checkpoint, lazy_from: Option<usize>) -> Result<()> {
        self.load_checkpoint_with(c, lazy_from.is_some(), lazy_from, true)
    }

    /// As [`Log::load_checkpoint`], the bitmap left on disk if `lazy`, the
    /// inode map if it has `lazy_from` blocks or more (a snapshot's
    /// image wants its bitmap whole and its map on disk). `live`: the
    /// volume's checkpoint, not a snapshot's image (whose own blocks and
    /// sums matter to nothing).
    ///
    /// # Errors
    /// As [`Log::load_checkpoint`].
    pub(crate) fn load_checkpoint_with(
        &mut self,
        c: &Checkpoint,
        lazy: bool,
        lazy_from: Option<usize>,
        live: bool,
    ) -> Result<()> {
        let geometry = self.ifile.geometry();
        let sparse = self.sb.sparse_ifile();
        if live && sparse != c.sparse.is_some() {
            let why = if sparse {
                "it lacks the tail a checkpoint of a sparse IFile ends with"
            } else {
                "it ends with a tail on a volume without SPARSE_IFILE"
            };
            return Err(Error::corrupt_meta("checkpoint", 0, why));
        }
        for r in &c.index {
            if geometry.segment_of(r.address).is_none() {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    r.address.0,
                    "an IFile index block lies outside the log",
                ));
            }
        }
        // The counts bound what is allocated for the maps.
        if c.inode_count == 0 || c.node_count == 0 {
            return Err(Error::corrupt_meta("checkpoint", 0, "an inode or node map of no entry"));
        }
        if c.inode_count > self.max_inode_number() + 1 || c.node_count > self.max_node_id() + 1 {
            return Err(Error::corrupt_meta(
                "checkpoint",
                0,
                format!("{} inodes and {} nodes: more than the log can hold", c.inode_count, c.node_count),
            ));
        }
        self.ifile = IFile::for_load(geometry, sparse, c.inode_count as usize, c.node_count as usize);
        self.space = DataSpace::for_load(self.sb.data_blocks, self.sb.group_blocks, sparse);
        let mut index: BTreeMap<(TableId, u32), MetaBlock> = BTreeMap::new();
        for r in &c.index {
            let chunk = r.first / INDEX_PER_BLOCK as u32;
            let chunks = tables(self).into_iter().find(|t| t.table_id() == r.table).map_or(0, |t| t.chunks());
            if r.first % INDEX_PER_BLOCK as u32 != 0 || chunk as usize >= chunks {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    r.address.0,
                    format!("names index block {chunk} beyond the {}", r.table.name()),
                ));
            }
            if index.insert((r.table, chunk), r.address).is_some() {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    r.address.0,
                    format!("names index block {chunk} of the {} twice", r.table.name()),
                ));
            }
        }
        if !sparse {
            for t in tables(self) {
                for chunk in 0..t.chunks() as u32 {
                    if !index.contains_key(&(t.table_id(), chunk)) {
                        return Err(Error::corrupt_meta(
                            "checkpoint",
                            0,
                            format!(
                                "block {} of the {} is missing from the checkpoint",
                                chunk * INDEX_PER_BLOCK as u32,
                                t.table_id().name()
                            ),
                        ));
                    }
                }
            }
        }
        // Index blocks read now: the maps' (their size is the file count's),
        // and every one unless the tables are left on disk; then also the
        // segment usage chunk of the log's head, whose entries the count of
        // free segments looks at (read with the others, in one request
        // where the checkpoint wrote them together).
        let now = |t: TableId| !(sparse && lazy) || matches!(t, TableId::InodeMap | TableId::NodeMap);
        let per_usage = TableId::SegmentUsage.per_block() as u32;
        let head_usage: Vec<u32> = if sparse && lazy {
            let mut v: Vec<u32> = [c.log.segment, c.log.next_segment].iter().map(|s| s.0 / per_usage).collect();
            v.dedup();
            v
        } else {
            Vec::new()
        };
        let head_chunk = |k: &(TableId, u32)| {
            k.0 == TableId::SegmentUsage && head_usage.iter().any(|b| b / INDEX_PER_BLOCK as u32 == k.1)
        };
        let to_read: Vec<((TableId, u32), MetaBlock)> =
            index.iter().filter(|(k, _)| now(k.0) || head_chunk(k)).map(|(k, a)| (*k, *a)).collect();
        let raws = read_scattered(self.meta.as_ref(), to_read.iter().map(|x| x.1))?;
        for (((t, chunk), at), raw) in to_read.into_iter().zip(raws) {
            let addresses = open_index_block(&raw, t, chunk, at, self.volume_id, geometry)?;
            for tab in tables(self) {
                if tab.table_id() == t {
                    tab.take_chunk(chunk, at, addresses.clone())
                        .map_err(|e| Error::corrupt_meta("IFile index block", at.0, e.0))?;
                }
            }
        }
        for ((t, chunk), at) in &index {
            if !now(*t) && !head_chunk(&(*t, *chunk)) {
                for tab in tables(self) {
                    if tab.table_id() == *t {
                        tab.set_index_at(*chunk, *at);
                    }
                }
            }
        }
        // Table blocks read now.
        let imap_blocks = c.inode_count.div_ceil(TableId::InodeMap.per_block() as u64) as u32;
        let lazy_imap = lazy_from.is_some_and(|min| imap_blocks as usize >= min.max(2));
        let on_disk = |t: TableId, b: u32| match t {
            TableId::Bitmap => lazy,
            TableId::InodeMap => lazy_imap && b + 1 < imap_blocks,
            TableId::SegmentUsage | TableId::GroupDesc => lazy && sparse,
            TableId::NodeMap => false,
        };
        let mut to_read: Vec<(TableId, u32, MetaBlock)> = Vec::new();
        for &b in &head_usage {
            let t = &self.ifile.segments;
            if t.chunk_known(b / INDEX_PER_BLOCK as u32) && t.address(b).0 != 0 {
                to_read.push((TableId::SegmentUsage, b, t.address(b)));
            }
        }
        let head_blocks = to_read.len();
        for t in tables(self) {
            let id = t.table_id();
            for chunk in 0..t.chunks() as u32 {
                if !t.knows_chunk(chunk) {
                    continue;
                }
                for (k, at) in t.chunk_list(chunk).into_iter().enumerate() {
                    let b = chunk * INDEX_PER_BLOCK as u32 + k as u32;
                    if at.0 != 0 && !on_disk(id, b) {
                        to_read.push((id, b, at));
                    }
                }
            }
        }
        let raws = read_scattered(self.meta.as_ref(), to_read.iter().map(|x| x.2))?;
        let mut head_payloads = Vec::new();
        for (i, ((t, b, at), raw)) in to_read.into_iter().zip(raws).enumerate() {
            let payload = open_table_block(&raw, t, b, at, self.volume_id)?;
            if i < head_blocks {
                // Checked as any usage block read later (once the log
                // position is known to the IFile).
                head_payloads.push((b, at, payload.to_vec()));
                continue;
            }
            for tab in tables(self) {
                if tab.table_id() == t {
                    tab.decode(b, payload).map_err(|e| Error::corrupt_meta(t.name(), at.0, e.0))?;
                }
            }
        }
        for t in tables(self) {
            t.loaded();
        }
        self.ckpt = DurableCheckpoint { number: c.number, log: c.log, pins: HashMap::new(), index };
        self.head = c.log;
        // The checkpoint decoder refuses a log position of sequence 0.
        self.durable = Seq(c.log.seq.0 - 1);
        self.vouched = self.durable;
        if lazy_imap {
            self.ifile.leave_inodes_on_disk_but(imap_blocks - 1);
        } else {
            self.ifile.rebuild_free_lists();
        }
        for (b, at, payload) in head_payloads {
            self.ifile.take_usage_block(b, at, &payload, c.log.seq)?;
        }
        let usage_whole = !(sparse && lazy);
        if usage_whole {
            // A segment written after the checkpoint's log position cannot
            // be in its table. (Left on disk, each block is checked so when read.)
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
            self.ifile.set_usage_sums(None);
        }
        self.load_pins(c, usage_whole, live)?;
        // What the segment usage derives from the maps is checked here, so
        // that every change after adds and takes amounts that add up (a
        // wrong sum is then a bug, and asserted); a wrong one is recounted
        // and said. With the inode map on disk, when its last block comes
        // in; with the usage table on disk, by fsck only.
        let recounted = if lazy_imap || !usage_whole { Vec::new() } else { self.ifile.recount_live_bytes() };
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
            self.space.load_lazily(Arc::new(self.table_source()), c.free_data_blocks)?;
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
        if !usage_whole {
            // The entries the count of free segments looks at.
            let mut look: Vec<SegmentNo> = self.ckpt.pins.keys().copied().collect();
            look.extend([self.head.segment, self.head.next_segment]);
            for s in look {
                self.ensure_usage(s)?;
            }
        }
        self.recount_free_segments();
        Ok(())
    }

    /// Sets the pins of the checkpoint loaded: its own partial segments'
    /// IFile blocks on a sparse IFile (every IFile block otherwise), and
    /// the usage table's sums. With every address at hand (`whole`) the
    /// counts of IFile blocks are checked against where the blocks are,
    /// and recounted (said) where they disagree.
    fn load_pins(&mut self, c: &Checkpoint, whole: bool, live: bool) -> Result<()> {
        let Some(tail) = c.sparse.filter(|_| live && self.sb.sparse_ifile()) else {
            if whole && (live || !self.sb.sparse_ifile()) {
                self.ckpt.pins = self.ifile_pins();
            }
            return Ok(());
        };
        let own = self.walk_own_group(&tail, c.log)?;
        if whole {
            let (vacant, live_bytes) = (self.ifile.vacant_segments(), self.ifile.live_total());
            if u64::from(tail.vacant_segments) != vacant || tail.live_bytes != live_bytes {
                self.recounted.push(format!(
                    "the checkpoint says {} segments hold nothing and {} bytes live, its segment usage table {vacant} \
                     and {live_bytes} (recounted)",
                    tail.vacant_segments, tail.live_bytes
                ));
            }
            let all = self.ifile_pins();
            let mut segs: Vec<SegmentNo> = all.keys().chain(own.keys()).copied().collect();
            for s in 0..self.sb.segment_count {
                if self.ifile.segment(SegmentNo(s)).ifile_blocks != 0 {
                    segs.push(SegmentNo(s));
                }
            }
            segs.sort_unstable();
            segs.dedup();
            for s in segs {
                let want = i64::from(all.get(&s).copied().unwrap_or(0)) - i64::from(own.get(&s).copied().unwrap_or(0));
                let have = i64::from(self.ifile.segment(s).ifile_blocks);
                if want != have {
                    self.recounted.push(format!(
                        "segment {} counts {have} IFile blocks, holds {} of which {} are the checkpoint's own \
                         (recounted)",
                        s.0,
                        all.get(&s).copied().unwrap_or(0),
                        own.get(&s).copied().unwrap_or(0)
                    ));
                    self.ifile.add_ifile_blocks(s, want.max(0) - have);
                }
            }
        } else {
            self.ifile.set_usage_sums(Some((u64::from(tail.vacant_segments), tail.live_bytes)));
        }
        self.ckpt.pins = own;
        Ok(())
    }

    /// The IFile table and index blocks of the checkpoint's own partial
    /// segments, by segment: read from their descriptors, from where the
    /// tail says they start to the log position `end` they lead to.
    ///
    /// # Errors
    /// A descriptor is missing or not one of a checkpoint's, or the chain
    /// does not end at `end`.
    fn walk_own_group(&self, tail: &SparseTail, end: LogPosition) -> Result<HashMap<SegmentNo, u32>> {
        let mut own: HashMap<SegmentNo, u32> = HashMap::new();
        let (mut seg, mut off) = (tail.ifile_segment, tail.ifile_offset);
        if (seg, off) == (end.segment, end.offset) {
            return Ok(own);
        }
        let bad = |why: String| Error::corrupt_meta("checkpoint", 0, format!("its own partial segments: {why}"));
        let mut expect: Option<Seq> = None;
        let mut next: Option<SegmentNo> = None;
        for _ in 0..=self.sb.segment_count {
            let found = match self.read_descriptor(seg, off, expect)? {
                Ok(x) => Ok(x),
                Err(here) => match next {
                    Some(n) => {
                        let there = self.read_descriptor(n, 0, expect)?;
                        if there.is_ok() {
                            (seg, off) = (n, 0);
                        }
                        there.map_err(|_| here)
                    }
                    None => Err(here),
                },
            };
            let (desc, _, _) = found.map_err(|stop| bad(format!("{stop}")))?;
            if desc.kind != PsKind::Checkpoint {
                return Err(bad(format!("the partial segment at segment {} offset {off} is not one", seg.0)));
            }
            for sum in &desc.blocks {
                if matches!(sum.kind, BlockKind::IFileTable | BlockKind::IFileIndex) {
                    *own.entry(seg).or_default() += 1;
                }
            }
            off += desc.total_blocks() as u32;
            next = Some(desc.next_segment);
            expect = Some(desc.seq.next());
            if desc.flags & PS_GROUP_END != 0 {
                if desc.seq.next() != end.seq {
                    return Err(bad(format!("they end at sequence {}, the log goes on at {}", desc.seq.0, end.seq.0)));
                }
                return Ok(own);
            }
        }
        Err(bad("they do not end".into()))
    }
}
