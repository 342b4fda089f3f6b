//! Directories: entries ordered by the keyed hash of their names (yFS §3.5),
//! kept in the inode while they fit its inline limit and in a B-tree after. Lookup, insert and remove are O(log n); an entry's position is
//! its readdir cookie, which stays valid whatever else the directory gains or
//! loses.
//!
//! Entry value: `u64 ino, u8 type (DT_*), name`.

use super::Fs;
use super::btree;
use crate::error::{Error, Result};
use crate::format::codec::{Reader, Writer};
use crate::format::inode::{Body, TreeRoot, inline_entries_len};
use crate::format::name::{COLLISION_SLOTS, FileName, hash_position};
use crate::format::node::{Entries, Node, TreeKind};
use crate::meta_log::Object;
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

/// Where a directory's entries are.
enum Form {
    /// No entries.
    Empty,
    /// In the inode.
    Inline(Vec<(u64, Vec<u8>)>),
    /// In a B-tree.
    Tree(TreeRoot),
}

fn not_a_directory_body(dir: InodeNo) -> Error {
    Error::corrupt_meta("inode", 0, format!("directory {dir} has a body that is neither entries nor a tree"))
}

/// First free slot at or after `base` among sorted `keys`.
fn free_slot(keys: impl Iterator<Item = u64>, base: u64) -> Option<u64> {
    let mut slot = base;
    for k in keys.skip_while(|&k| k < base) {
        if k != slot {
            break;
        }
        slot += 1;
    }
    (slot < base + COLLISION_SLOTS).then_some(slot)
}

impl Fs {
    fn dir_form(&mut self, dir: InodeNo) -> Result<Form> {
        let rec = self.log.inode(dir)?;
        if FileKind::from_mode(rec.mode) != Some(FileKind::Directory) {
            return Err(Error::NotDir);
        }
        match &rec.body {
            Body::Empty => Ok(Form::Empty),
            Body::Entries(e) => Ok(Form::Inline(e.clone())),
            Body::Tree(t) => Ok(Form::Tree(*t)),
            _ => Err(not_a_directory_body(dir)),
        }
    }

    /// Most encoded bytes of entries a directory keeps in its inode.
    fn inline_dir_max(&self) -> usize {
        self.config.inline_max as usize
    }

    /// Stores `entries` in the inode, or in a tree once they outgrow it.
    fn store_inline(&mut self, dir: InodeNo, entries: Vec<(u64, Vec<u8>)>) -> Result<()> {
        let body = if entries.is_empty() {
            Body::Empty
        } else if inline_entries_len(&entries) <= self.inline_dir_max() {
            Body::Entries(entries)
        } else {
            let count = entries.len() as u64;
            let root = self.log.create_object(
                dir,
                Object::Node(Node { tree: TreeKind::Directory, level: 0, entries: Entries::Leaf(entries) }),
            );
            Body::Tree(TreeRoot { root, count })
        };
        self.log.inode_mut(dir)?.body = body;
        Ok(())
    }

    /// Stores a tree root; a tree that shrank to one small leaf moves back
    /// into the inode (at half the limit, so that a directory hovering at
    /// the limit does not flip at every change).
    fn store_tree(&mut self, dir: InodeNo, root: Option<NodeId>, count: u64) -> Result<()> {
        let Some(root) = root else {
            self.log.inode_mut(dir)?.body = Body::Empty;
            return Ok(());
        };
        let limit = self.inline_dir_max() / 2;
        let small = match &btree::NodeSource::node(&mut self.log.tree(dir), root)?.entries {
            Entries::Leaf(e) if inline_entries_len(e) <= limit => Some(e.clone()),
            _ => None,
        };
        let body = match small {
            Some(e) => {
                self.log.free_object(root);
                Body::Entries(e)
            }
            None => Body::Tree(TreeRoot { root, count }),
        };
        self.log.inode_mut(dir)?.body = body;
        Ok(())
    }

    /// Finds `name` in `dir`.
    ///
    /// # Errors
    /// `NotDir`, or I/O and corruption errors.
    pub fn dir_lookup(&mut self, dir: InodeNo, name: &[u8]) -> Result<Option<DirEntry>> {
        // A restored dump's names no longer hash to their positions: every
        // entry is a candidate, from the first.
        let scan_all = self.log.superblock().scanned_names();
        let base = if scan_all { 0 } else { hash_position(&self.log.superblock().hash_key, name) };
        let mut found = None;
        let mut bad = None;
        self.dir_scan_raw(dir, base, &mut |k, v| {
            if !scan_all && k >= base + COLLISION_SLOTS {
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
        self.intents.linked(dir, name, ino, kind);
        let base = hash_position(&self.log.superblock().hash_key, name.as_bytes());
        let value = encode(ino, kind, name.as_bytes());
        let full = || Error::NoSpace(crate::error::DeviceRole::Meta);
        match self.dir_form(dir)? {
            Form::Empty => {
                self.store_inline(dir, vec![(base, value)])?;
                Ok(base)
            }
            Form::Inline(mut e) => {
                let slot = free_slot(e.iter().map(|(k, _)| *k), base).ok_or_else(full)?;
                let at = e.partition_point(|(k, _)| *k < slot);
                e.insert(at, (slot, value));
                self.store_inline(dir, e)?;
                Ok(slot)
            }
            Form::Tree(t) => {
                let mut keys = Vec::new();
                btree::scan(&mut self.log.tree(dir), Some(t.root), base, &mut |k, _| {
                    keys.push(k);
                    k < base + COLLISION_SLOTS
                })?;
                let slot = free_slot(keys.into_iter(), base).ok_or_else(full)?;
                let (root, _) = btree::insert(&mut self.log.tree(dir), Some(t.root), TreeKind::Directory, slot, value)?;
                self.store_tree(dir, Some(root), t.count + 1)?;
                Ok(slot)
            }
        }
    }

    /// Points an existing entry at another inode (rename over a name).
    ///
    /// # Errors
    /// I/O errors.
    pub fn dir_replace(&mut self, dir: InodeNo, entry: &DirEntry, ino: InodeNo, kind: FileKind) -> Result<()> {
        self.intents.unlinked(dir, &entry.name, entry.ino);
        if let Ok(name) = FileName::new(&entry.name) {
            self.intents.linked(dir, &name, ino, kind);
        }
        let value = encode(ino, kind, &entry.name);
        match self.dir_form(dir)? {
            Form::Empty => Err(Error::NotFound),
            Form::Inline(mut e) => {
                let i = e.binary_search_by_key(&entry.position, |(k, _)| *k).map_err(|_| Error::NotFound)?;
                e[i].1 = value;
                self.store_inline(dir, e)
            }
            Form::Tree(t) => {
                let (root, _) =
                    btree::insert(&mut self.log.tree(dir), Some(t.root), TreeKind::Directory, entry.position, value)?;
                self.log.inode_mut(dir)?.body = Body::Tree(TreeRoot { root, count: t.count });
                Ok(())
            }
        }
    }

    /// Removes the entry at `position`.
    ///
    /// # Errors
    /// `NotFound` if there is none; I/O errors.
    pub fn dir_remove(&mut self, dir: InodeNo, position: u64) -> Result<()> {
        match self.dir_form(dir)? {
            Form::Empty => Err(Error::NotFound),
            Form::Inline(mut e) => {
                let i = e.binary_search_by_key(&position, |(k, _)| *k).map_err(|_| Error::NotFound)?;
                let (_, v) = e.remove(i);
                let gone = decode(position, &v, dir)?;
                self.intents.unlinked(dir, &gone.name, gone.ino);
                self.store_inline(dir, e)
            }
            Form::Tree(t) => {
                let (root, old) = btree::remove(&mut self.log.tree(dir), Some(t.root), position)?;
                let Some(v) = old else {
                    return Err(Error::NotFound);
                };
                let gone = decode(position, &v, dir)?;
                self.intents.unlinked(dir, &gone.name, gone.ino);
                let count = t.count.checked_sub(1).ok_or_else(|| {
                    Error::corrupt_meta("directory", 0, format!("directory {dir} counts no entries but holds one"))
                })?;
                self.store_tree(dir, root, count)
            }
        }
    }

    /// Whether `dir` has no entries.
    ///
    /// # Errors
    /// `NotDir`, I/O errors.
    pub fn dir_is_empty(&mut self, dir: InodeNo) -> Result<bool> {
        Ok(matches!(self.dir_form(dir)?, Form::Empty))
    }

    /// Number of entries in `dir`.
    ///
    /// # Errors
    /// `NotDir`, I/O errors.
    pub fn dir_count(&mut self, dir: InodeNo) -> Result<u64> {
        Ok(match self.dir_form(dir)? {
            Form::Empty => 0,
            Form::Inline(e) => e.len() as u64,
            Form::Tree(t) => t.count,
        })
    }

    /// Visits the entries from `from` where they are: a lookup or listing
    /// of a small directory read them in the inode without copying them
    /// (`dir_form` copies, for the changes).
    fn dir_scan_raw(&mut self, dir: InodeNo, from: u64, visit: &mut dyn FnMut(u64, &[u8]) -> bool) -> Result<()> {
        let rec = self.log.inode(dir)?;
        if FileKind::from_mode(rec.mode) != Some(FileKind::Directory) {
            return Err(Error::NotDir);
        }
        let root = match &rec.body {
            Body::Empty => return Ok(()),
            Body::Entries(e) => {
                for (k, v) in e.iter().filter(|(k, _)| *k >= from) {
                    if !visit(*k, v) {
                        break;
                    }
                }
                return Ok(());
            }
            Body::Tree(t) => t.root,
            _ => return Err(not_a_directory_body(dir)),
        };
        btree::scan(&mut self.log.tree(dir), Some(root), from, visit)
    }

    /// Visits entries at positions `>= from` in order until `visit` returns false.
    ///
    /// # Errors
    /// `NotDir`, I/O and corruption errors.
    pub fn dir_scan(&mut self, dir: InodeNo, from: u64, visit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let mut bad = None;
        self.dir_scan_raw(dir, from, &mut |k, v| match decode(k, v, dir) {
            Ok(e) => visit(e),
            Err(e) => {
                bad = Some(e);
                false
            }
        })?;
        bad.map_or(Ok(()), Err)
    }
}
