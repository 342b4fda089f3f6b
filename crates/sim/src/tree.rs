//! A file-system tree as the user sees it, taken from a mounted volume or
//! from the model, so that the two can be compared after a crash.

use std::collections::{BTreeMap, HashMap};

use dualfs_engine::Volume;
use dualfs_engine::types::{FileKind, InodeNo};

use crate::model::{Id, Kind, Model};

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Directory.
    Dir,
    /// Regular file.
    File,
    /// Symbolic link.
    Symlink,
    /// Anything else.
    Other,
}

/// One path of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What it is.
    pub kind: EntryKind,
    /// Permission bits.
    pub perm: u32,
    /// Hard links.
    pub nlink: u32,
    /// Extended attributes.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// A file's bytes or a symlink's target.
    pub bytes: Vec<u8>,
    /// Which object it is: the model's node id, or the engine's inode number.
    pub identity: u64,
    /// Inode flags (`chattr`).
    pub flags: u32,
}

/// Every path of a tree (the root is `/`), in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    /// Path → entry.
    pub entries: BTreeMap<String, Entry>,
}

fn join(dir: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") }
}

impl Tree {
    /// The tree the model describes.
    #[must_use]
    pub fn of_model(model: &Model) -> Tree {
        let mut entries = BTreeMap::new();
        let mut stack = vec![("/".to_string(), crate::model::ROOT)];
        while let Some((path, id)) = stack.pop() {
            let node = &model.nodes[&id];
            let (kind, bytes) = match &node.kind {
                Kind::Dir(children) => {
                    for (name, child) in children {
                        stack.push((join(&path, name), *child));
                    }
                    (EntryKind::Dir, Vec::new())
                }
                Kind::File(d) => (EntryKind::File, d.clone()),
                Kind::Symlink(t) => (EntryKind::Symlink, t.clone()),
                Kind::Fifo | Kind::Whiteout => (EntryKind::Other, Vec::new()),
            };
            entries.insert(
                path,
                Entry {
                    kind,
                    perm: node.perm,
                    nlink: node.nlink,
                    xattrs: node.xattrs.clone(),
                    bytes,
                    identity: id,
                    flags: node.flags,
                },
            );
        }
        Tree { entries }
    }

    /// The tree a mounted volume shows.
    ///
    /// # Errors
    /// Any engine error while walking it (a recovered volume must be readable).
    pub fn of_volume(vol: &Volume) -> Result<Tree, String> {
        let mut entries = BTreeMap::new();
        let mut stack = vec![("/".to_string(), InodeNo::ROOT)];
        // Bounded: a tree of more entries than this is not one a workload made.
        let mut budget = 100_000usize;
        while let Some((path, ino)) = stack.pop() {
            budget = budget.checked_sub(1).ok_or("the tree is larger than any workload makes (a loop?)")?;
            let a = vol.getattr(ino).map_err(|e| format!("{path}: getattr: {e}"))?;
            let kind = match a.kind {
                FileKind::Directory => EntryKind::Dir,
                FileKind::Regular => EntryKind::File,
                FileKind::Symlink => EntryKind::Symlink,
                _ => EntryKind::Other,
            };
            let bytes = match kind {
                EntryKind::Dir => {
                    let mut listed = Vec::new();
                    vol.readdir(ino, 0, &mut |l| {
                        listed.push(l);
                        true
                    })
                    .map_err(|e| format!("{path}: readdir: {e}"))?;
                    for l in listed.into_iter().skip(2) {
                        stack.push((join(&path, &l.name), l.ino));
                    }
                    Vec::new()
                }
                EntryKind::File => {
                    let d = vol.read(ino, 0, a.size as usize).map_err(|e| format!("{path}: read: {e}"))?;
                    if d.len() as u64 != a.size {
                        return Err(format!("{path}: size {} but read gave {} bytes", a.size, d.len()));
                    }
                    d
                }
                EntryKind::Symlink => vol.readlink(ino).map_err(|e| format!("{path}: readlink: {e}"))?,
                EntryKind::Other => Vec::new(),
            };
            let mut xattrs = BTreeMap::new();
            for n in vol.listxattr(ino).map_err(|e| format!("{path}: listxattr: {e}"))? {
                let v = vol.getxattr(ino, &n).map_err(|e| format!("{path}: getxattr: {e}"))?;
                xattrs.insert(n, v);
            }
            if entries.contains_key(&path) {
                return Err(format!("{path}: listed twice"));
            }
            let e = Entry { kind, perm: a.perm, nlink: a.nlink, xattrs, bytes, identity: ino.0, flags: a.flags };
            entries.insert(path, e);
        }
        Ok(Tree { entries })
    }

    /// Whether hard links group the paths alike in both trees, which hold
    /// the same paths: each path's first path (in name order) naming the
    /// same object is the same in both.
    fn same_link_groups(&self, want: &Tree) -> bool {
        let mut first: (HashMap<u64, &str>, HashMap<u64, &str>) = (HashMap::new(), HashMap::new());
        self.entries.iter().zip(&want.entries).all(|((p, g), (q, w))| {
            p == q && first.0.entry(g.identity).or_insert(p) == first.1.entry(w.identity).or_insert(q)
        })
    }

    /// Compares everything but file contents (sizes included) with `want`.
    ///
    /// # Errors
    /// The first difference, in words.
    pub fn same_namespace(&self, want: &Tree) -> Result<(), String> {
        for p in want.entries.keys() {
            if !self.entries.contains_key(p) {
                return Err(format!("{p} is missing"));
            }
        }
        for (p, g) in &self.entries {
            let Some(w) = want.entries.get(p) else {
                return Err(format!("{p} should not exist"));
            };
            if g.kind != w.kind {
                return Err(format!("{p} is a {:?}, expected a {:?}", g.kind, w.kind));
            }
            if g.perm != w.perm || g.nlink != w.nlink {
                return Err(format!("{p}: mode/nlink {:o}/{}, expected {:o}/{}", g.perm, g.nlink, w.perm, w.nlink));
            }
            if g.flags != w.flags {
                return Err(format!("{p}: inode flags {:#x}, expected {:#x}", g.flags, w.flags));
            }
            if g.xattrs != w.xattrs {
                return Err(format!("{p}: extended attributes differ"));
            }
            if g.bytes.len() != w.bytes.len() {
                return Err(format!("{p}: size {}, expected {}", g.bytes.len(), w.bytes.len()));
            }
            if g.kind == EntryKind::Symlink && g.bytes != w.bytes {
                return Err(format!("{p}: symlink target differs"));
            }
        }
        if !self.same_link_groups(want) {
            return Err("hard links group the names differently".into());
        }
        Ok(())
    }

    /// Model node id of each file path (for trees made by [`Tree::of_model`]).
    #[must_use]
    pub fn ids(&self) -> BTreeMap<&str, Id> {
        self.entries.iter().map(|(p, e)| (p.as_str(), e.identity)).collect()
    }
}
