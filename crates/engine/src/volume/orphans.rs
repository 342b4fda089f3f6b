//! References held on inodes from outside (kernel lookups, open files) and
//! the orphan list: an inode that lost its last link, or an unnamed
//! O_TMPFILE file, lives until its last reference goes, and what a crash
//! interrupted is finished after it.

use super::{Attr, Creds, Volume, flags, lock};
use crate::error::{Error, Result};
use crate::format::inode::FLAG_PROJINHERIT;
use crate::meta_log::segments::OpKind;
use crate::namespace::inode::NewInode;
use crate::types::{FileKind, InodeNo};

/// The set-group-id bit: a directory with it hands its group on.
const S_ISGID: u32 = 0o2000;

impl Volume {
    /// Creates an unnamed regular file in directory `parent` (O_TMPFILE):
    /// no link, an orphan from birth in the same step (I4), so that it is
    /// freed when its last reference goes and by recovery after a crash;
    /// [`Volume::link`] names it and takes it off the orphan list. The
    /// directory is not changed. The new inode is remembered once.
    ///
    /// # Errors
    /// `NotDir`, `NotFound` for a removed directory, `NotPermitted` for an
    /// immutable one, no space.
    pub fn tmpfile(&self, parent: InodeNo, perm: u32, creds: Creds) -> Result<Attr> {
        self.prefetch(|fs| fs.inode(parent).map(|_| ()));
        let attr = self.mutate(OpKind::Grow, |fs, now| {
            if Volume::kind_of(fs, parent)? != FileKind::Directory {
                return Err(Error::NotDir);
            }
            let p = fs.inode(parent)?;
            if p.nlink == 0 {
                return Err(Error::NotFound);
            }
            flags::immutable(p.flags)?;
            let (parent_flags, parent_project) = (p.flags, p.project);
            let gid = if p.mode & S_ISGID != 0 { p.gid } else { creds.gid };
            let kind = FileKind::Regular;
            let inherited = fs.acl_inherit(parent, kind, perm, creds.umask)?;
            let project = if parent_flags & FLAG_PROJINHERIT != 0 { parent_project } else { 0 };
            let one = crate::namespace::quota::Adding { blocks: 0, inodes: 1 };
            fs.quota_allows(crate::namespace::quota::ids_of(creds.uid, gid, project), one, now)?;
            let ino =
                fs.new_inode(parent, NewInode { kind, perm: inherited.perm, uid: creds.uid, gid, rdev: 0 }, now)?;
            let mut rec = fs.inode_mut(ino)?;
            rec.nlink = 0;
            rec.flags = flags::inherited(parent_flags, kind);
            if parent_flags & FLAG_PROJINHERIT != 0 {
                rec.project = parent_project;
            }
            drop(rec);
            if !crate::faults::active(crate::faults::Fault::TmpfileNotOrphan) {
                fs.set_orphan(ino, true)?;
            }
            fs.acl_store_inherited(ino, &inherited)?;
            Volume::attr(fs, ino)
        })?;
        self.remember(attr.ino, 1);
        Ok(attr)
    }

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
