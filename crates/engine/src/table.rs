//! One IFile table in memory: its entries, which blocks changed since the
//! last checkpoint, and where each block's durable copy lives.
//!
//! It sits below both owners of IFile tables, [`crate::data_space`] (group
//! descriptors, bitmap) and [`crate::ifile`] (segment usage, inode map, node
//! map), so neither has to import the other.
//!
//! A table is held chunk by chunk, a chunk being the table blocks one index
//! block lists (503): a chunk's addresses are in memory only once its index
//! block was read, and a block's entries only once the block was read. On a
//! volume with `SPARSE_IFILE` a block never written (address 0), and every
//! block of a chunk with no index block, holds its table's *fresh* entries
//! ([`Fresh`]), known without reading anything: so a table costs memory
//! and reads in proportion to what was used of it, not to its size.

use std::collections::BTreeSet;

use crate::error::Result;
use crate::format::codec::{DecodeResult, Reader, Writer, bad};
use crate::format::ifile::{GroupDesc, INDEX_PER_BLOCK, ImapEntry, SegUsage, TableId};
use crate::types::MetaBlock;

/// Reads one IFile table block, or the index block of a chunk, from where
/// the checkpoint says it lives, checked (kind, name, checksum): how a table
/// loaded lazily fetches what it first needs.
pub trait TableSource: Send + Sync + std::fmt::Debug {
    /// The payload of block `b` of `table`, at `at`.
    ///
    /// # Errors
    /// The device fails, or the block is not that table block.
    fn read_block(&self, table: TableId, b: u32, at: MetaBlock) -> Result<Vec<u8>>;

    /// The addresses index block `at` lists: chunk `c` of `table`.
    ///
    /// # Errors
    /// The device fails, or the block is not that index block.
    fn read_index(&self, table: TableId, c: u32, at: MetaBlock) -> Result<Vec<MetaBlock>>;
}

/// What the entries of a block never written hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fresh {
    /// Each entry's default (all zeros).
    Default,
    /// Data-group descriptors of a device of `total` blocks cut into groups
    /// of `group_blocks`: each group wholly free, with no directory.
    Groups {
        /// Blocks on the data device.
        total: u64,
        /// Blocks per group.
        group_blocks: u32,
    },
    /// Bitmap words of a device of `total` blocks: every block free, the
    /// bits past the device's end in use.
    Bitmap {
        /// Blocks on the data device.
        total: u64,
    },
}

/// A fixed-size IFile table entry.
pub trait Entry: Copy + Default {
    /// Appends the encoding.
    fn encode(&self, w: &mut Writer);
    /// Reads one entry.
    ///
    /// # Errors
    /// A malformed entry.
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self>;
    /// `n` default entries. Tables whose default is all zeros allocate
    /// them zeroed, so that memory is touched only where entries are
    /// written (a lazily loaded table of millions).
    fn defaults(n: usize) -> Vec<Self> {
        vec![Self::default(); n]
    }
    /// Entry `i` of a block never written, under `rule`.
    fn fresh(_rule: Fresh, _i: usize) -> Self {
        Self::default()
    }
}

impl Entry for SegUsage {
    fn encode(&self, w: &mut Writer) {
        SegUsage::encode(self, w);
    }
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        SegUsage::decode(r)
    }
}

impl Entry for ImapEntry {
    fn encode(&self, w: &mut Writer) {
        ImapEntry::encode(self, w);
    }
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        ImapEntry::decode(r)
    }
    fn defaults(n: usize) -> Vec<Self> {
        bytemuck::zeroed_vec(n)
    }
}

impl Entry for GroupDesc {
    fn encode(&self, w: &mut Writer) {
        GroupDesc::encode(self, w);
    }
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        GroupDesc::decode(r)
    }
    fn fresh(rule: Fresh, i: usize) -> Self {
        match rule {
            Fresh::Groups { total, group_blocks } => {
                let start = i as u64 * u64::from(group_blocks);
                let end = (start + u64::from(group_blocks)).min(total);
                GroupDesc { free_blocks: end.saturating_sub(start) as u32, directories: 0 }
            }
            _ => GroupDesc::default(),
        }
    }
}

/// Bitmap words and node-map addresses.
impl Entry for u64 {
    fn encode(&self, w: &mut Writer) {
        w.u64(*self);
    }
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        r.u64()
    }
    fn fresh(rule: Fresh, i: usize) -> Self {
        match rule {
            Fresh::Bitmap { total } if total % 64 != 0 && i as u64 == total / 64 => !0u64 << (total % 64),
            Fresh::Bitmap { total } if i as u64 > total / 64 => !0,
            _ => 0,
        }
    }
}

/// Table blocks per chunk: what one index block lists.
pub const CHUNK_BLOCKS: usize = INDEX_PER_BLOCK;

/// A chunk whose index block was read (or that has none yet and is being
/// written to).
#[derive(Debug, Clone)]
struct Chunk<E> {
    /// The durable index block listing it (0: none yet).
    index_at: MetaBlock,
    /// Durable location of each of its blocks; 0 for blocks never written.
    addresses: Vec<MetaBlock>,
    /// Each block's entries (`per_block` of them; past the table's length
    /// in the last block, defaults), `None` while the block is not in
    /// memory: on disk (not read yet, or given back), or never written.
    blocks: Vec<Option<Box<[E]>>>,
}

/// Where a chunk stands.
#[derive(Debug, Clone)]
enum Slot<E> {
    /// No index block and nothing in memory: every block never written.
    Unwritten,
    /// Its index block, not read yet.
    OnDisk(MetaBlock),
    /// Its addresses are in memory.
    Loaded(Box<Chunk<E>>),
}

/// Where one block's entries are.
enum Place<'a, E> {
    Memory(&'a [E]),
    Fresh,
    OnDisk,
}

/// An IFile table, stored chunk by chunk and block by block.
#[derive(Debug, Clone)]
pub struct Table<E: Entry> {
    id: TableId,
    len: usize,
    fresh: Fresh,
    /// Blocks never written hold fresh entries and need not be written
    /// (`SPARSE_IFILE`); otherwise each block is written once it exists
    /// (new blocks are dirty) and every block must be listed.
    sparse: bool,
    /// Per chunk, up to the last one not [`Slot::Unwritten`] (the rest are).
    chunks: Vec<Slot<E>>,
    dirty: BTreeSet<u32>,
    /// Blocks whose entries are in memory.
    in_memory: usize,
    /// Blocks that must be read before use: written and not in memory, or
    /// in a chunk whose index block is not read.
    on_disk: usize,
    /// Durable addresses of the blocks a cut took off since the last
    /// checkpoint (which no longer names them).
    cut: Vec<MetaBlock>,
}

fn split(b: u32) -> (usize, usize) {
    (b as usize / CHUNK_BLOCKS, b as usize % CHUNK_BLOCKS)
}

impl<E: Entry> Table<E> {
    /// A table of `len` fresh entries; on a volume without `sparse`, all
    /// of its blocks are dirty (a fresh volume writes them all).
    #[must_use]
    pub fn new(id: TableId, len: usize, fresh: Fresh, sparse: bool) -> Table<E> {
        let mut t = Table {
            id,
            len: 0,
            fresh,
            sparse,
            chunks: Vec::new(),
            dirty: BTreeSet::new(),
            in_memory: 0,
            on_disk: 0,
            cut: Vec::new(),
        };
        t.grow(len);
        t
    }

    /// An empty table of `len` entries for a checkpoint to be loaded into:
    /// nothing dirty, every block never written until its chunk's index
    /// is installed ([`Table::set_index_address`], [`Table::install_chunk`]).
    #[must_use]
    pub fn for_load(id: TableId, len: usize, fresh: Fresh, sparse: bool) -> Table<E> {
        Table {
            id,
            len,
            fresh,
            sparse,
            chunks: Vec::new(),
            dirty: BTreeSet::new(),
            in_memory: 0,
            on_disk: 0,
            cut: Vec::new(),
        }
    }

    /// Which table this is.
    #[must_use]
    pub fn id(&self) -> TableId {
        self.id
    }

    /// Whether blocks never written may stay so.
    #[must_use]
    pub fn is_sparse(&self) -> bool {
        self.sparse
    }

    /// What blocks never written hold.
    #[must_use]
    pub fn fresh(&self) -> Fresh {
        self.fresh
    }

    /// Changes what blocks never written hold (a resize of the data
    /// device: its end moved).
    pub fn set_fresh(&mut self, fresh: Fresh) {
        self.fresh = fresh;
    }

    /// Entries per block.
    #[must_use]
    pub fn per_block(&self) -> usize {
        self.id.per_block()
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Blocks needed for the entries.
    #[must_use]
    pub fn block_count(&self) -> usize {
        self.len.div_ceil(self.per_block())
    }

    /// Chunks (index blocks) needed for the blocks.
    #[must_use]
    pub fn chunk_count(&self) -> usize {
        self.block_count().div_ceil(CHUNK_BLOCKS)
    }

    /// Blocks of chunk `c`.
    fn chunk_len(&self, c: usize) -> usize {
        self.block_count().saturating_sub(c * CHUNK_BLOCKS).min(CHUNK_BLOCKS)
    }

    fn slot(&self, c: usize) -> &Slot<E> {
        self.chunks.get(c).unwrap_or(&Slot::Unwritten)
    }

    fn loaded_chunk(&self, c: usize) -> Option<&Chunk<E>> {
        match self.slot(c) {
            Slot::Loaded(ch) => Some(ch),
            _ => None,
        }
    }

    fn place_of(&self, b: u32) -> Place<'_, E> {
        let (c, k) = split(b);
        match self.slot(c) {
            Slot::Loaded(ch) => match &ch.blocks[k] {
                Some(block) => Place::Memory(block),
                None if ch.addresses[k].0 == 0 => Place::Fresh,
                None => Place::OnDisk,
            },
            Slot::OnDisk(_) => Place::OnDisk,
            Slot::Unwritten => Place::Fresh,
        }
    }

    /// A block of fresh entries: block `b`'s, defaults past the table.
    fn fresh_block(&self, b: u32) -> Box<[E]> {
        let per = self.per_block();
        let mut block = E::defaults(per);
        if self.fresh != Fresh::Default {
            let start = b as usize * per;
            for (k, e) in block.iter_mut().enumerate().take(self.len.saturating_sub(start).min(per)) {
                *e = E::fresh(self.fresh, start + k);
            }
        }
        block.into_boxed_slice()
    }

    /// Chunk `c`, with its addresses in memory: a chunk with no index
    /// block is made (every block never written).
    ///
    /// # Panics
    /// Its index block was not read.
    fn chunk_mut(&mut self, c: usize) -> &mut Chunk<E> {
        let n = self.chunk_len(c);
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, || Slot::Unwritten);
        }
        if matches!(self.chunks[c], Slot::Unwritten) {
            self.chunks[c] = Slot::Loaded(Box::new(Chunk {
                index_at: MetaBlock(0),
                addresses: vec![MetaBlock(0); n],
                blocks: vec![None; n],
            }));
        }
        let name = self.id.name();
        match &mut self.chunks[c] {
            Slot::Loaded(ch) => ch,
            _ => panic!("chunk {c} of the {name} used before its index block was read"),
        }
    }

    /// Block `b`'s entries, in memory: a block never written is made of
    /// fresh entries.
    ///
    /// # Panics
    /// The block is on disk and not read.
    fn block_mut(&mut self, b: u32) -> &mut [E] {
        let (c, k) = split(b);
        let fresh = match self.place_of(b) {
            Place::Memory(_) => None,
            Place::Fresh => Some(self.fresh_block(b)),
            Place::OnDisk => panic!("block {b} of the {} used before it was loaded", self.id.name()),
        };
        if fresh.is_some() {
            self.in_memory += 1;
        }
        let ch = self.chunk_mut(c);
        if let Some(block) = fresh {
            ch.blocks[k] = Some(block);
        }
        ch.blocks[k].as_deref_mut().unwrap_or_else(|| unreachable!("block {b} was just put in memory"))
    }

    /// Entries of block `b` (those within the table's length).
    ///
    /// # Panics
    /// The block is on disk and not read.
    #[must_use]
    pub fn block_entries(&self, b: u32) -> std::borrow::Cow<'_, [E]> {
        let start = b as usize * self.per_block();
        let n = self.per_block().min(self.len - start);
        match self.place_of(b) {
            Place::Memory(block) => std::borrow::Cow::Borrowed(&block[..n]),
            Place::Fresh => std::borrow::Cow::Owned(self.fresh_block(b)[..n].to_vec()),
            Place::OnDisk => panic!("block {b} of the {} used before it was loaded", self.id.name()),
        }
    }

    /// Entry `i`.
    ///
    /// # Panics
    /// Out of range (callers index with numbers the table handed out), or
    /// its block is on disk and not read.
    #[must_use]
    pub fn get(&self, i: usize) -> E {
        assert!(i < self.len, "entry {i} of the {} is past its {} entries", self.id.name(), self.len);
        let per = self.per_block();
        let b = (i / per) as u32;
        match self.place_of(b) {
            Place::Memory(block) => block[i % per],
            Place::Fresh => E::fresh(self.fresh, i),
            Place::OnDisk => panic!("entry {i} of the {} used before its block {b} was loaded", self.id.name()),
        }
    }

    /// All entries, in order.
    ///
    /// # Panics
    /// Some block is on disk and not read.
    pub fn entries(&self) -> impl Iterator<Item = E> + '_ {
        assert!(
            self.on_disk == 0,
            "the whole {} was read while {} blocks are not loaded",
            self.id.name(),
            self.on_disk
        );
        (0..self.block_count() as u32).flat_map(|b| self.block_entries(b).into_owned())
    }

    /// Replaces entry `i` and marks its block dirty.
    pub fn set(&mut self, i: usize, e: E) {
        self.update(i, |x| *x = e);
    }

    /// Modifies entry `i` in place and marks its block dirty.
    ///
    /// # Panics
    /// Out of range, or its block is on disk and not read.
    pub fn update(&mut self, i: usize, f: impl FnOnce(&mut E)) {
        assert!(i < self.len, "entry {i} of the {} is past its {} entries", self.id.name(), self.len);
        let per = self.per_block();
        let b = (i / per) as u32;
        f(&mut self.block_mut(b)[i % per]);
        self.dirty.insert(b);
    }

    /// Replaces entry `i`, whose block is in memory, without marking it
    /// dirty: the durable block already holds it (a checkpoint wrote it so).
    ///
    /// # Panics
    /// The block is not in memory.
    pub fn set_quietly(&mut self, i: usize, e: E) {
        let per = self.per_block();
        let b = (i / per) as u32;
        assert!(self.is_in_memory(b), "block {b} of the {} changed quietly while not in memory", self.id.name());
        self.block_mut(b)[i % per] = e;
    }

    /// Leaves every block written on disk (its address kept), to be read
    /// through [`Table::load_block`]: a table loaded lazily.
    pub fn set_all_unloaded(&mut self) {
        for slot in &mut self.chunks {
            if let Slot::Loaded(ch) = slot {
                for (k, block) in ch.blocks.iter_mut().enumerate() {
                    if ch.addresses[k].0 != 0 && block.take().is_some() {
                        self.in_memory -= 1;
                        self.on_disk += 1;
                    }
                }
            }
        }
    }

    /// As [`Table::set_all_unloaded`], but block `keep`.
    pub fn set_all_unloaded_but(&mut self, keep: u32) {
        let (c, k) = split(keep);
        let kept = match self.chunks.get_mut(c) {
            Some(Slot::Loaded(ch)) => ch.blocks[k].take(),
            _ => None,
        };
        if kept.is_some() {
            self.in_memory -= 1;
        }
        self.set_all_unloaded();
        if let Some(block) = kept {
            self.chunk_mut(c).blocks[k] = Some(block);
            self.in_memory += 1;
        }
    }

    /// Whether block `b`'s entries are at hand: in memory, or never written.
    #[must_use]
    pub fn is_loaded(&self, b: u32) -> bool {
        (b as usize) >= self.block_count() || !matches!(self.place_of(b), Place::OnDisk)
    }

    /// Whether block `b`'s entries are in memory.
    #[must_use]
    pub fn is_in_memory(&self, b: u32) -> bool {
        matches!(self.place_of(b), Place::Memory(_))
    }

    /// Blocks that must be read before use.
    #[must_use]
    pub fn unloaded_blocks(&self) -> usize {
        self.on_disk
    }

    /// Blocks whose entries are in memory.
    #[must_use]
    pub fn loaded_blocks(&self) -> usize {
        self.in_memory
    }

    /// Chunks whose addresses are in memory, and the slots kept for the
    /// chunks before the last one not unwritten (what the table costs
    /// besides its blocks).
    #[must_use]
    pub fn chunks_in_memory(&self) -> (usize, usize) {
        (self.chunks.iter().filter(|s| matches!(s, Slot::Loaded(_))).count(), self.chunks.len())
    }

    /// Whether block `b` may be given back ([`Table::evict`]): in memory,
    /// unchanged since the last checkpoint, and with a durable copy to read
    /// it again from.
    #[must_use]
    pub fn is_evictable(&self, b: u32) -> bool {
        let (c, k) = split(b);
        self.loaded_chunk(c).is_some_and(|ch| ch.blocks[k].is_some() && ch.addresses[k].0 != 0)
            && !self.dirty.contains(&b)
    }

    /// Gives back the memory of clean block `b`; it is read again, as a
    /// block never read is, when next needed.
    ///
    /// # Panics
    /// The block is dirty, never written, or not in memory: its entries
    /// would be lost.
    pub fn evict(&mut self, b: u32) {
        assert!(
            self.is_evictable(b),
            "block {b} of the {} given back while dirty, never written or not in memory",
            self.id.name()
        );
        let (c, k) = split(b);
        self.chunk_mut(c).blocks[k] = None;
        self.in_memory -= 1;
        self.on_disk += 1;
    }

    /// Gives back block `b` whatever its state, dirty or not, and forgets
    /// that it changed: what the broken rule [`crate::faults::Fault::EvictDirtyMapBlocks`]
    /// does (its changes are lost).
    #[cfg(feature = "fault-injection")]
    pub fn evict_even_dirty(&mut self, b: u32) {
        let (c, k) = split(b);
        if let Some(Slot::Loaded(ch)) = self.chunks.get_mut(c)
            && ch.blocks[k].take().is_some()
        {
            self.in_memory -= 1;
            if ch.addresses[k].0 != 0 {
                self.on_disk += 1;
            }
        }
        self.dirty.remove(&b);
    }

    /// Whether chunk `c`'s addresses are at hand (read, or it has no
    /// index block).
    #[must_use]
    pub fn chunk_known(&self, c: u32) -> bool {
        !matches!(self.slot(c as usize), Slot::OnDisk(_))
    }

    /// Reads chunk `c`'s index block through `source` if its addresses are
    /// not in memory yet.
    ///
    /// # Errors
    /// The source fails, or the index block does not fit the table.
    pub fn load_chunk(&mut self, c: u32, source: &dyn TableSource) -> Result<()> {
        let Slot::OnDisk(at) = *self.slot(c as usize) else { return Ok(()) };
        let addresses = source.read_index(self.id, c, at)?;
        self.install_chunk(c, at, addresses)
            .map_err(|e| crate::error::Error::corrupt_meta("IFile index block", at.0, e.0))
    }

    /// Takes chunk `c`'s addresses, read from its index block at `at`. A
    /// sparse table's index block may list fewer blocks than the chunk now
    /// has (the table grew since): the rest were never written.
    ///
    /// # Errors
    /// More addresses than the chunk has blocks, or (not sparse) fewer.
    pub fn install_chunk(&mut self, c: u32, at: MetaBlock, mut addresses: Vec<MetaBlock>) -> DecodeResult<()> {
        let c = c as usize;
        let n = self.chunk_len(c);
        if addresses.len() > n || (!self.sparse && addresses.len() != n) {
            bad!("index block {c} of the {} lists {} blocks, the chunk has {n}", self.id.name(), addresses.len());
        }
        if !self.sparse && addresses.iter().any(|a| a.0 == 0) {
            bad!("index block {c} of the {} lists a block never written", self.id.name());
        }
        addresses.resize(n, MetaBlock(0));
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, || Slot::Unwritten);
        }
        let written = addresses.iter().filter(|a| a.0 != 0).count();
        match &self.chunks[c] {
            Slot::OnDisk(_) => self.on_disk -= n,
            Slot::Loaded(_) => bad!("index block {c} of the {} read twice", self.id.name()),
            Slot::Unwritten => {}
        }
        self.on_disk += written;
        self.chunks[c] = Slot::Loaded(Box::new(Chunk { index_at: at, addresses, blocks: vec![None; n] }));
        Ok(())
    }

    /// The durable index block of chunk `c`, if it has one.
    #[must_use]
    pub fn index_address(&self, c: u32) -> Option<MetaBlock> {
        match self.slot(c as usize) {
            Slot::Unwritten => None,
            Slot::OnDisk(at) => Some(*at),
            Slot::Loaded(ch) => (ch.index_at.0 != 0).then_some(ch.index_at),
        }
    }

    /// Records where chunk `c`'s index block durably lives (a checkpoint
    /// named it): its addresses are read from there when first needed.
    pub fn set_index_address(&mut self, c: u32, at: MetaBlock) {
        let c = c as usize;
        if c >= self.chunk_count() {
            return;
        }
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, || Slot::Unwritten);
        }
        let n = self.chunk_len(c);
        match &mut self.chunks[c] {
            Slot::Loaded(ch) => ch.index_at = at,
            Slot::OnDisk(old) => *old = at,
            slot @ Slot::Unwritten => {
                *slot = Slot::OnDisk(at);
                self.on_disk += n;
            }
        }
    }

    /// Reads block `b` through `source` if it is not at hand yet (its
    /// chunk's index block first).
    ///
    /// # Errors
    /// The source fails, or the block does not decode.
    pub fn load_block(&mut self, b: u32, source: &dyn TableSource) -> Result<()> {
        if self.is_loaded(b) {
            return Ok(());
        }
        self.load_chunk(split(b).0 as u32, source)?;
        if self.is_loaded(b) {
            return Ok(());
        }
        let at = self.address(b);
        let payload = source.read_block(self.id, b, at)?;
        self.decode_block(b, &payload).map_err(|e| crate::error::Error::corrupt_meta(self.id.name(), at.0, e.0))
    }

    /// Grows the table to `len` entries. A last block they fill that was
    /// written is dirty (its length changes); without `sparse`, the blocks
    /// added are dirty too. (Owners grow a table only where its last block
    /// is at hand.)
    pub fn grow(&mut self, len: usize) {
        if len <= self.len {
            return;
        }
        let per = self.per_block();
        let old_blocks = self.block_count();
        if !self.len.is_multiple_of(per) {
            let last = old_blocks as u32 - 1;
            let (c, k) = split(last);
            let written =
                self.loaded_chunk(c).map_or(matches!(self.slot(c), Slot::OnDisk(_)), |ch| ch.addresses[k].0 != 0);
            if written || !self.sparse {
                assert!(self.is_loaded(last), "the {} grew while its last block was on disk", self.id.name());
                self.dirty.insert(last);
            }
        }
        self.len = len;
        let blocks = self.block_count();
        if !self.sparse {
            self.dirty.extend(old_blocks as u32..blocks as u32);
        }
        // A chunk in memory takes its new blocks (never written).
        for c in old_blocks / CHUNK_BLOCKS..self.chunk_count().min(self.chunks.len()) {
            let n = self.chunk_len(c);
            match &mut self.chunks[c] {
                Slot::Loaded(ch) => {
                    ch.addresses.resize(n, MetaBlock(0));
                    ch.blocks.resize(n, None);
                }
                Slot::OnDisk(_) => {
                    // Counted whole while on disk: the blocks added too.
                    let before = old_blocks.saturating_sub(c * CHUNK_BLOCKS).min(CHUNK_BLOCKS);
                    self.on_disk += n - before;
                }
                Slot::Unwritten => {}
            }
        }
    }

    /// Cuts the table to its first `len` entries (a shrink). Its last block
    /// is rewritten, so that the index block listing it is rewritten too,
    /// without the blocks cut off.
    ///
    /// # Panics
    /// The last block kept is on disk and not read.
    pub fn truncate(&mut self, len: usize) {
        assert!(len > 0 && len <= self.len, "cutting {} entries to {len}", self.len);
        let per = self.per_block();
        let blocks = len.div_ceil(per);
        assert!(self.is_loaded(blocks as u32 - 1), "cutting the {} in a block not loaded", self.id.name());
        assert!(
            (blocks..self.block_count()).all(|b| self.chunk_known(split(b as u32).0 as u32)),
            "cutting the {} where its index was not read",
            self.id.name()
        );
        self.len = len;
        let chunks = self.chunk_count();
        for slot in self.chunks.drain(chunks.min(self.chunks.len())..) {
            if let Slot::Loaded(ch) = slot {
                self.cut.extend(ch.addresses.into_iter().filter(|a| a.0 != 0));
            }
        }
        if let Some(Slot::Loaded(ch)) = self.chunks.get_mut(chunks - 1) {
            let n = blocks - (chunks - 1) * CHUNK_BLOCKS;
            self.cut.extend(ch.addresses.drain(n.min(ch.addresses.len())..).filter(|a| a.0 != 0));
            ch.blocks.truncate(n);
        }
        // The entries cut off read as defaults if the table grows again.
        let last = self.block_mut(blocks as u32 - 1);
        for e in &mut last[len - (blocks - 1) * per..] {
            *e = E::default();
        }
        self.dirty.retain(|&b| (b as usize) < blocks);
        self.dirty.insert(blocks as u32 - 1);
        self.recount();
    }

    /// Recounts the blocks in memory and on disk (after a cut).
    fn recount(&mut self) {
        let (mut in_memory, mut on_disk) = (0, 0);
        for (c, slot) in self.chunks.iter().enumerate() {
            match slot {
                Slot::Unwritten => {}
                Slot::OnDisk(_) => on_disk += self.chunk_len(c),
                Slot::Loaded(ch) => {
                    for (k, block) in ch.blocks.iter().enumerate() {
                        match block {
                            Some(_) => in_memory += 1,
                            None if ch.addresses[k].0 != 0 => on_disk += 1,
                            None => {}
                        }
                    }
                }
            }
        }
        self.in_memory = in_memory;
        self.on_disk = on_disk;
    }

    /// Blocks changed since the last checkpoint.
    #[must_use]
    pub fn dirty_blocks(&self) -> Vec<u32> {
        self.dirty.iter().copied().collect()
    }

    /// How many blocks changed since the last checkpoint.
    #[must_use]
    pub fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    /// Whether any block changed since the last checkpoint.
    #[must_use]
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Whether block `b` changed since the last checkpoint.
    #[must_use]
    pub fn is_block_dirty(&self, b: u32) -> bool {
        self.dirty.contains(&b)
    }

    /// Marks block `b` for rewriting at the next checkpoint (the cleaner
    /// moves IFile blocks this way).
    ///
    /// # Panics
    /// The block is on disk and not read.
    pub fn mark_dirty(&mut self, b: u32) {
        assert!(self.is_loaded(b), "block {b} of the {} moved before it was loaded", self.id.name());
        if (b as usize) < self.block_count() {
            self.dirty.insert(b);
        }
    }

    /// Takes `other`'s entries (another tree's table, mounting it): a block
    /// whose bytes are those of this table's clean, written block of the
    /// same number keeps that block's address; every other block is dirty,
    /// for the next checkpoint to write, but one never written in either
    /// (fresh in both). Every block's address is this table's: where the
    /// durable copy of the volume's own checkpoint lives. So no live block stays in the other tree's image,
    /// and the trees' common blocks cost nothing. `other` is taken, not
    /// copied: at ten million inodes its map is 160 MiB.
    ///
    /// # Panics
    /// `other` is not all at hand, or this table's chunks are not. (A
    /// block of this table not in memory is compared by address: both
    /// trees name one durable block only if they share it, which snapshots
    /// keep from being overwritten.)
    pub fn adopt(&mut self, other: Table<E>) {
        assert!(other.on_disk == 0, "adopting a table not all read");
        assert!(self.chunks_known(), "adopting into a table whose index is not all read");
        let old = std::mem::replace(self, other);
        self.dirty = BTreeSet::new();
        self.cut.clone_from(&old.cut);
        for b in 0..self.block_count() as u32 {
            let (c, k) = split(b);
            let mine = self.address(b);
            let ours = (b as usize) < old.block_count();
            let theirs = if ours { old.address(b) } else { MetaBlock(0) };
            if theirs.0 == 0 && mine.0 == 0 {
                continue;
            }
            let same = ours
                && theirs.0 != 0
                && !old.dirty.contains(&b)
                && if old.is_in_memory(b) { old.encode_block(b) == self.encode_block(b) } else { theirs == mine };
            if !same {
                // Written anew at the next checkpoint; meanwhile the durable
                // copy it replaces is this tree's (or none), which is what
                // the checkpoint takes from its segment's count.
                self.dirty.insert(b);
                if !self.is_in_memory(b) {
                    let _ = self.block_mut(b);
                }
            }
            self.chunk_mut(c).addresses[k] = theirs;
        }
        // Index blocks are the outgoing tree's until the next checkpoint.
        for c in 0..self.chunk_count() {
            let at = old.index_address(c as u32).unwrap_or(MetaBlock(0));
            if let Some(Slot::Loaded(ch)) = self.chunks.get_mut(c) {
                ch.index_at = at;
            } else if at.0 != 0 {
                self.chunk_mut(c).index_at = at;
            }
        }
        self.recount();
    }

    /// The payload of block `b`.
    ///
    /// # Panics
    /// The block is on disk and not read.
    #[must_use]
    pub fn encode_block(&self, b: u32) -> Vec<u8> {
        let entries = self.block_entries(b);
        let mut w = Writer::with_capacity(entries.len() * self.id.entry_len());
        for e in entries.iter() {
            e.encode(&mut w);
        }
        w.into_inner()
    }

    /// Loads block `b` from its payload (its chunk's addresses known).
    ///
    /// # Errors
    /// The payload's length disagrees with the table's, or an entry is malformed.
    pub fn decode_block(&mut self, b: u32, payload: &[u8]) -> DecodeResult<()> {
        let block = self.decode_detached(b, payload)?;
        let (c, k) = split(b);
        if !self.chunk_known(c as u32) {
            bad!("block {b} of the {} read before its index block", self.id.name());
        }
        let written = self.loaded_chunk(c).is_some_and(|ch| ch.addresses[k].0 != 0);
        let ch = self.chunk_mut(c);
        if ch.blocks[k].replace(block).is_none() {
            self.in_memory += 1;
            if written {
                self.on_disk -= 1;
            }
        }
        Ok(())
    }

    /// Decodes block `b`'s payload without taking it in: for a walk over a
    /// table larger than what may be held (a snapshot counting what the
    /// inode map reaches). Entries past the table's length are defaults.
    ///
    /// # Errors
    /// As [`Table::decode_block`].
    pub fn decode_detached(&self, b: u32, payload: &[u8]) -> DecodeResult<Box<[E]>> {
        let start = b as usize * self.per_block();
        if start >= self.len {
            bad!("{} block {b} lies beyond the table's {} entries", self.id.name(), self.len);
        }
        let n = self.per_block().min(self.len - start);
        if payload.len() != n * self.id.entry_len() {
            bad!("{} block {b} holds {} bytes, expected {}", self.id.name(), payload.len(), n * self.id.entry_len());
        }
        let mut block = E::defaults(self.per_block()).into_boxed_slice();
        let mut r = Reader::new(payload);
        for e in &mut block[..n] {
            *e = E::decode(&mut r)?;
        }
        Ok(block)
    }

    /// Where block `b` was last written (0: never).
    ///
    /// # Panics
    /// Its chunk's index block was not read.
    #[must_use]
    pub fn address(&self, b: u32) -> MetaBlock {
        let (c, k) = split(b);
        match self.slot(c) {
            Slot::Loaded(ch) => ch.addresses[k],
            Slot::Unwritten => MetaBlock(0),
            Slot::OnDisk(_) => panic!("block {b} of the {} placed before its index block was read", self.id.name()),
        }
    }

    /// The addresses chunk `c` lists (0 for blocks never written).
    ///
    /// # Panics
    /// Its index block was not read.
    #[must_use]
    pub fn chunk_addresses(&self, c: u32) -> Vec<MetaBlock> {
        match self.slot(c as usize) {
            Slot::Loaded(ch) => ch.addresses.clone(),
            Slot::Unwritten => vec![MetaBlock(0); self.chunk_len(c as usize)],
            Slot::OnDisk(_) => panic!("chunk {c} of the {} listed before its index block was read", self.id.name()),
        }
    }

    /// Every block written, with its address.
    ///
    /// # Panics
    /// Some chunk's index block was not read.
    pub fn written_addresses(&self) -> impl Iterator<Item = (u32, MetaBlock)> + '_ {
        (0..self.chunk_count()).flat_map(move |c| {
            let ch = match self.slot(c) {
                Slot::Loaded(ch) => Some(ch),
                Slot::Unwritten => None,
                Slot::OnDisk(_) => panic!("the {} listed before its index block {c} was read", self.id.name()),
            };
            ch.into_iter().flat_map(move |ch| {
                ch.addresses
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.0 != 0)
                    .map(move |(k, a)| ((c * CHUNK_BLOCKS + k) as u32, *a))
            })
        })
    }

    /// Whether every chunk's addresses are at hand.
    #[must_use]
    pub fn chunks_known(&self) -> bool {
        self.chunks.iter().all(|s| !matches!(s, Slot::OnDisk(_)))
    }

    /// Chunks whose index block was not read.
    #[must_use]
    pub fn chunks_on_disk(&self) -> Vec<u32> {
        (0..self.chunks.len()).filter(|&c| matches!(self.chunks[c], Slot::OnDisk(_))).map(|c| c as u32).collect()
    }

    /// Records where block `b` was written; it is clean again. A block
    /// not in memory (fresh, written because the table is not sparse) is
    /// taken into memory: it is at hand now, as it was.
    ///
    /// # Panics
    /// The block is on disk and not read: only blocks at hand are written.
    pub fn set_address(&mut self, b: u32, at: MetaBlock) {
        if !self.is_in_memory(b) {
            let _ = self.block_mut(b);
        }
        let (c, k) = split(b);
        self.chunk_mut(c).addresses[k] = at;
        self.dirty.remove(&b);
    }

    /// Durable addresses of the blocks cut off since the last checkpoint.
    #[must_use]
    pub fn cut_addresses(&self) -> &[MetaBlock] {
        &self.cut
    }

    /// A checkpoint no longer naming the blocks cut off is durable.
    pub fn forget_cut(&mut self) {
        self.cut.clear();
    }

    /// Forgets that blocks are dirty (after a load, everything matches disk).
    pub fn clear_dirty(&mut self) {
        self.dirty.clear();
    }
}

/// What the checkpoint writer and the loader need from any table, whatever
/// its entry type.
pub trait TableAccess {
    /// Which table.
    fn table_id(&self) -> TableId;
    /// Number of entries.
    fn entry_count(&self) -> usize;
    /// Number of blocks.
    fn blocks(&self) -> usize;
    /// Blocks changed since the last checkpoint.
    fn dirty(&self) -> Vec<u32>;
    /// Payload of block `b`.
    fn encode(&self, b: u32) -> Vec<u8>;
    /// Loads block `b`.
    ///
    /// # Errors
    /// A malformed payload.
    fn decode(&mut self, b: u32, payload: &[u8]) -> DecodeResult<()>;
    /// Durable address of block `b`.
    fn block_address(&self, b: u32) -> MetaBlock;
    /// Records where block `b` now lives.
    fn place(&mut self, b: u32, at: MetaBlock);
    /// Marks block `b` for rewriting.
    fn touch(&mut self, b: u32);
    /// Forgets dirtiness (after a load).
    fn loaded(&mut self);
    /// Whether chunk `c`'s addresses are at hand.
    fn knows_chunk(&self, c: u32) -> bool;
    /// Reads chunk `c`'s index block if needed.
    ///
    /// # Errors
    /// As [`Table::load_chunk`].
    fn read_chunk(&mut self, c: u32, source: &dyn TableSource) -> Result<()>;
    /// Takes chunk `c`'s addresses, read at `at`.
    ///
    /// # Errors
    /// As [`Table::install_chunk`].
    fn take_chunk(&mut self, c: u32, at: MetaBlock, addresses: Vec<MetaBlock>) -> DecodeResult<()>;
    /// The addresses chunk `c` lists.
    fn chunk_list(&self, c: u32) -> Vec<MetaBlock>;
    /// The durable index block of chunk `c`.
    fn index_at(&self, c: u32) -> Option<MetaBlock>;
    /// Records the durable index block of chunk `c`.
    fn set_index_at(&mut self, c: u32, at: MetaBlock);
    /// Number of chunks.
    fn chunks(&self) -> usize;
    /// Whether blocks never written may stay so.
    fn sparse(&self) -> bool;
    /// Whether block `b`'s entries are at hand.
    fn block_at_hand(&self, b: u32) -> bool;
    /// Reads block `b` if needed.
    ///
    /// # Errors
    /// As [`Table::load_block`].
    fn read_block(&mut self, b: u32, source: &dyn TableSource) -> Result<()>;
    /// Durable addresses of the blocks cut off since the last checkpoint.
    fn cut_off(&self) -> Vec<MetaBlock>;
    /// Forgets them (a checkpoint without them is durable).
    fn clear_cut(&mut self);
}

impl<E: Entry> TableAccess for Table<E> {
    fn table_id(&self) -> TableId {
        self.id
    }
    fn entry_count(&self) -> usize {
        self.len()
    }
    fn blocks(&self) -> usize {
        self.block_count()
    }
    fn dirty(&self) -> Vec<u32> {
        self.dirty_blocks()
    }
    fn encode(&self, b: u32) -> Vec<u8> {
        self.encode_block(b)
    }
    fn decode(&mut self, b: u32, payload: &[u8]) -> DecodeResult<()> {
        self.decode_block(b, payload)
    }
    fn block_address(&self, b: u32) -> MetaBlock {
        self.address(b)
    }
    fn place(&mut self, b: u32, at: MetaBlock) {
        self.set_address(b, at);
    }
    fn touch(&mut self, b: u32) {
        self.mark_dirty(b);
    }
    fn loaded(&mut self) {
        self.clear_dirty();
    }
    fn knows_chunk(&self, c: u32) -> bool {
        self.chunk_known(c)
    }
    fn read_chunk(&mut self, c: u32, source: &dyn TableSource) -> Result<()> {
        self.load_chunk(c, source)
    }
    fn take_chunk(&mut self, c: u32, at: MetaBlock, addresses: Vec<MetaBlock>) -> DecodeResult<()> {
        self.install_chunk(c, at, addresses)
    }
    fn chunk_list(&self, c: u32) -> Vec<MetaBlock> {
        self.chunk_addresses(c)
    }
    fn index_at(&self, c: u32) -> Option<MetaBlock> {
        self.index_address(c)
    }
    fn set_index_at(&mut self, c: u32, at: MetaBlock) {
        self.set_index_address(c, at);
    }
    fn chunks(&self) -> usize {
        self.chunk_count()
    }
    fn sparse(&self) -> bool {
        self.sparse
    }
    fn block_at_hand(&self, b: u32) -> bool {
        self.is_loaded(b)
    }
    fn read_block(&mut self, b: u32, source: &dyn TableSource) -> Result<()> {
        self.load_block(b, source)
    }
    fn cut_off(&self) -> Vec<MetaBlock> {
        self.cut.clone()
    }
    fn clear_cut(&mut self) {
        self.forget_cut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Seq;

    /// A dense table of `len` entries (every block written at the next
    /// checkpoint, as on a volume without `SPARSE_IFILE`).
    fn dense<E: Entry>(id: TableId, len: usize) -> Table<E> {
        Table::new(id, len, Fresh::Default, false)
    }

    #[test]
    fn blocks_round_trip_and_dirty_tracking_follows_sets() {
        let mut t: Table<SegUsage> = dense(TableId::SegmentUsage, 600);
        assert_eq!(t.block_count(), 3);
        assert_eq!(t.dirty_blocks(), vec![0, 1, 2]);
        for b in 0..3 {
            t.set_address(b, MetaBlock(10 + u64::from(b)));
        }
        assert!(!t.is_dirty());
        t.set(300, SegUsage { live_bytes: 4096, ifile_blocks: 0, last_seq: Seq(3) });
        assert_eq!(t.dirty_blocks(), vec![1]);
        let p = t.encode_block(1);
        let mut u: Table<SegUsage> = dense(TableId::SegmentUsage, 600);
        u.decode_block(1, &p).unwrap();
        assert_eq!(u.get(300), t.get(300));
        assert!(u.decode_block(1, &p[..p.len() - 1]).is_err());
        assert!(u.decode_block(7, &p).is_err());
    }

    /// A table of three written blocks, all clean.
    fn written(len: usize) -> Table<ImapEntry> {
        let mut t: Table<ImapEntry> = dense(TableId::InodeMap, len);
        for i in 0..len {
            t.set(i, ImapEntry { generation: i as u32, ..ImapEntry::default() });
        }
        for b in 0..t.block_count() as u32 {
            t.set_address(b, MetaBlock(100 + u64::from(b)));
        }
        t
    }

    #[test]
    fn a_clean_block_given_back_reads_again_as_it_was() {
        let per = TableId::InodeMap.per_block();
        let mut t = written(2 * per + 5);
        let payload = t.encode_block(1);
        assert!(t.is_evictable(1));
        t.evict(1);
        assert_eq!((t.loaded_blocks(), t.unloaded_blocks()), (2, 1));
        assert!(!t.is_loaded(1) && !t.is_evictable(1));
        // The other blocks are untouched, and the last one can still grow.
        assert_eq!(t.get(per - 1).generation, per as u32 - 1);
        t.grow(2 * per + 6);
        assert_eq!(t.get(2 * per + 5), ImapEntry::default());
        t.decode_block(1, &payload).unwrap();
        assert_eq!(t.unloaded_blocks(), 0);
        assert_eq!(t.get(per + 3).generation, per as u32 + 3);
        assert_eq!(t.entries().count(), 2 * per + 6);
        assert_eq!(t.dirty_blocks(), vec![2], "reading a block back does not dirty it");
    }

    #[test]
    fn a_dirty_or_unwritten_block_is_not_evictable() {
        let mut t = written(600);
        t.set(3, ImapEntry::default());
        assert!(!t.is_evictable(0), "dirty");
        t.grow(2000);
        assert!(!t.is_evictable(t.block_count() as u32 - 1), "never written");
        assert!(t.is_evictable(1));
    }

    #[test]
    #[should_panic(expected = "given back while dirty")]
    fn giving_back_a_dirty_block_is_a_bug_asserted() {
        let mut t = written(600);
        t.update(1, |e| e.generation += 1);
        t.evict(0);
    }

    #[test]
    #[should_panic(expected = "used before its block 1 was loaded")]
    fn an_entry_of_a_block_given_back_is_never_read_as_default() {
        let per = TableId::InodeMap.per_block();
        let mut t = written(2 * per);
        t.evict(1);
        let _ = t.get(per);
    }

    #[test]
    fn truncation_resets_the_entries_cut_off() {
        let mut t: Table<u64> = dense(TableId::NodeMap, 20);
        t.set(15, 7);
        t.truncate(10);
        t.grow(20);
        assert_eq!(t.get(15), 0);
        assert_eq!(t.entries().count(), 20);
    }

    #[test]
    fn adopting_compares_a_block_not_in_memory_by_address() {
        let per = TableId::InodeMap.per_block();
        let mut t = written(3 * per);
        let mut other = t.clone();
        // Block 2 of the other tree lies elsewhere, with the same bytes.
        other.set_address(2, MetaBlock(500));
        t.evict(0);
        t.evict(2);
        t.adopt(other);
        assert_eq!(t.dirty_blocks(), vec![2], "block 0 is the one both trees name, block 2 is not");
        assert_eq!((t.address(0), t.address(1)), (MetaBlock(100), MetaBlock(101)));
        assert_eq!(t.unloaded_blocks(), 0, "the adopted table is whole");
    }

    #[test]
    fn a_block_decoded_detached_leaves_the_table_as_it_was() {
        let per = TableId::InodeMap.per_block();
        let mut t = written(2 * per);
        let payload = t.encode_block(1);
        t.evict(1);
        let entries = t.decode_detached(1, &payload).unwrap();
        assert_eq!(entries[3].generation, per as u32 + 3);
        assert!(!t.is_loaded(1));
        assert!(t.decode_detached(2, &payload).is_err(), "past the table");
    }

    #[test]
    fn growth_dirties_only_new_blocks() {
        let mut t: Table<u64> = dense(TableId::NodeMap, 10);
        t.set_address(0, MetaBlock(5));
        t.grow(2000);
        assert_eq!(t.block_count(), 4);
        assert_eq!(t.dirty_blocks(), vec![0, 1, 2, 3]);
    }

    /// A sparse bitmap of a device of `total` blocks.
    fn bitmap(total: u64) -> Table<u64> {
        Table::new(TableId::Bitmap, total.div_ceil(64) as usize, Fresh::Bitmap { total }, true)
    }

    #[test]
    fn a_sparse_table_costs_nothing_until_an_entry_changes() {
        // 15 TiB of data blocks: 64 Mi words, 126,000 blocks, 251 chunks.
        let total = 15u64 << 28;
        let mut t = bitmap(total);
        assert_eq!((t.loaded_blocks(), t.unloaded_blocks(), t.dirty_count()), (0, 0, 0));
        assert_eq!(t.get(1_000_000), 0, "free");
        let last = t.len() - 1;
        assert_eq!(t.get(last), 0, "a device of whole words has no bit past its end");
        t.set(1_000_000, 1);
        assert_eq!((t.loaded_blocks(), t.dirty_blocks()), (1, vec![(1_000_000 / t.per_block()) as u32]));
        assert_eq!(t.chunks.len(), 1_000_000 / t.per_block() / CHUNK_BLOCKS + 1, "chunks up to the one changed");
        // The bits past the end of a device of 100 blocks are in use.
        let t = bitmap(100);
        assert_eq!(t.get(1), !0u64 << 36);
        let groups: Table<GroupDesc> =
            Table::new(TableId::GroupDesc, 3, Fresh::Groups { total: 2 * 1024 + 100, group_blocks: 1024 }, true);
        assert_eq!(groups.get(1).free_blocks, 1024);
        assert_eq!(groups.get(2).free_blocks, 100, "the last group is short");
    }

    #[derive(Debug)]
    struct Index(Vec<MetaBlock>);
    impl TableSource for Index {
        fn read_block(&self, _: TableId, _: u32, _: MetaBlock) -> Result<Vec<u8>> {
            Ok(vec![0xff; TableId::Bitmap.per_block() * 8])
        }
        fn read_index(&self, _: TableId, _: u32, _: MetaBlock) -> Result<Vec<MetaBlock>> {
            Ok(self.0.clone())
        }
    }

    #[test]
    fn a_chunk_on_disk_is_read_before_its_blocks_and_names_some_never_written() {
        let per = TableId::Bitmap.per_block();
        let total = (3 * per * 64) as u64;
        let mut t = Table::<u64>::for_load(TableId::Bitmap, 3 * per, Fresh::Bitmap { total }, true);
        t.set_index_address(0, MetaBlock(900));
        assert_eq!(t.unloaded_blocks(), 3, "the whole chunk until its index is read");
        assert!(!t.is_loaded(0) && !t.chunk_known(0));
        // An index block listing fewer blocks than the chunk has: the rest never written.
        let source = Index(vec![MetaBlock(0), MetaBlock(700)]);
        t.load_block(0, &source).unwrap();
        assert_eq!(t.unloaded_blocks(), 1, "block 1 only");
        assert_eq!((t.address(0), t.address(2)), (MetaBlock(0), MetaBlock(0)));
        assert_eq!(t.get(5), 0, "fresh");
        t.load_block(1, &source).unwrap();
        assert_eq!(t.get(per + 5), !0, "read");
        assert_eq!(t.unloaded_blocks(), 0);
        assert_eq!(t.index_address(0), Some(MetaBlock(900)));
        assert_eq!(t.written_addresses().collect::<Vec<_>>(), vec![(1, MetaBlock(700))]);
    }

    #[test]
    #[should_panic(expected = "used before it was loaded")]
    fn an_entry_of_a_chunk_not_read_is_never_taken_for_fresh() {
        let per = TableId::Bitmap.per_block();
        let mut t = Table::<u64>::for_load(TableId::Bitmap, 2 * per, Fresh::Bitmap { total: 1 << 20 }, true);
        t.set_index_address(0, MetaBlock(900));
        t.update(3, |w| *w |= 1);
    }

    #[test]
    fn a_dense_index_block_must_name_every_block() {
        let mut t = Table::<u64>::for_load(TableId::NodeMap, 2 * TableId::NodeMap.per_block(), Fresh::Default, false);
        assert!(t.install_chunk(0, MetaBlock(9), vec![MetaBlock(5)]).is_err(), "one block of two");
        assert!(t.install_chunk(0, MetaBlock(9), vec![MetaBlock(5), MetaBlock(0)]).is_err(), "one never written");
        t.install_chunk(0, MetaBlock(9), vec![MetaBlock(5), MetaBlock(6)]).unwrap();
        assert_eq!(t.unloaded_blocks(), 2);
    }
}
