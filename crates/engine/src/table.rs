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

/// An IFile table, stored block by block: a block's entries are one
/// allocation, so that a block left on disk, or given back once clean
/// ([`Table::evict`]), costs no memory but its address.
#[derive(Debug, Clone)]
pub struct Table<E: Entry> {
    id: TableId,
    len: usize,
    /// Each block's entries (`per_block` of them; past `len` in the last
    /// block, defaults), `None` while the block is on disk only: not read
    /// yet (a table loaded lazily) or given back. Touching an entry of such
    /// a block is a bug, asserted: the caller reads it first.
    blocks: Vec<Option<Box<[E]>>>,
    dirty: BTreeSet<u32>,
    /// Durable location of each block; `MetaBlock(0)` for blocks never written.
    addresses: Vec<MetaBlock>,
    unloaded_count: usize,
}

impl<E: Entry> Table<E> {
    /// A table of `len` default entries, all of them dirty.
    #[must_use]
    pub fn new(id: TableId, len: usize) -> Table<E> {
        let mut t =
            Table { id, len: 0, blocks: Vec::new(), dirty: BTreeSet::new(), addresses: Vec::new(), unloaded_count: 0 };
        t.grow(len);
        t
    }

    fn fresh_block(&self) -> Box<[E]> {
        E::defaults(self.per_block()).into_boxed_slice()
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
        self.blocks.len()
    }

    /// Entries of block `b` (those within the table's length).
    ///
    /// # Panics
    /// The block is not in memory.
    #[must_use]
    pub fn block_entries(&self, b: u32) -> &[E] {
        let start = b as usize * self.per_block();
        let n = self.per_block().min(self.len - start);
        &self.loaded_block(b, start)[..n]
    }

    fn loaded_block(&self, b: u32, i: usize) -> &[E] {
        match self.blocks.get(b as usize) {
            Some(Some(block)) => block,
            Some(None) => panic!("entry {i} of the {} used before its block {b} was loaded", self.id.name()),
            None => panic!("entry {i} of the {} is past its {} entries", self.id.name(), self.len),
        }
    }

    fn loaded_block_mut(&mut self, i: usize) -> &mut E {
        assert!(i < self.len, "entry {i} of the {} is past its {} entries", self.id.name(), self.len);
        let (b, at) = (i / self.per_block(), i % self.per_block());
        let name = self.id.name();
        match &mut self.blocks[b] {
            Some(block) => &mut block[at],
            None => panic!("entry {i} of the {name} used before its block {b} was loaded"),
        }
    }

    /// Entry `i`.
    ///
    /// # Panics
    /// Out of range (callers index with numbers the table handed out), or
    /// its block is not in memory.
    #[must_use]
    pub fn get(&self, i: usize) -> E {
        assert!(i < self.len, "entry {i} of the {} is past its {} entries", self.id.name(), self.len);
        let per = self.per_block();
        self.loaded_block((i / per) as u32, i)[i % per]
    }

    /// All entries, in order.
    ///
    /// # Panics
    /// Some block is not in memory.
    pub fn entries(&self) -> impl Iterator<Item = E> + '_ {
        assert!(
            self.unloaded_count == 0,
            "the whole {} was read while {} blocks are not loaded",
            self.id.name(),
            self.unloaded_count
        );
        (0..self.blocks.len() as u32).flat_map(|b| self.block_entries(b).iter().copied())
    }

    /// Replaces entry `i` and marks its block dirty.
    pub fn set(&mut self, i: usize, e: E) {
        *self.loaded_block_mut(i) = e;
        self.dirty.insert((i / self.per_block()) as u32);
    }

    /// Modifies entry `i` in place and marks its block dirty.
    pub fn update(&mut self, i: usize, f: impl FnOnce(&mut E)) {
        f(self.loaded_block_mut(i));
        self.dirty.insert((i / self.per_block()) as u32);
    }

    /// Marks every block as not read yet (its address is known): a table
    /// loaded lazily, block by block, through [`Table::load_block`].
    pub fn set_all_unloaded(&mut self) {
        for b in &mut self.blocks {
            *b = None;
        }
        self.unloaded_count = self.blocks.len();
    }

    /// As [`Table::set_all_unloaded`], but block `keep`, already read.
    pub fn set_all_unloaded_but(&mut self, keep: u32) {
        let kept = self.blocks.get_mut(keep as usize).and_then(Option::take);
        self.set_all_unloaded();
        if let Some(block) = kept {
            self.blocks[keep as usize] = Some(block);
            self.unloaded_count -= 1;
        }
    }

    /// Whether block `b`'s entries are in memory.
    #[must_use]
    pub fn is_loaded(&self, b: u32) -> bool {
        self.blocks.get(b as usize).is_none_or(Option::is_some)
    }

    /// Blocks not in memory.
    #[must_use]
    pub fn unloaded_blocks(&self) -> usize {
        self.unloaded_count
    }

    /// Blocks in memory.
    #[must_use]
    pub fn loaded_blocks(&self) -> usize {
        self.blocks.len() - self.unloaded_count
    }

    /// Whether block `b` may be given back ([`Table::evict`]): in memory,
    /// unchanged since the last checkpoint, and with a durable copy to read
    /// it again from.
    #[must_use]
    pub fn is_evictable(&self, b: u32) -> bool {
        self.blocks.get(b as usize).is_some_and(Option::is_some)
            && !self.dirty.contains(&b)
            && self.addresses[b as usize].0 != 0
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
        self.blocks[b as usize] = None;
        self.unloaded_count += 1;
    }

    /// Gives back block `b` whatever its state, dirty or not, and forgets
    /// that it changed: what the broken rule [`crate::faults::Fault::EvictDirtyMapBlocks`]
    /// does (its changes are lost).
    #[cfg(feature = "fault-injection")]
    pub fn evict_even_dirty(&mut self, b: u32) {
        if self.blocks[b as usize].take().is_some() {
            self.unloaded_count += 1;
        }
        self.dirty.remove(&b);
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

    /// Grows the table to `len` default entries; the blocks added, and a
    /// last block they fill, are dirty. (Owners grow a table only where its
    /// last block is in memory: it is never given back.)
    pub fn grow(&mut self, len: usize) {
        self.grow_blocks(len, true);
    }

    /// As [`Table::grow`], but the blocks added are on disk, not in memory
    /// (a mount that leaves a large inode map on disk): allocating them only
    /// to drop them would touch 160 MiB at ten million inodes, 140 ms of a
    /// cold mount's 230.
    pub fn grow_on_disk(&mut self, len: usize) {
        self.grow_blocks(len, false);
    }

    fn grow_blocks(&mut self, len: usize, in_memory: bool) {
        if len <= self.len {
            return;
        }
        let per = self.per_block();
        if !self.len.is_multiple_of(per) {
            self.dirty.insert(self.blocks.len() as u32 - 1);
        }
        self.len = len;
        while self.blocks.len() < len.div_ceil(per) {
            self.dirty.insert(self.blocks.len() as u32);
            if in_memory {
                let block = self.fresh_block();
                self.blocks.push(Some(block));
            } else {
                self.blocks.push(None);
                self.unloaded_count += 1;
            }
        }
        self.addresses.resize(self.blocks.len(), MetaBlock(0));
    }

    /// Cuts the table to its first `len` entries (a shrink of the log).
    /// Its last block is rewritten, so that the index block listing it is
    /// rewritten too, without the blocks cut off.
    pub fn truncate(&mut self, len: usize) {
        assert!(len > 0 && len <= self.len, "cutting {} entries to {len}", self.len);
        let per = self.per_block();
        let blocks = len.div_ceil(per);
        for b in self.blocks.drain(blocks..) {
            if b.is_none() {
                self.unloaded_count -= 1;
            }
        }
        self.len = len;
        let last = &mut self.blocks[blocks - 1];
        let last = last.as_mut().unwrap_or_else(|| panic!("cutting the {} in a block not loaded", self.id.name()));
        // The entries cut off read as defaults if the table grows again.
        for e in &mut last[len - (blocks - 1) * per..] {
            *e = E::default();
        }
        self.addresses.truncate(blocks);
        self.dirty.retain(|&b| (b as usize) < blocks);
        self.dirty.insert(blocks as u32 - 1);
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
    /// `other` is taken, not copied: at ten million inodes its map is
    /// 160 MiB.
    ///
    /// # Panics
    /// `other` is not all in memory. (A block of this table not in memory
    /// is compared by address: both trees name one durable block only if
    /// they share it, which snapshots keep from being overwritten.)
    pub fn adopt(&mut self, other: Table<E>) {
        assert!(other.unloaded_count == 0, "adopting a table not all read");
        let old = std::mem::replace(self, other);
        self.dirty = BTreeSet::new();
        for b in 0..self.block_count() as u32 {
            let i = b as usize;
            let clean = i < old.block_count() && !old.dirty.contains(&b) && old.addresses[i].0 != 0;
            let same = clean
                && if old.is_loaded(b) {
                    old.encode_block(b) == self.encode_block(b)
                } else {
                    old.addresses[i] == self.addresses[i]
                };
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
        assert!(self.is_loaded(b), "block {b} of the {} written before it was loaded", self.id.name());
        let entries = self.block_entries(b);
        let mut w = Writer::with_capacity(entries.len() * self.id.entry_len());
        for e in entries {
            e.encode(&mut w);
        }
        w.into_inner()
    }

    /// Loads block `b` from its payload (at mount).
    ///
    /// # Errors
    /// The payload's length disagrees with the table's, or an entry is malformed.
    pub fn decode_block(&mut self, b: u32, payload: &[u8]) -> DecodeResult<()> {
        let block = self.decode_detached(b, payload)?;
        if self.blocks[b as usize].replace(block).is_none() {
            self.unloaded_count -= 1;
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
        let mut block = self.fresh_block();
        let mut r = Reader::new(payload);
        for e in &mut block[..n] {
            *e = E::decode(&mut r)?;
        }
        Ok(block)
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

    /// A table of three written blocks, all clean.
    fn written(len: usize) -> Table<ImapEntry> {
        let mut t: Table<ImapEntry> = Table::new(TableId::InodeMap, len);
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
        let mut t: Table<u64> = Table::new(TableId::NodeMap, 20);
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
    fn a_table_grown_on_disk_holds_only_the_blocks_decoded() {
        let per = TableId::InodeMap.per_block();
        let full = written(3 * per);
        let mut t: Table<ImapEntry> = Table::new(TableId::InodeMap, 1);
        t.grow_on_disk(3 * per);
        assert_eq!((t.block_count(), t.loaded_blocks()), (3, 1), "block 0 was there before");
        t.decode_block(2, &full.encode_block(2)).unwrap();
        assert_eq!(t.loaded_blocks(), 2);
        assert_eq!(t.get(2 * per + 1).generation, 2 * per as u32 + 1);
        assert!(!t.is_loaded(1));
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
