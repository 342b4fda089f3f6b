//! Inode lifecycle: birth with a data group, and death in bounded steps.

use super::Fs;
use crate::error::Result;
use crate::format::inode::{Body, InodeRecord};
use crate::meta_log::InodeGuard;
use crate::types::{FileKind, GroupNo, InodeNo, Timestamp};

/// Who a new inode belongs to and what it is.
#[derive(Clone, Copy, Debug)]
pub struct NewInode {
    /// What it is.
    pub kind: FileKind,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number (device nodes).
    pub rdev: u64,
}

impl Fs {
    /// An inode's record, read through the cache.
    ///
    /// # Errors
    /// `NotFound` when the inode is not in use; the record cannot be read.
    pub fn inode(&mut self, ino: InodeNo) -> Result<&InodeRecord> {
        self.log.inode(ino)
    }

    /// An inode's record to change; it goes out with the next partial segment.
    ///
    /// # Errors
    /// As [`Fs::inode`].
    pub fn inode_mut(&mut self, ino: InodeNo) -> Result<InodeGuard<'_>> {
        self.log.inode_mut(ino)
    }

    /// Whether `ino` is on the orphan list.
    #[must_use]
    pub fn is_orphan(&self, ino: InodeNo) -> bool {
        self.log.is_orphan(ino)
    }

    /// Puts `ino` on the orphan list or takes it off (a change record of
    /// the active partial segment).
    ///
    /// # Errors
    /// Its inode-map block cannot be read.
    pub fn set_orphan(&mut self, ino: InodeNo, orphan: bool) -> Result<()> {
        self.log.set_orphan(ino, orphan)
    }

    /// The data group a new directory in `parent` is bound to: the
    /// emptiest for one at the top of a tree, its parent's while that has
    /// room for one further down (a parent not there yet counts as the
    /// top, as a receive may meet it).
    ///
    /// # Errors
    /// A group table block cannot be read.
    pub(crate) fn bind_new_directory(&mut self, parent: InodeNo) -> Result<GroupNo> {
        // A tree's root is its own parent (and the volume's is made
        // before it exists to be read).
        let near = match self.log.inode(parent) {
            Ok(p) if parent != InodeNo::ROOT && p.parent != parent && p.parent != InodeNo(0) => Some(p.group),
            _ => None,
        };
        match near {
            Some(g) => self.log.space_mut().bind_subdirectory(g),
            None => self.log.space_mut().bind_directory(),
        }
    }

    /// Creates an inode in directory `parent` (not yet linked anywhere).
    /// A directory at the top of a tree is bound to the emptiest data
    /// group, one further down to its parent's while that has room
    /// ([`crate::data_space::DataSpace::bind_subdirectory`]); anything else
    /// takes its parent's group, so a directory's files lie together, and
    /// a tree's.
    ///
    /// # Errors
    /// The parent cannot be read.
    pub fn new_inode(&mut self, parent: InodeNo, new: NewInode, now: Timestamp) -> Result<InodeNo> {
        // Before anything changes: the number's map block may need a read.
        self.log.ready_free_inode()?;
        let (group, dir_parent) = if new.kind == FileKind::Directory {
            (self.bind_new_directory(parent)?, parent)
        } else {
            let group = self.log.inode(parent).map(|p| p.group).unwrap_or(GroupNo(0));
            (self.log.space().usable_group(group), InodeNo(0))
        };
        let rec = InodeRecord {
            mode: new.kind.mode_bits() | (new.perm & 0o7777),
            uid: new.uid,
            gid: new.gid,
            nlink: if new.kind == FileKind::Directory { 2 } else { 1 },
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: new.rdev,
            group,
            parent: dir_parent,
            ..InodeRecord::default()
        };
        let ino = self.log.create_inode(rec)?;
        self.intents.created(ino);
        Ok(ino)
    }

    /// One step of freeing an inode with no links and no references: data
    /// first (bounded), then its trees, blobs and attributes, then the inode.
    /// Returns whether the inode is gone.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn delete_step(&mut self, ino: InodeNo) -> Result<bool> {
        let rec = self.log.inode(ino)?;
        let kind = FileKind::from_mode(rec.mode);
        let group = rec.group;
        if kind == Some(FileKind::Regular) {
            self.discard_pages(ino);
            if !matches!(self.log.inode(ino)?.body, Body::Inline(_) | Body::Empty) {
                let (freed, done) = self.unmap_range(ino, 0, u64::MAX, super::file::TRUNCATE_STEP_EXTENTS)?;
                self.free_data(ino, &freed)?;
                if !done {
                    return Ok(false);
                }
            }
        }
        match self.log.inode(ino)?.body.clone() {
            Body::Blob { nodes, .. } => self.free_blob(&nodes),
            Body::Tree(t) => super::btree::destroy(&mut self.log.tree(ino), Some(t.root))?,
            _ => {}
        }
        self.xattr_destroy(ino)?;
        if kind == Some(FileKind::Directory) {
            self.log.space_mut().unbind_directory(group)?;
        }
        self.log.destroy_inode(ino)?;
        Ok(true)
    }
}
