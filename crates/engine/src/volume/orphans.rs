//! References held on inodes from outside (kernel lookups, open files) and
//! the orphan list: an inode that lost its last link lives until its last
//! reference goes, and what a crash interrupted is finished after it.

use super::{Volume, lock};
use crate::error::Result;
use crate::meta_log::segments::OpKind;
use crate::types::InodeNo;

impl Volume {
    /// Takes `n` references to `ino` (kernel lookups, open files).
    pub fn remember(&self, ino: InodeNo, n: u64) {
        lock(&self.fs).take_refs(ino, n);
    }

    /// The references to `ino` taken and not yet dropped: whether the
    /// kernel holds the inode (the FUSE adapter counts its lookups).
    #[must_use]
    pub fn references(&self, ino: InodeNo) -> u64 {
        lock(&self.fs).refs(ino)
    }

    /// Drops `n` references; an inode with no links goes when the last one does.
    ///
    /// # Errors
    /// Freeing the inode fails.
    pub fn forget(&self, ino: InodeNo, n: u64) -> Result<()> {
        let dead = {
            let mut fs = lock(&self.fs);
            let left = fs.drop_refs(ino, n);
            // An inode without links is an orphan (I4), so only an orphan's
            // record is read here: the kernel forgets inodes by the million
            // when it trims its caches, and reading each one's record would
            // fill the meta-data cache past its limit and read the device
            // with the lock held.
            left == 0 && fs.is_orphan(ino) && fs.inode(ino).is_ok_and(|r| r.nlink == 0)
        };
        // A read-only volume leaves it on the orphan list, where it went
        // when its last name did: the next writable open frees it.
        if dead && !self.is_read_only() {
            self.delete_inode(ino)?;
        }
        Ok(())
    }

    /// Frees an unlinked, unreferenced inode in bounded steps. If it takes
    /// more than one, the inode goes on the orphan list first, so that
    /// recovery finishes the job after a crash.
    pub(super) fn delete_inode(&self, ino: InodeNo) -> Result<()> {
        let mut first = true;
        loop {
            let done = self.mutate(OpKind::Shrink, |fs, _| {
                let done = fs.delete_step(ino)?;
                if !done && first && !fs.is_orphan(ino) {
                    fs.set_orphan(ino, true)?;
                }
                Ok(done)
            })?;
            first = false;
            if done {
                return Ok(());
            }
        }
    }

    /// Finishes what a crash interrupted for an inode on the orphan list:
    /// frees it if it has no links, or trims it to its size.
    pub(super) fn finish_orphan(&self, ino: InodeNo) -> Result<()> {
        let nlink = lock(&self.fs).inode(ino).map(|r| r.nlink)?;
        if nlink == 0 {
            return self.delete_inode(ino);
        }
        loop {
            let done = self.mutate(OpKind::Shrink, |fs, _| {
                let size = fs.inode(ino)?.size;
                let done = fs.truncate_step(ino, size)?;
                if done {
                    fs.set_orphan(ino, false)?;
                }
                Ok(done)
            })?;
            if done {
                return Ok(());
            }
        }
    }

    /// Drops one link of `ino` (the caller removed a name): frees it, or puts
    /// it on the orphan list while it is still referenced.
    pub(super) fn drop_link(&self, ino: InodeNo) -> Result<()> {
        let free_now = self.mutate(OpKind::Shrink, |fs, _| {
            let rec = fs.inode(ino)?;
            if rec.nlink > 0 {
                return Ok(false);
            }
            if fs.refs(ino) > 0 {
                fs.set_orphan(ino, true)?;
                return Ok(false);
            }
            Ok(true)
        })?;
        if free_now { self.delete_inode(ino) } else { Ok(()) }
    }

    /// Frees or trims every inode on the orphan list (what a writable open
    /// does after roll-forward), for repair.
    ///
    /// # Errors
    /// A device fails, or an orphan cannot be read.
    pub(crate) fn finish_orphans(&self) -> Result<()> {
        let orphans = lock(&self.fs).log.ifile().orphans();
        for ino in orphans {
            self.finish_orphan(ino)?;
        }
        Ok(())
    }
}
