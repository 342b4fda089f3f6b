//! One IFile table in memory: its entries, which blocks changed since the
//! last checkpoint, and where each block's durable copy lives.
//!
//! It sits below both owners of IFile tables, [`crate::data_space`] (group
//! descriptors, bitmap) and [`crate::ifile`] (segment usage, inode map, node
//! map), so neither has to import the other.

use std::collections::BTreeSet;

use crate::error::Result;
use crate::format::codec::{DecodeResult, Reader, Writer, bad};
use crate::format::ifile::{GroupDesc, ImapEntry, SegUsage, TableId};
use crate::types::MetaBlock;

/// Reads one IFile table block from where the checkpoint says it lives,
/// checked (kind, name, checksum), and hands back its payload: how a table
/// loaded lazily fetches a block when it is first needed.
pub trait TableSource: Send + Sync + std::fmt::Debug {
    /// The payload of block `b` of `table`, at `at`.
    ///
    /// # Errors
    /// The device fails, or the block is not that table block.
    fn read_block(&self, table: TableId, b: u32, at: MetaBlock) -> Result<Vec<u8>>;
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
}

/// Bitmap words and node-map addresses.
impl Entry for u64 {
    fn encode(&self, w: &mut Writer) {
        w.u64(*self);
    }
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        r.u64()
    }
}

/// An IFile table.
#[derive(Debug, Clone)]
pub struct Table<E: Entry> {
    id: TableId,
    entries: Vec<E>,
    dirty: BTreeSet<u32>,
    /// Durable location of each block; `MetaBlock(0)` for blocks never written.
    addresses: Vec<MetaBlock>,
    /// Blocks whose entries were not read yet (a table loaded lazily); empty
    /// when every block is in memory. Touching an entry of such a block is
    /// a bug, asserted: its entries in memory are defaults, not the disk's.
    unloaded: Vec<bool>,
    unloaded_count: usize,
}

impl<E: Entry> Table<E> {
    /// A table of `len` default entries, all of them dirty.
    #[must_use]
    pub fn new(id: TableId, len: usize) -> Table<E> {
        let mut t = Table {
            id,
            entries: vec![E::default(); len],
            dirty: BTreeSet::new(),
            addresses: Vec::new(),
            unloaded: Vec::new(),
            unloaded_count: 0,
        };
        t.addresses = vec![MetaBlock(0); t.block_count()];
        t.dirty = (0..t.block_count() as u32).collect();
        t
    }

    /// Which table this is.
    #[must_use]
    pub fn id(&self) -> TableId {
        self.id
    }

    /// Entries per block.
    #[must_use]
    pub fn per_block(&self) -> usize {
        self.id.per_block()
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Blocks needed for the entries.
    #[must_use]
    pub fn block_count(&self) -> usize {
        self.entries.len().div_ceil(self.per_block())
    }

    /// Entry `i`.
    ///
    /// # Panics
    /// Out of range: callers index with numbers the table handed out.
    #[must_use]
    pub fn get(&self, i: usize) -> E {
        self.assert_loaded(i);
        self.entries[i]
    }

    /// All entries.
    ///
    /// # Panics
    /// Some block was not loaded yet.
    #[must_use]
    pub fn entries(&self) -> &[E] {
        assert!(
            self.unloaded_count == 0,
            "the whole {} was read while {} blocks are not loaded",
            self.id.name(),
            self.unloaded_count
        );
        &self.entries
    }

    /// Replaces entry `i` and marks its block dirty.
    pub fn set(&mut self, i: usize, e: E) {
        self.assert_loaded(i);
        self.entries[i] = e;
        self.dirty.insert((i / self.per_block()) as u32);
    }

    /// Modifies entry `i` in place and marks its block dirty.
    pub fn update(&mut self, i: usize, f: impl FnOnce(&mut E)) {
        self.assert_loaded(i);
        f(&mut self.entries[i]);
        self.dirty.insert((i / self.per_block()) as u32);
    }

    fn assert_loaded(&self, i: usize) {
        if self.unloaded_count > 0 {
            let b = i / self.per_block();
            assert!(
                !self.unloaded.get(b).copied().unwrap_or(false),
                "entry {i} of the {} used before its block {b} was loaded",
                self.id.name()
            );
        }
    }

    /// Marks every block as not read yet (its address is known): a table
    /// loaded lazily, block by block, through [`Table::load_block`].
    pub fn set_all_unloaded(&mut self) {
        self.unloaded = vec![true; self.block_count()];
        self.unloaded_count = self.unloaded.len();
    }

    /// As [`Table::set_all_unloaded`], but block `keep`, already read.
    pub fn set_all_unloaded_but(&mut self, keep: u32) {
        self.set_all_unloaded();
        if let Some(u) = self.unloaded.get_mut(keep as usize) {
            *u = false;
            self.unloaded_count -= 1;
        }
    }

    /// Whether block `b`'s entries are in memory.
    #[must_use]
    pub fn is_loaded(&self, b: u32) -> bool {
        self.unloaded_count == 0 || !self.unloaded.get(b as usize).copied().unwrap_or(false)
    }

    /// Blocks not read yet.
    #[must_use]
    pub fn unloaded_blocks(&self) -> usize {
        self.unloaded_count
    }

    /// Reads block `b` through `source` if it is not in memory yet.
    ///
    /// # Errors
    /// The source fails, or the block does not decode.
    pub fn load_block(&mut self, b: u32, source: &dyn TableSource) -> Result<()> {
        if self.is_loaded(b) {
            return Ok(());
        }
        let at = self.addresses[b as usize];
        let payload = source.read_block(self.id, b, at)?;
        self.decode_block(b, &payload).map_err(|e| crate::error::Error::corrupt_meta(self.id.name(), at.0, e.0))
    }

    /// Grows the table to `len` default entries.
    pub fn grow(&mut self, len: usize) {
        if len <= self.entries.len() {
            return;
        }
        let first_new = self.entries.len() / self.per_block();
        if len > self.entries.capacity() {
            // Allocated anew, zeroed where the entry type allows, with a
            // quarter more room: a table left on disk is not copied (and
            // its pages touched) each time an inode more is made past its
            // end; a copy of ten million entries took 100 ms of a mount
            // after a crash.
            let old = self.entries.len();
            let mut grown = E::defaults(len + len / 4);
            grown.truncate(len);
            grown[..old].copy_from_slice(&self.entries);
            self.entries = grown;
        } else {
            self.entries.resize(len, E::default());
        }
        self.addresses.resize(self.block_count(), MetaBlock(0));
        for b in first_new..self.block_count() {
            self.dirty.insert(b as u32);
        }
    }

    /// Cuts the table to its first `len` entries (a shrink of the log).
    /// Its last block is rewritten, so that the index block listing it is
    /// rewritten too, without the blocks cut off.
    pub fn truncate(&mut self, len: usize) {
        assert!(len > 0 && len <= self.entries.len(), "cutting {} entries to {len}", self.entries.len());
        self.entries.truncate(len);
        let blocks = self.block_count();
        self.addresses.truncate(blocks);
        self.dirty.retain(|&b| (b as usize) < blocks);
        self.dirty.insert(blocks as u32 - 1);
    }

    /// Blocks changed since the last checkpoint.
    #[must_use]
    pub fn dirty_blocks(&self) -> Vec<u32> {
        self.dirty.iter().copied().collect()
    }

    /// Whether any block changed since the last checkpoint.
    #[must_use]
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Marks block `b` for rewriting at the next checkpoint (the cleaner
    /// moves IFile blocks this way).
    pub fn mark_dirty(&mut self, b: u32) {
        assert!(self.is_loaded(b), "block {b} of the {} moved before it was loaded", self.id.name());
        if (b as usize) < self.block_count() {
            self.dirty.insert(b);
        }
    }

    /// Takes `other`'s entries (another tree's table, mounting it): a block
    /// whose bytes are those of this table's clean, written block of the
    /// same number keeps that block's address; every other block is dirty,
    /// for the next checkpoint to write. So no live block stays in the
    /// other tree's image, and the trees' common blocks cost nothing.
    ///
    /// # Panics
    /// Either table is not all in memory.
    pub fn adopt(&mut self, other: &Table<E>) {
        assert!(self.unloaded_count == 0 && other.unloaded_count == 0, "adopting a table not all read");
        let old = std::mem::replace(self, other.clone());
        self.dirty = BTreeSet::new();
        for b in 0..self.block_count() as u32 {
            let i = b as usize;
            let same = i < old.block_count()
                && !old.dirty.contains(&b)
                && old.addresses[i].0 != 0
                && old.encode_block(b) == self.encode_block(b);
            if same {
                self.addresses[i] = old.addresses[i];
            } else {
                self.dirty.insert(b);
            }
        }
    }

    /// The payload of block `b`.
    #[must_use]
    pub fn encode_block(&self, b: u32) -> Vec<u8> {
        let start = b as usize * self.per_block();
        let end = (start + self.per_block()).min(self.entries.len());
        assert!(self.is_loaded(b), "block {b} of the {} written before it was loaded", self.id.name());
        let mut w = Writer::with_capacity((end - start) * self.id.entry_len());
        for e in &self.entries[start..end] {
            e.encode(&mut w);
        }
        w.into_inner()
    }

    /// Loads block `b` from its payload (at mount).
    ///
    /// # Errors
    /// The payload's length disagrees with the table's, or an entry is malformed.
    pub fn decode_block(&mut self, b: u32, payload: &[u8]) -> DecodeResult<()> {
        let start = b as usize * self.per_block();
        if start >= self.entries.len() {
            bad!("{} block {b} lies beyond the table's {} entries", self.id.name(), self.entries.len());
        }
        let end = (start + self.per_block()).min(self.entries.len());
        if payload.len() != (end - start) * self.id.entry_len() {
            bad!(
                "{} block {b} holds {} bytes, expected {}",
                self.id.name(),
                payload.len(),
                (end - start) * self.id.entry_len()
            );
        }
        let mut r = Reader::new(payload);
        for i in start..end {
            self.entries[i] = E::decode(&mut r)?;
        }
        if self.unloaded.get(b as usize).copied().unwrap_or(false) {
            self.unloaded[b as usize] = false;
            self.unloaded_count -= 1;
        }
        Ok(())
    }

    /// Where block `b` was last written.
    #[must_use]
    pub fn address(&self, b: u32) -> MetaBlock {
        self.addresses[b as usize]
    }

    /// All block addresses.
    #[must_use]
    pub fn addresses(&self) -> &[MetaBlock] {
        &self.addresses
    }

    /// Records where block `b` was written; it is clean again.
    pub fn set_address(&mut self, b: u32, at: MetaBlock) {
        self.addresses[b as usize] = at;
        self.dirty.remove(&b);
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
    /// Resizes to `len` entries (at load).
    fn resize(&mut self, len: usize);
    /// Forgets dirtiness (after a load).
    fn loaded(&mut self);
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
    fn resize(&mut self, len: usize) {
        self.grow(len);
    }
    fn loaded(&mut self) {
        self.clear_dirty();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Seq;

    #[test]
    fn blocks_round_trip_and_dirty_tracking_follows_sets() {
        let mut t: Table<SegUsage> = Table::new(TableId::SegmentUsage, 600);
        assert_eq!(t.block_count(), 3);
        assert_eq!(t.dirty_blocks(), vec![0, 1, 2]);
        for b in 0..3 {
            t.set_address(b, MetaBlock(10 + u64::from(b)));
        }
        assert!(!t.is_dirty());
        t.set(300, SegUsage { live_bytes: 4096, flags: 0, last_seq: Seq(3) });
        assert_eq!(t.dirty_blocks(), vec![1]);
        let p = t.encode_block(1);
        let mut u: Table<SegUsage> = Table::new(TableId::SegmentUsage, 600);
        u.decode_block(1, &p).unwrap();
        assert_eq!(u.get(300), t.get(300));
        assert!(u.decode_block(1, &p[..p.len() - 1]).is_err());
        assert!(u.decode_block(7, &p).is_err());
    }

    #[test]
    fn growth_dirties_only_new_blocks() {
        let mut t: Table<u64> = Table::new(TableId::NodeMap, 10);
        t.set_address(0, MetaBlock(5));
        t.grow(2000);
        assert_eq!(t.block_count(), 4);
        assert_eq!(t.dirty_blocks(), vec![0, 1, 2, 3]);
    }
}
