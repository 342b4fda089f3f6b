//! Finishing a mount that left the inode map on disk
//! ([`crate::meta_log::lazy_imap`]): the rest of the map is read in runs
//! with the lock released between them, then the orphans a writable open
//! finishes are finished. Operations meanwhile read the blocks they need.
//! With a budget for the map, each run is counted (free numbers, the
//! count in use, orphans, live bytes) and given back: the load ends with
//! the counts whole and no more of the map in memory than the budget.

use std::sync::atomic::Ordering;

use super::{Volume, lock};
use crate::error::Result;
use crate::meta_log::lazy_imap;
use crate::types::MetaBlock;

impl Volume {
    /// Reads whatever of the inode map the mount left on disk, without
    /// holding the lock while it reads, then finishes the orphans (on a
    /// writable volume) as the open would have. The server calls it on a
    /// thread of its own right after the mount; statfs and receive call it
    /// for the whole count. Returns at once when nothing is left.
    ///
    /// # Errors
    /// A block cannot be read or is not what the map says: the operations
    /// that need it fail the same way.
    pub fn finish_loading(&self) -> Result<()> {
        loop {
            let step = lock(&self.fs).log.unloaded_inode_runs(lazy_imap::RUN_BLOCKS);
            if step.is_empty() {
                break;
            }
            let addresses: Vec<MetaBlock> = step.iter().map(|s| s.1).collect();
            let raws = lazy_imap::read_blocks(self.meta.as_ref(), &addresses)?;
            let mut fs = lock(&self.fs);
            fs.log.accept_inode_blocks(&step, &raws)?;
            // With a budget, the blocks just counted go as they came: the
            // load counts the whole map without holding it.
            fs.log.trim_tables();
        }
        let _orphans = lock(&self.orphan_work);
        if !self.is_read_only() && self.orphans_pending.swap(false, Ordering::AcqRel) {
            let orphans = lock(&self.fs).log.ifile().orphans();
            for ino in &orphans {
                self.finish_orphan(*ino)?;
            }
            if !orphans.is_empty() {
                self.checkpoint()?;
            }
        }
        Ok(())
    }
}
