//! Loading the data bitmap lazily, a group at a time (a mount reads only
//! where each bitmap block lives; DESIGN.md, "A mount reads no data
//! bitmap").

use std::sync::Arc;

use super::DataSpace;
use crate::error::{Error, Result};
use crate::table::TableSource;
use crate::types::{DataBlock, GroupNo};

impl DataSpace {
    /// Whether the whole bitmap is in memory.
    #[must_use]
    pub fn fully_loaded(&self) -> bool {
        self.ready.is_empty()
    }

    /// Leaves the bitmap on disk, to be read a group at a time when the
    /// allocator first needs it (mount): the group descriptors' free counts
    /// stand for it meanwhile, and their sum is what the checkpoint says is
    /// free. Each group's count is checked against its bitmap when the
    /// bitmap is read ([`DataSpace::load_group`]).
    ///
    /// # Errors
    /// A group claims more free blocks than it has, or the counts do not add
    /// up to `free_blocks` (what the checkpoint recorded).
    pub fn load_lazily(&mut self, source: Arc<dyn TableSource>, free_blocks: u64) -> Result<()> {
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
        self.bitmap.set_all_unloaded();
        self.ready = vec![false; self.groups.len()];
        self.source = Some(source);
        self.free = free;
        Ok(())
    }

    /// Reads the bitmap blocks of group `g` if they are not in memory yet,
    /// and checks the group's free count against them.
    ///
    /// # Errors
    /// A block cannot be read or does not decode, or the count disagrees
    /// with the bitmap (damage: the checkpoint wrote both at once).
    pub fn load_group(&mut self, g: GroupNo) -> Result<()> {
        if self.ready.get(g.0 as usize).is_none_or(|r| *r) {
            return Ok(());
        }
        let Some(source) = self.source.clone() else { return Ok(()) };
        let (start, end) = self.group_range(g);
        let per = (self.bitmap.per_block() * 64) as u64;
        for b in start / per..=(end - 1) / per {
            self.bitmap.load_block(b as u32, source.as_ref())?;
        }
        let n = self.count_free(start, end);
        let said = u64::from(self.groups.get(g.0 as usize).free_blocks);
        if n != said {
            return Err(Error::corrupt_meta(
                "data-group descriptor table",
                self.bitmap.address((start / per) as u32).0,
                format!("group {} says {said} free blocks, its bitmap {n}", g.0),
            ));
        }
        self.ready[g.0 as usize] = true;
        if self.ready.iter().all(|r| *r) {
            self.ready = Vec::new();
            self.source = None;
        }
        Ok(())
    }

    /// Loads the groups `[start, start + len)` touches (clipped to the device).
    ///
    /// # Errors
    /// As [`DataSpace::load_group`].
    pub fn load_range(&mut self, start: DataBlock, len: u32) -> Result<()> {
        if self.ready.is_empty() || self.total == 0 {
            return Ok(());
        }
        let first = self.group_of(DataBlock(start.0.min(self.total - 1))).0;
        let last = self.group_of(DataBlock(start.0.saturating_add(u64::from(len).max(1) - 1).min(self.total - 1))).0;
        for g in first..=last {
            self.load_group(GroupNo(g))?;
        }
        Ok(())
    }

    /// Loads the whole bitmap (fsck, repair, and a cleaner or checkpoint
    /// that must write a block of it).
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
}
