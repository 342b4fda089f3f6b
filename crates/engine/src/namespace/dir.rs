//! Directories: a B-tree of entries ordered by the keyed hash of their names
//! (yFS §3.5). Lookup, insert and remove are O(log n); an entry's position is
//! its readdir cookie, which stays valid whatever else the directory gains or
//! loses.
//!
//! Entry value: `u64 ino, u8 type (DT_*), name`.

use super::Fs;
use super::btree;
use super::name::{COLLISION_SLOTS, FileName, hash_position};
use crate::error::{Error, Result};
use crate::format::codec::{Reader, Writer};
use crate::format::inode::{Body, TreeRoot};
use crate::format::node::TreeKind;
use crate::types::{FileKind, InodeNo, NodeId};

/// A directory entry.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    /// Its name.
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: InodeNo,
    /// What that inode is.
    pub kind: FileKind,
    /// Its position (readdir resumes after it with `position + 1`).
    pub position: u64,
}

fn encode(ino: InodeNo, kind: FileKind, name: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(9 + name.len());
    w.u64(ino.0).u8(kind.dirent_type()).bytes(name);
    w.into_inner()
}

fn decode(position: u64, v: &[u8], dir: InodeNo) -> Result<DirEntry> {
    let bad = || {
        Error::corrupt_meta(
            "directory entry",
            0,
            format!("malformed entry at position {position:#x} in directory {dir}"),
        )
    };
    let mut r = Reader::new(v);
    let ino = InodeNo(r.u64().map_err(|_| bad())?);
    let kind = FileKind::from_dirent_type(r.u8().map_err(|_| bad())?).ok_or_else(bad)?;
    let name = r.bytes(r.remaining()).map_err(|_| bad())?.to_vec();
    if ino.0 == 0 || name.is_empty() {
        return Err(bad());
    }
    Ok(DirEntry { name, ino, kind, position })
}

impl Fs {
    fn dir_tree(&mut self, dir: InodeNo) -> Result<Option<TreeRoot>> {
        let rec = self.log.inode(dir)?;
        if FileKind::from_mode(rec.mode) != Some(FileKind::Directory) {
            return Err(Error::NotDir);
        }
        match &rec.body {
            Body::Empty => Ok(None),
            Body::Tree(t) => Ok(Some(*t)),
            _ => Err(Error::corrupt_meta("inode", 0, format!("directory {dir} has a body that is not a tree"))),
        }
    }

    fn set_dir_tree(&mut self, dir: InodeNo, root: Option<NodeId>, count: u64) -> Result<()> {
        let mut rec = self.log.inode_mut(dir)?;
        rec.body = match root {
            Some(root) => Body::Tree(TreeRoot { root, count }),
            None => Body::Empty,
        };
        Ok(())
    }

    /// Finds `name` in `dir`.
    ///
    /// # Errors
    /// `NotDir`, or I/O and corruption errors.
    pub fn dir_lookup(&mut self, dir: InodeNo, name: &[u8]) -> Result<Option<DirEntry>> {
        let root = self.dir_tree(dir)?.map(|t| t.root);
        let base = hash_position(&self.log.sb.hash_key, name);
        let mut found = None;
        let mut bad = None;
        btree::scan(&mut self.log.tree(dir), root, base, &mut |k, v| {
            if k >= base + COLLISION_SLOTS {
                return false;
            }
            match decode(k, v, dir) {
                Ok(e) if e.name == name => {
                    found = Some(e);
                    false
                }
                Ok(_) => true,
                Err(e) => {
                    bad = Some(e);
                    false
                }
            }
        })?;
        match bad {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    /// Adds an entry; the caller checked that `name` is absent.
    ///
    /// # Errors
    /// `NoSpace` if 65536 names share a hash (never seen in practice), or I/O errors.
    pub fn dir_insert(&mut self, dir: InodeNo, name: &FileName, ino: InodeNo, kind: FileKind) -> Result<u64> {
        let tree = self.dir_tree(dir)?;
        let root = tree.map(|t| t.root);
        let base = hash_position(&self.log.sb.hash_key, name.as_bytes());
        // The first free slot among those of this hash.
        let mut slot = base;
        btree::scan(&mut self.log.tree(dir), root, base, &mut |k, _| {
            if k == slot && k < base + COLLISION_SLOTS - 1 {
                slot += 1;
                true
            } else {
                false
            }
        })?;
        if btree::get(&mut self.log.tree(dir), root, slot)?.is_some() {
            return Err(Error::NoSpace(crate::error::DeviceRole::Meta));
        }
        let (new_root, _) = btree::insert(
            &mut self.log.tree(dir),
            root,
            TreeKind::Directory,
            slot,
            encode(ino, kind, name.as_bytes()),
        )?;
        self.set_dir_tree(dir, Some(new_root), tree.map_or(0, |t| t.count) + 1)?;
        Ok(slot)
    }

    /// Points an existing entry at another inode (rename over a name).
    ///
    /// # Errors
    /// I/O errors.
    pub fn dir_replace(&mut self, dir: InodeNo, entry: &DirEntry, ino: InodeNo, kind: FileKind) -> Result<()> {
        let tree = self.dir_tree(dir)?.ok_or(Error::NotFound)?;
        let (root, _) = btree::insert(
            &mut self.log.tree(dir),
            Some(tree.root),
            TreeKind::Directory,
            entry.position,
            encode(ino, kind, &entry.name),
        )?;
        self.set_dir_tree(dir, Some(root), tree.count)
    }

    /// Removes the entry at `position`.
    ///
    /// # Errors
    /// `NotFound` if there is none; I/O errors.
    pub fn dir_remove(&mut self, dir: InodeNo, position: u64) -> Result<()> {
        let tree = self.dir_tree(dir)?.ok_or(Error::NotFound)?;
        let (root, old) = btree::remove(&mut self.log.tree(dir), Some(tree.root), position)?;
        if old.is_none() {
            return Err(Error::NotFound);
        }
        self.set_dir_tree(dir, root, tree.count.saturating_sub(1))
    }

    /// Whether `dir` has no entries.
    ///
    /// # Errors
    /// `NotDir`, I/O errors.
    pub fn dir_is_empty(&mut self, dir: InodeNo) -> Result<bool> {
        Ok(self.dir_tree(dir)?.is_none())
    }

    /// Number of entries in `dir`.
    ///
    /// # Errors
    /// `NotDir`, I/O errors.
    pub fn dir_count(&mut self, dir: InodeNo) -> Result<u64> {
        Ok(self.dir_tree(dir)?.map_or(0, |t| t.count))
    }

    /// Visits entries at positions `>= from` in order until `visit` returns false.
    ///
    /// # Errors
    /// `NotDir`, I/O and corruption errors.
    pub fn dir_scan(&mut self, dir: InodeNo, from: u64, visit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let root = self.dir_tree(dir)?.map(|t| t.root);
        let mut bad = None;
        btree::scan(&mut self.log.tree(dir), root, from, &mut |k, v| match decode(k, v, dir) {
            Ok(e) => visit(e),
            Err(e) => {
                bad = Some(e);
                false
            }
        })?;
        bad.map_or(Ok(()), Err)
    }
}
