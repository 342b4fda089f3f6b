//! The view of a table the checkpoint writer and the loader take, whatever
//! its entry type.

use super::{Entry, Table, TableSource};
use crate::error::Result;
use crate::format::codec::DecodeResult;
use crate::format::ifile::TableId;
use crate::types::MetaBlock;

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
