//! Extended attributes: a small set stays in the inode; a larger one moves
//! to a B-tree keyed by the hash of the name. Values too long for a tree
//! entry go to blob blocks.
//!
//! Tree entry value: `u8 form (0 inline, 1 blob), u8 name_len, name`, then
//! the value itself, or `u32 len, node ids` of its blob.

use super::Fs;
use super::btree;
use crate::error::{Error, Result};
use crate::format::codec::{Reader, Writer};
use crate::format::inode::{MAX_BLOB_NODES, MAX_INLINE_XATTR_BYTES, TreeRoot, Xattrs, inline_xattrs_len};
use crate::format::name::{COLLISION_SLOTS, hash_position};
use crate::format::node::{MAX_VALUE_LEN, TreeKind};
use crate::types::{InodeNo, NodeId};

/// Largest value (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Longest name (Linux's `XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;

/// How `setxattr` treats an existing or missing attribute.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SetMode {
    /// Create or replace.
    Any,
    /// Fail with `EEXIST` if it exists.
    Create,
    /// Fail with `ENODATA` if it does not.
    Replace,
}

enum Stored {
    Inline(Vec<u8>),
    Blob(u32, Vec<NodeId>),
}

fn encode_entry(name: &[u8], stored: &Stored) -> Vec<u8> {
    let mut w = Writer::new();
    match stored {
        Stored::Inline(v) => {
            w.u8(0).u8(name.len() as u8).bytes(name).bytes(v);
        }
        Stored::Blob(len, nodes) => {
            w.u8(1).u8(name.len() as u8).bytes(name).u32(*len);
            for n in nodes {
                w.u64(n.0);
            }
        }
    }
    w.into_inner()
}

fn decode_entry(v: &[u8], ino: InodeNo) -> Result<(Vec<u8>, Stored)> {
    let bad = || Error::corrupt_meta("xattr entry", 0, format!("malformed extended attribute of inode {ino}"));
    let mut r = Reader::new(v);
    let form = r.u8().map_err(|_| bad())?;
    let nl = usize::from(r.u8().map_err(|_| bad())?);
    let name = r.bytes(nl).map_err(|_| bad())?.to_vec();
    let stored = match form {
        0 => Stored::Inline(r.bytes(r.remaining()).map_err(|_| bad())?.to_vec()),
        1 => {
            let len = r.u32().map_err(|_| bad())?;
            if !r.remaining().is_multiple_of(8) || r.remaining() / 8 > MAX_BLOB_NODES {
                return Err(bad());
            }
            let mut nodes = Vec::new();
            while r.remaining() > 0 {
                nodes.push(NodeId(r.u64().map_err(|_| bad())?));
            }
            Stored::Blob(len, nodes)
        }
        _ => return Err(bad()),
    };
    Ok((name, stored))
}

impl Fs {
    /// Finds `name` in an xattr tree: its position and stored form.
    fn xattr_find(&mut self, ino: InodeNo, root: NodeId, name: &[u8]) -> Result<Option<(u64, Stored)>> {
        // As in `dir_lookup`: a restored dump's names are found by scanning.
        let scan_all = self.log.superblock().scanned_names();
        let base = if scan_all { 0 } else { hash_position(&self.log.superblock().hash_key, name) };
        let mut found = None;
        let mut bad = None;
        btree::scan(&mut self.log.tree(ino), Some(root), base, &mut |k, v| {
            if !scan_all && k >= base + COLLISION_SLOTS {
                return false;
            }
            match decode_entry(v, ino) {
                Ok((n, s)) if n == name => {
                    found = Some((k, s));
                    false
                }
                Ok(_) => true,
                Err(e) => {
                    bad = Some(e);
                    false
                }
            }
        })?;
        bad.map_or(Ok(found), Err)
    }

    /// The value of `name`.
    ///
    /// # Errors
    /// `NoXattr` if absent; I/O and corruption errors.
    pub fn xattr_get(&mut self, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        match self.log.inode(ino)?.xattrs.clone() {
            Xattrs::Inline(pairs) => pairs.into_iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or(Error::NoXattr),
            Xattrs::Tree(t) => match self.xattr_find(ino, t.root, name)? {
                Some((_, Stored::Inline(v))) => Ok(v),
                Some((_, Stored::Blob(len, nodes))) => self.read_blob(&nodes, len),
                None => Err(Error::NoXattr),
            },
        }
    }

    /// Whether `name` is set, without copying or reading its value (asked
    /// before every write, for `security.capability`).
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn xattr_has(&mut self, ino: InodeNo, name: &[u8]) -> Result<bool> {
        let root = match &self.log.inode(ino)?.xattrs {
            Xattrs::Inline(pairs) => return Ok(pairs.iter().any(|(n, _)| n == name)),
            Xattrs::Tree(t) => t.root,
        };
        Ok(self.xattr_find(ino, root, name)?.is_some())
    }

    /// Every attribute name.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn xattr_list(&mut self, ino: InodeNo) -> Result<Vec<Vec<u8>>> {
        match self.log.inode(ino)?.xattrs.clone() {
            Xattrs::Inline(pairs) => Ok(pairs.into_iter().map(|(n, _)| n).collect()),
            Xattrs::Tree(t) => {
                let mut names = Vec::new();
                let mut bad = None;
                btree::scan(&mut self.log.tree(ino), Some(t.root), 0, &mut |_, v| match decode_entry(v, ino) {
                    Ok((n, _)) => {
                        names.push(n);
                        true
                    }
                    Err(e) => {
                        bad = Some(e);
                        false
                    }
                })?;
                bad.map_or(Ok(names), Err)
            }
        }
    }

    /// Sets `name` to `value`.
    ///
    /// # Errors
    /// `Exists`/`NoXattr` per `mode`; `NameTooLong`, `XattrTooBig`; I/O errors.
    pub fn xattr_set(&mut self, ino: InodeNo, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        if name.is_empty() {
            return Err(Error::Invalid("empty attribute name"));
        }
        if name.len() > XATTR_NAME_MAX {
            return Err(Error::NameTooLong);
        }
        if value.len() > XATTR_VALUE_MAX {
            return Err(Error::XattrTooBig);
        }
        match self.log.inode(ino)?.xattrs.clone() {
            Xattrs::Inline(mut pairs) => {
                let pos = pairs.binary_search_by(|(n, _)| n.as_slice().cmp(name));
                match (pos, mode) {
                    (Ok(_), SetMode::Create) => return Err(Error::Exists),
                    (Err(_), SetMode::Replace) => return Err(Error::NoXattr),
                    (Ok(i), _) => pairs[i].1 = value.to_vec(),
                    (Err(i), _) => pairs.insert(i, (name.to_vec(), value.to_vec())),
                }
                if inline_xattrs_len(&pairs) <= MAX_INLINE_XATTR_BYTES {
                    self.log.inode_mut(ino)?.xattrs = Xattrs::Inline(pairs);
                    return Ok(());
                }
                // Outgrew the inode: move every attribute into a tree.
                let mut root = None;
                let mut count = 0;
                for (n, v) in pairs {
                    root = Some(self.xattr_tree_put(ino, root, &n, &v, None)?);
                    count += 1;
                }
                let root = root.ok_or(Error::Invalid("empty xattr tree"))?;
                self.log.inode_mut(ino)?.xattrs = Xattrs::Tree(TreeRoot { root, count });
                Ok(())
            }
            Xattrs::Tree(t) => {
                let existing = self.xattr_find(ino, t.root, name)?;
                match (&existing, mode) {
                    (Some(_), SetMode::Create) => return Err(Error::Exists),
                    (None, SetMode::Replace) => return Err(Error::NoXattr),
                    _ => {}
                }
                let count = t.count + u64::from(existing.is_none());
                let root = self.xattr_tree_put(ino, Some(t.root), name, value, existing)?;
                self.log.inode_mut(ino)?.xattrs = Xattrs::Tree(TreeRoot { root, count });
                Ok(())
            }
        }
    }

    /// Puts one attribute into a tree, replacing `existing` (its position and form).
    fn xattr_tree_put(
        &mut self,
        ino: InodeNo,
        root: Option<NodeId>,
        name: &[u8],
        value: &[u8],
        existing: Option<(u64, Stored)>,
    ) -> Result<NodeId> {
        let position = match existing {
            Some((p, old)) => {
                if let Stored::Blob(_, nodes) = old {
                    self.free_blob(&nodes);
                }
                p
            }
            None => {
                let base = hash_position(&self.log.superblock().hash_key, name);
                let mut slot = base;
                btree::scan(&mut self.log.tree(ino), root, base, &mut |k, _| {
                    if k == slot && k < base + COLLISION_SLOTS - 1 {
                        slot += 1;
                        true
                    } else {
                        false
                    }
                })?;
                if btree::get(&mut self.log.tree(ino), root, slot)?.is_some() {
                    return Err(Error::NoSpace(crate::error::DeviceRole::Meta));
                }
                slot
            }
        };
        let stored = if 2 + name.len() + value.len() <= MAX_VALUE_LEN {
            Stored::Inline(value.to_vec())
        } else {
            Stored::Blob(value.len() as u32, self.write_blob(ino, value))
        };
        let (root, _) =
            btree::insert(&mut self.log.tree(ino), root, TreeKind::Xattrs, position, encode_entry(name, &stored))?;
        Ok(root)
    }

    /// Removes `name`.
    ///
    /// # Errors
    /// `NoXattr` if absent; I/O errors.
    pub fn xattr_remove(&mut self, ino: InodeNo, name: &[u8]) -> Result<()> {
        match self.log.inode(ino)?.xattrs.clone() {
            Xattrs::Inline(mut pairs) => {
                let i = pairs.iter().position(|(n, _)| n == name).ok_or(Error::NoXattr)?;
                pairs.remove(i);
                self.log.inode_mut(ino)?.xattrs = Xattrs::Inline(pairs);
                Ok(())
            }
            Xattrs::Tree(t) => {
                let (pos, stored) = self.xattr_find(ino, t.root, name)?.ok_or(Error::NoXattr)?;
                if let Stored::Blob(_, nodes) = stored {
                    self.free_blob(&nodes);
                }
                let (root, _) = btree::remove(&mut self.log.tree(ino), Some(t.root), pos)?;
                let count = t.count.checked_sub(1).ok_or_else(|| {
                    Error::corrupt_meta("xattr tree", 0, format!("inode {ino} counts no attributes but holds one"))
                })?;
                self.log.inode_mut(ino)?.xattrs = match root {
                    Some(root) => Xattrs::Tree(TreeRoot { root, count }),
                    None => Xattrs::Inline(Vec::new()),
                };
                Ok(())
            }
        }
    }

    /// Frees every attribute of a dying inode.
    ///
    /// # Errors
    /// I/O and corruption errors.
    pub fn xattr_destroy(&mut self, ino: InodeNo) -> Result<()> {
        if let Xattrs::Tree(t) = self.log.inode(ino)?.xattrs.clone() {
            let mut blobs = Vec::new();
            btree::scan(&mut self.log.tree(ino), Some(t.root), 0, &mut |_, v| {
                if let Ok((_, Stored::Blob(_, nodes))) = decode_entry(v, ino) {
                    blobs.extend(nodes);
                }
                true
            })?;
            self.free_blob(&blobs);
            btree::destroy(&mut self.log.tree(ino), Some(t.root))?;
        }
        self.log.inode_mut(ino)?.xattrs = Xattrs::Inline(Vec::new());
        Ok(())
    }
}
