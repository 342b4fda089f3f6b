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

mod access;
mod layout;
pub use access::TableAccess;

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

    /// Forgets that blocks are dirty (after a load, everything matches disk).
    pub fn clear_dirty(&mut self) {
        self.dirty.clear();
    }
}

#[cfg(test)]
mod tests;
