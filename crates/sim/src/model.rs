//! A plain in-memory file system: the reference the engine is compared with.
//!
//! It is written to be obviously right rather than fast: a map of nodes, a
//! `BTreeMap` per directory, whole-file byte vectors. Each operation returns
//! the errno POSIX (and the engine) give for the first thing wrong.

use std::collections::BTreeMap;

/// A node of the model.
pub type Id = u64;
/// The root directory.
pub const ROOT: Id = 1;

/// What a node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file and its bytes.
    File(Vec<u8>),
    /// A directory and its entries.
    Dir(BTreeMap<Vec<u8>, Id>),
    /// A symbolic link and its target.
    Symlink(Vec<u8>),
    /// A named pipe.
    Fifo,
    /// A whiteout `RENAME_WHITEOUT` left: a character device 0:0 of mode 0.
    Whiteout,
}

/// A node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Permission bits.
    pub perm: u32,
    /// Hard links.
    pub nlink: u32,
    /// Extended attributes.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// A directory's parent.
    pub parent: Id,
    /// Inode flags (`chattr`), as the engine keeps them.
    pub flags: u32,
}

/// The whole model.
#[derive(Clone, Debug)]
pub struct Model {
    /// Every node still alive (linked, or held open).
    pub nodes: BTreeMap<Id, Node>,
    next: Id,
}

/// The flags a new node of `kind` takes from its directory's `parent`
/// (ext4's inherited flags: all the kind may carry but immutable and
/// append-only).
fn inherited_flags(parent: u32, kind: &Kind) -> u32 {
    use dualfs_engine::format::inode::{FLAG_APPEND, FLAG_IMMUTABLE, flags_for};
    use dualfs_engine::types::FileKind;
    let kind = match kind {
        Kind::Dir(_) => FileKind::Directory,
        Kind::File(_) => FileKind::Regular,
        Kind::Symlink(_) => FileKind::Symlink,
        Kind::Fifo | Kind::Whiteout => FileKind::Fifo,
    };
    parent & !(FLAG_IMMUTABLE | FLAG_APPEND) & flags_for(kind)
}

/// An errno.
pub type Errno = i32;

impl Default for Model {
    fn default() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            ROOT,
            Node {
                kind: Kind::Dir(BTreeMap::new()),
                perm: 0o755,
                nlink: 2,
                xattrs: BTreeMap::new(),
                parent: ROOT,
                flags: 0,
            },
        );
        Model { nodes, next: ROOT + 1 }
    }
}

impl Model {
    fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }

    fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).expect("model node")
    }

    /// Entries of directory `dir`.
    #[must_use]
    pub fn entries(&self, dir: Id) -> &BTreeMap<Vec<u8>, Id> {
        match &self.node(dir).kind {
            Kind::Dir(e) => e,
            _ => panic!("model: {dir} is not a directory"),
        }
    }

    fn entries_mut(&mut self, dir: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.node_mut(dir).kind {
            Kind::Dir(e) => e,
            _ => panic!("model: {dir} is not a directory"),
        }
    }

    fn is_dir(&self, id: Id) -> bool {
        matches!(self.node(id).kind, Kind::Dir(_))
    }

    /// Every path, with the node it names (root first, then depth-first in name order).
    #[must_use]
    pub fn paths(&self) -> Vec<(Vec<Vec<u8>>, Id)> {
        let mut out = vec![(Vec::new(), ROOT)];
        let mut i = 0;
        while i < out.len() {
            let (path, id) = out[i].clone();
            if let Kind::Dir(e) = &self.node(id).kind {
                for (name, child) in e {
                    let mut p = path.clone();
                    p.push(name.clone());
                    out.push((p, *child));
                }
            }
            i += 1;
        }
        out
    }

    fn add(&mut self, dir: Id, name: &[u8], kind: Kind, perm: u32) -> Result<Id, Errno> {
        if self.entries(dir).contains_key(name) {
            return Err(libc::EEXIST);
        }
        let id = self.next;
        self.next += 1;
        let is_dir = matches!(kind, Kind::Dir(_));
        // A set-group-id directory passes the bit on to new subdirectories.
        let perm = if is_dir && self.node(dir).perm & 0o2000 != 0 { perm | 0o2000 } else { perm };
        let flags = inherited_flags(self.node(dir).flags, &kind);
        self.nodes.insert(
            id,
            Node {
                kind,
                perm,
                nlink: if is_dir { 2 } else { 1 },
                xattrs: BTreeMap::new(),
                parent: if is_dir { dir } else { 0 },
                flags,
            },
        );
        self.entries_mut(dir).insert(name.to_vec(), id);
        if is_dir {
            self.node_mut(dir).nlink += 1;
        }
        Ok(id)
    }

    /// Creates a regular file.
    ///
    /// # Errors
    /// `EEXIST`.
    pub fn create(&mut self, dir: Id, name: &[u8], perm: u32) -> Result<Id, Errno> {
        self.add(dir, name, Kind::File(Vec::new()), perm)
    }

    /// Creates an unnamed regular file (O_TMPFILE): no entry, no link;
    /// it lives while held and a [`Model::link`] can name it.
    pub fn create_unnamed(&mut self, perm: u32) -> Id {
        let id = self.next;
        self.next += 1;
        let node = Node { kind: Kind::File(Vec::new()), perm, nlink: 0, xattrs: BTreeMap::new(), parent: 0, flags: 0 };
        self.nodes.insert(id, node);
        id
    }

    /// Creates a directory.
    ///
    /// # Errors
    /// `EEXIST`.
    pub fn mkdir(&mut self, dir: Id, name: &[u8], perm: u32) -> Result<Id, Errno> {
        self.add(dir, name, Kind::Dir(BTreeMap::new()), perm)
    }

    /// Creates a fifo.
    ///
    /// # Errors
    /// `EEXIST`.
    pub fn mkfifo(&mut self, dir: Id, name: &[u8], perm: u32) -> Result<Id, Errno> {
        self.add(dir, name, Kind::Fifo, perm)
    }

    /// Creates a symlink.
    ///
    /// # Errors
    /// `EEXIST`.
    pub fn symlink(&mut self, dir: Id, name: &[u8], target: &[u8]) -> Result<Id, Errno> {
        self.add(dir, name, Kind::Symlink(target.to_vec()), 0o777)
    }

    fn data_mut(&mut self, id: Id) -> &mut Vec<u8> {
        match &mut self.node_mut(id).kind {
            Kind::File(d) => d,
            _ => panic!("model: {id} is not a file"),
        }
    }

    /// Writes bytes.
    pub fn write(&mut self, id: Id, offset: u64, data: &[u8]) {
        // POSIX: a write of no bytes changes nothing, not even the size.
        if data.is_empty() {
            return;
        }
        let d = self.data_mut(id);
        let end = offset as usize + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(data);
    }

    /// Sets the size.
    pub fn truncate(&mut self, id: Id, size: u64) {
        self.data_mut(id).resize(size as usize, 0);
    }

    /// Zeroes a range without changing the size.
    pub fn punch(&mut self, id: Id, offset: u64, len: u64) {
        let d = self.data_mut(id);
        let end = (offset + len).min(d.len() as u64) as usize;
        if (offset as usize) < end {
            d[offset as usize..end].fill(0);
        }
    }

    /// Removes `[offset, offset + len)` and moves what follows down, with
    /// the kernel's rules (`FALLOC_FL_COLLAPSE_RANGE` on 4 KiB blocks).
    ///
    /// # Errors
    /// `EINVAL`: not block-aligned, empty, or reaching the end of the file.
    pub fn collapse(&mut self, id: Id, offset: u64, len: u64) -> Result<(), Errno> {
        let d = self.data_mut(id);
        if len == 0 || !offset.is_multiple_of(4096) || !len.is_multiple_of(4096) || offset + len >= d.len() as u64 {
            return Err(libc::EINVAL);
        }
        d.drain(offset as usize..(offset + len) as usize);
        Ok(())
    }

    /// Inserts `len` zero bytes at `offset` (`FALLOC_FL_INSERT_RANGE`).
    ///
    /// # Errors
    /// `EINVAL`: not block-aligned, empty, or at or past the end of the file.
    pub fn insert(&mut self, id: Id, offset: u64, len: u64) -> Result<(), Errno> {
        let d = self.data_mut(id);
        if len == 0 || !offset.is_multiple_of(4096) || !len.is_multiple_of(4096) || offset >= d.len() as u64 {
            return Err(libc::EINVAL);
        }
        let at = offset as usize;
        d.splice(at..at, std::iter::repeat_n(0u8, len as usize));
        Ok(())
    }

    /// `FALLOC_FL_UNSHARE_RANGE` without keep-size: the contents stay, the
    /// size grows to the range's end.
    pub fn unshare(&mut self, id: Id, offset: u64, len: u64) {
        let d = self.data_mut(id);
        let end = (offset + len) as usize;
        if d.len() < end {
            d.resize(end, 0);
        }
    }

    /// Drops one link; a node with none goes unless `held`.
    fn unref(&mut self, id: Id, held: &dyn Fn(Id) -> bool) {
        let n = self.node_mut(id);
        n.nlink = if matches!(n.kind, Kind::Dir(_)) { 0 } else { n.nlink - 1 };
        if n.nlink == 0 && !held(id) {
            self.nodes.remove(&id);
        }
    }

    /// Removes a non-directory name.
    ///
    /// # Errors
    /// `ENOENT`, `EISDIR`.
    pub fn unlink(&mut self, dir: Id, name: &[u8], held: &dyn Fn(Id) -> bool) -> Result<(), Errno> {
        let id = *self.entries(dir).get(name).ok_or(libc::ENOENT)?;
        if self.is_dir(id) {
            return Err(libc::EISDIR);
        }
        self.entries_mut(dir).remove(name);
        self.unref(id, held);
        Ok(())
    }

    /// Removes an empty directory.
    ///
    /// # Errors
    /// `ENOENT`, `ENOTDIR`, `ENOTEMPTY`.
    pub fn rmdir(&mut self, dir: Id, name: &[u8], held: &dyn Fn(Id) -> bool) -> Result<(), Errno> {
        let id = *self.entries(dir).get(name).ok_or(libc::ENOENT)?;
        if !self.is_dir(id) {
            return Err(libc::ENOTDIR);
        }
        if !self.entries(id).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.entries_mut(dir).remove(name);
        self.node_mut(dir).nlink -= 1;
        self.unref(id, held);
        Ok(())
    }

    /// Adds a hard link.
    ///
    /// # Errors
    /// `EPERM` for directories, `EEXIST`.
    pub fn link(&mut self, id: Id, dir: Id, name: &[u8]) -> Result<(), Errno> {
        if self.is_dir(id) {
            return Err(libc::EPERM);
        }
        if self.entries(dir).contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.entries_mut(dir).insert(name.to_vec(), id);
        self.node_mut(id).nlink += 1;
        Ok(())
    }

    fn within(&self, mut dir: Id, ancestor: Id) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            if dir == ROOT {
                return false;
            }
            dir = self.node(dir).parent;
        }
    }

    fn move_dir(&mut self, id: Id, from: Id, to: Id) {
        if self.is_dir(id) && from != to {
            self.node_mut(id).parent = to;
            self.node_mut(from).nlink -= 1;
            self.node_mut(to).nlink += 1;
        }
    }

    /// Renames, with `noreplace` and `exchange` as in `renameat2`, checking
    /// in the engine's order.
    ///
    /// # Errors
    /// `ENOENT`, `EEXIST`, `EINVAL`, `ENOTDIR`, `EISDIR`, `ENOTEMPTY`.
    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &mut self,
        from: Id,
        name: &[u8],
        to: Id,
        new_name: &[u8],
        noreplace: bool,
        exchange: bool,
        held: &dyn Fn(Id) -> bool,
    ) -> Result<(), Errno> {
        let src = *self.entries(from).get(name).ok_or(libc::ENOENT)?;
        let dst = self.entries(to).get(new_name).copied();
        if exchange && dst.is_none() {
            return Err(libc::ENOENT);
        }
        if noreplace && dst.is_some() {
            return Err(libc::EEXIST);
        }
        if dst == Some(src) {
            return Ok(());
        }
        if self.is_dir(src) && self.within(to, src) {
            return Err(libc::EINVAL);
        }
        if exchange {
            let dst = dst.ok_or(libc::ENOENT)?;
            if self.is_dir(dst) && self.within(from, dst) {
                return Err(libc::EINVAL);
            }
            self.entries_mut(from).insert(name.to_vec(), dst);
            self.entries_mut(to).insert(new_name.to_vec(), src);
            self.move_dir(src, from, to);
            self.move_dir(dst, to, from);
            return Ok(());
        }
        if let Some(d) = dst {
            match (self.is_dir(src), self.is_dir(d)) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.entries(d).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.entries_mut(to).insert(new_name.to_vec(), src);
        self.entries_mut(from).remove(name);
        self.move_dir(src, from, to);
        if let Some(d) = dst {
            if self.is_dir(d) {
                self.node_mut(to).nlink -= 1;
            }
            self.unref(d, held);
        }
        Ok(())
    }

    /// A rename with `RENAME_WHITEOUT`: as [`Model::rename`], then a
    /// whiteout under the old name (none when both names are one file,
    /// which the kernel never passes on).
    ///
    /// # Errors
    /// As [`Model::rename`].
    pub fn rename_whiteout(
        &mut self,
        from: Id,
        name: &[u8],
        to: Id,
        new_name: &[u8],
        held: &dyn Fn(Id) -> bool,
    ) -> Result<(), Errno> {
        let src = self.entries(from).get(name).copied();
        let same = src.is_some() && self.entries(to).get(new_name).copied() == src;
        self.rename(from, name, to, new_name, false, false, held)?;
        if !same {
            self.add(from, name, Kind::Whiteout, 0)?;
        }
        Ok(())
    }

    /// Sets an extended attribute.
    pub fn setxattr(&mut self, id: Id, name: &[u8], value: &[u8]) {
        self.node_mut(id).xattrs.insert(name.to_vec(), value.to_vec());
    }

    /// Removes an extended attribute.
    ///
    /// # Errors
    /// `ENODATA`.
    pub fn removexattr(&mut self, id: Id, name: &[u8]) -> Result<(), Errno> {
        self.node_mut(id).xattrs.remove(name).map(|_| ()).ok_or(libc::ENODATA)
    }

    /// Sets permission bits.
    pub fn chmod(&mut self, id: Id, perm: u32) {
        self.node_mut(id).perm = perm & 0o7777;
    }

    /// A node that was held open is closed: it goes if it has no links.
    pub fn release(&mut self, id: Id) {
        if self.nodes.get(&id).is_some_and(|n| n.nlink == 0) {
            self.nodes.remove(&id);
        }
    }
}
