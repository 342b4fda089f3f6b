//! Loading the group table and the data bitmap lazily, a group at a time
//! (a mount reads neither; DESIGN.md, "IFile").

use std::sync::Arc;

use super::DataSpace;
use crate::error::{Error, Result};
use crate::table::TableSource;
use crate::types::{DataBlock, GroupNo};

impl DataSpace {
    /// Whether the whole bitmap is at hand.
    #[must_use]
    pub fn fully_loaded(&self) -> bool {
        self.source.is_none() || self.unready == 0
    }

    /// Stops reading and giving back groups: everything is at hand and
    /// stays (a resize or a tree switch changes the tables under it).
    ///
    /// # Panics
    /// Some group is not loaded.
    pub(super) fn settle(&mut self) {
        assert!(self.fully_loaded(), "the data space settled with {} groups not read", self.unready);
        self.source = None;
        self.ready = Vec::new();
        self.unready = 0;
    }

    /// Leaves the bitmap on disk, to be read a group at a time when the
    /// allocator first needs it (mount), and the free count is what the
    /// checkpoint recorded. A table not sparse has its group table in
    /// memory: the groups' free counts, which stand for the bitmap
    /// meanwhile, must each fit their group and add up to `free_blocks`.
    /// A sparse one leaves its group table on disk too: a group's count is
    /// checked against its bitmap when read ([`DataSpace::load_group`]),
    /// and fsck checks their sum.
    ///
    /// # Errors
    /// A group claims more free blocks than it has, or the counts do not add
    /// up to `free_blocks` (what the checkpoint recorded).
    pub fn load_lazily(&mut self, source: Arc<dyn TableSource>, free_blocks: u64) -> Result<()> {
        if !self.groups.is_sparse() {
            let mut free = 0u64;
            for g in 0..self.groups.len() {
                let (start, end) = self.group_range(GroupNo(g as u32));
                let n = u64::from(self.groups.get(g).free_blocks);
                if n > end - start {
                    return Err(Error::corrupt_meta(
                        "data-group descriptor table",
                        0,
                        format!("group {g} says {n} free blocks, it has {}", end - start),
                    ));
                }
                free += n;
            }
            if free != free_blocks {
                return Err(Error::corrupt_meta(
                    "checkpoint",
                    0,
                    format!("the data groups say {free} free blocks, the checkpoint recorded {free_blocks}"),
                ));
            }
        }
        if free_blocks > self.total {
            return Err(Error::corrupt_meta(
                "checkpoint",
                0,
                format!("{free_blocks} free data blocks on a device of {}", self.total),
            ));
        }
        self.bitmap.set_all_unloaded();
        self.ready = Vec::new();
        self.unready = self.groups.len() as u64;
        self.source = Some(source);
        self.free = free_blocks;
        Ok(())
    }

    fn is_ready(&self, g: GroupNo) -> bool {
        self.source.is_none() || self.ready.get(g.0 as usize / 64).is_some_and(|w| w >> (g.0 % 64) & 1 != 0)
    }

    fn set_ready(&mut self, g: u32, ready: bool) {
        let w = g as usize / 64;
        if self.ready.len() <= w {
            self.ready.resize(w + 1, 0);
        }
        if ready {
            self.ready[w] |= 1 << (g % 64);
        } else {
            self.ready[w] &= !(1 << (g % 64));
        }
    }

    /// Reads group `g`'s descriptor if it is not at hand.
    ///
    /// # Errors
    /// Its block cannot be read or does not decode.
    pub(super) fn load_desc(&mut self, g: GroupNo) -> Result<()> {
        let b = (g.0 as usize / self.groups.per_block()) as u32;
        if self.groups.is_loaded(b) {
            return Ok(());
        }
        let Some(source) = self.source.clone() else { return Ok(()) };
        self.groups.load_block(b, source.as_ref())
    }

    /// Reads the descriptor and the bitmap blocks of group `g` if they are
    /// not at hand yet, and checks the group's free count against them.
    ///
    /// # Errors
    /// A block cannot be read or does not decode, or the count disagrees
    /// with the bitmap (damage: the checkpoint wrote both at once), or
    /// claims more than the group has.
    pub fn load_group(&mut self, g: GroupNo) -> Result<()> {
        if self.is_ready(g) || g.0 as usize >= self.groups.len() {
            return Ok(());
        }
        let Some(source) = self.source.clone() else { return Ok(()) };
        self.load_desc(g)?;
        let (start, end) = self.group_range(g);
        let per = (self.bitmap.per_block() * 64) as u64;
        for b in start / per..=(end - 1) / per {
            self.bitmap.load_block(b as u32, source.as_ref())?;
            self.load_held(b as u32)?;
        }
        let n = self.count_free(start, end);
        let said = u64::from(self.groups.get(g.0 as usize).free_blocks);
        if n != said {
            let at = self.bitmap.address((start / per) as u32).0;
            return Err(Error::corrupt_meta(
                "data-group descriptor table",
                at,
                format!("group {} says {said} free blocks, its bitmap {n}", g.0),
            ));
        }
        // The source stays once every group is read: a group given back
        // ([`DataSpace::evict_groups`]) is read again through it.
        self.set_ready(g.0, true);
        self.unready -= 1;
        Ok(())
    }

    /// Loads the groups `[start, start + len)` touches (clipped to the device).
    ///
    /// # Errors
    /// As [`DataSpace::load_group`].
    pub fn load_range(&mut self, start: DataBlock, len: u32) -> Result<()> {
        if self.source.is_none() || self.total == 0 {
            return Ok(());
        }
        let first = self.group_of(DataBlock(start.0.min(self.total - 1))).0;
        let last = self.group_of(DataBlock(start.0.saturating_add(u64::from(len).max(1) - 1).min(self.total - 1))).0;
        for g in first..=last {
            self.load_group(GroupNo(g))?;
        }
        Ok(())
    }

    /// Loads the whole group table and bitmap (fsck, repair, a resize,
    /// snapshots).
    ///
    /// # Errors
    /// As [`DataSpace::load_group`].
    pub fn load_all(&mut self) -> Result<()> {
        for g in 0..self.groups.len() {
            self.load_group(GroupNo(g as u32))?;
        }
        Ok(())
    }

    /// Loads the groups covered by bitmap block `b` (the cleaner moving it).
    ///
    /// # Errors
    /// As [`DataSpace::load_group`].
    pub fn load_bitmap_block(&mut self, b: u32) -> Result<()> {
        let per = (self.bitmap.per_block() * 64) as u64;
        let start = u64::from(b) * per;
        if start >= self.total {
            return Ok(());
        }
        self.load_range(DataBlock(start), per.min(self.total - start) as u32)
    }

    /// Loads group-table block `b` (the cleaner moving it).
    ///
    /// # Errors
    /// As [`DataSpace::load_group`].
    pub fn load_group_block(&mut self, b: u32) -> Result<()> {
        let first = b as usize * self.groups.per_block();
        if first < self.groups.len() {
            self.load_desc(GroupNo(first as u32))?;
        }
        Ok(())
    }

    /// Index chunks of the group table and bitmap whose index block the
    /// mount left on disk (none once everything was read).
    #[must_use]
    pub fn chunks_on_disk(&self) -> usize {
        self.groups.chunks_on_disk().len() + self.bitmap.chunks_on_disk().len()
    }

    /// Group-table and bitmap blocks in memory.
    #[must_use]
    pub fn blocks_in_memory(&self) -> usize {
        self.groups.loaded_blocks() + self.bitmap.loaded_blocks()
    }

    /// Gives back clean bitmap blocks, then clean group-table blocks none
    /// of whose groups is at hand, sweeping round the device, until at
    /// most `keep` blocks of both are in memory. A bitmap block given back
    /// takes every group it covers out of reach until [`DataSpace::load_group`]
    /// reads it again (and checks its count again: the block was clean, so
    /// what it reads is what was in memory). Never given back: blocks
    /// changed since the last checkpoint (the caller makes sure that
    /// checkpoint is written), and the bitmap under a free waiting to be
    /// durable ([`DataSpace::release`] needs no device). Only a space
    /// loaded lazily gives anything back (it has a source to read from).
    /// Returns the blocks given back.
    pub fn evict_groups(&mut self, keep: usize, source: Arc<dyn TableSource>) -> usize {
        if self.source.is_none() || self.total == 0 {
            return 0;
        }
        self.source = Some(source);
        let broken = crate::faults::active(crate::faults::Fault::EvictDirtyBitmapBlocks);
        let per = (self.bitmap.per_block() * 64) as u64;
        let count = self.bitmap.block_count();
        let mut evicted = 0;
        for _ in 0..count {
            if self.blocks_in_memory() <= keep {
                break;
            }
            let b = self.bitmap_hand % count;
            self.bitmap_hand = (b + 1) % count;
            let (start, end) = (b as u64 * per, ((b as u64 + 1) * per).min(self.total));
            if start >= end {
                continue;
            }
            // A free waiting to be durable keeps its groups whole (bitmap
            // and descriptor): its release changes both without reading.
            let (g0, g1) = (self.group_of(DataBlock(start)).0, self.group_of(DataBlock(end - 1)).0);
            let (from, to) = (self.group_range(GroupNo(g0)).0, self.group_range(GroupNo(g1)).1);
            if self.pending_ranges.range(..to).next_back().is_some_and(|(_, &e)| e > from) {
                continue;
            }
            if broken && self.bitmap.is_in_memory(b as u32) && self.bitmap.address(b as u32).0 != 0 {
                // The broken rule: a block changed since the checkpoint
                // goes too, and its changes with it.
                #[cfg(feature = "fault-injection")]
                self.bitmap.evict_even_dirty(b as u32);
            } else if self.bitmap.is_evictable(b as u32) {
                self.bitmap.evict(b as u32);
            } else {
                continue;
            }
            evicted += 1;
            self.forget_held(b as u32);
            for g in g0..=g1 {
                if self.is_ready(GroupNo(g)) {
                    self.set_ready(g, false);
                    self.unready += 1;
                }
                // The group was not allocated in lately: where its last
                // allocation ended goes too, so that what is remembered
                // of the groups stays within the budget (a new file there
                // then starts at the group's first free block).
                self.cursor.remove(&g);
            }
        }
        let per_desc = self.groups.per_block();
        for d in 0..self.groups.block_count() {
            if self.blocks_in_memory() <= keep {
                break;
            }
            let (g0, g1) = (d * per_desc, ((d + 1) * per_desc).min(self.groups.len()));
            if self.groups.is_evictable(d as u32) && (g0..g1).all(|g| !self.is_ready(GroupNo(g as u32))) {
                self.groups.evict(d as u32);
                evicted += 1;
            }
        }
        evicted
    }
}
