//! A table's layout in chunks: index blocks read on demand, the blocks a
//! chunk names, what a cut or another tree's table changes of them.

use std::collections::BTreeSet;

use super::{CHUNK_BLOCKS, Chunk, Entry, Slot, Table, TableSource, split};
use crate::error::Result;
use crate::format::codec::{DecodeResult, bad};
use crate::types::MetaBlock;

impl<E: Entry> Table<E> {
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
            }
            // In memory either way: a block never written here that takes
            // the other tree's address (same entries, defaults) would
            // otherwise read as on disk, and the table is whole.
            if !self.is_in_memory(b) {
                let _ = self.block_mut(b);
            }
            self.chunk_mut(c).addresses[k] = theirs;
        }
        // The outgoing tree's blocks past the incoming table's end are no
        // table's now: the next checkpoint takes them from their segments'
        // counts, as it takes a cut's.
        for b in self.block_count()..old.block_count() {
            let theirs = old.address(b as u32);
            if theirs.0 != 0 {
                self.cut.push(theirs);
            }
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

    /// Durable addresses of the blocks cut off since the last checkpoint.
    #[must_use]
    pub fn cut_addresses(&self) -> &[MetaBlock] {
        &self.cut
    }

    /// A checkpoint no longer naming the blocks cut off is durable.
    pub fn forget_cut(&mut self) {
        self.cut.clear();
    }

    /// Chunks whose addresses are in memory, and the slots kept for the
    /// chunks before the last one not unwritten (what the table costs
    /// besides its blocks).
    #[must_use]
    pub fn chunks_in_memory(&self) -> (usize, usize) {
        (self.chunks.iter().filter(|s| matches!(s, Slot::Loaded(_))).count(), self.chunks.len())
    }
}
