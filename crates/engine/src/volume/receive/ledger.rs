//! The check of a stream against the tree it builds (DESIGN.md, "Receive:
//! a stream is input from outside"). A receive starts from a consistent
//! tree (the mirror as a completed receive left it, or as a rollback brought
//! it back), so the namespace after it is consistent exactly when every
//! inode the stream touched is: the ledger counts, per inode, the entries
//! the stream added and removed that name it (by entry type, and for
//! directories by the directory holding the entry), and each directory's
//! subdirectories gained and lost; at the end it holds those counts against
//! the inodes as the stream left them. What the stream did not touch is as
//! it was. The cost follows the stream, not the volume.

use std::collections::{HashMap, HashSet};

use super::super::Volume;
use crate::error::{Error, Result};
use crate::format::stream::InodeAttrs;
use crate::types::{FileKind, InodeNo};

/// What an inode was before the receive touched it.
#[derive(Clone, Copy, Debug)]
struct Before {
    kind: FileKind,
    nlink: u32,
    parent: InodeNo,
}

/// One inode's changes.
#[derive(Debug, Default)]
struct Track {
    before: Option<Before>,
    /// Entries naming it added minus removed, by entry type.
    refs: [i64; 7],
    /// Directory-type entries naming it, added minus removed, by the
    /// directory holding them.
    holders: Vec<(InodeNo, i64)>,
    /// Directory-type entries it holds, added minus removed.
    subdirs: i64,
}

fn slot(k: FileKind) -> usize {
    match k {
        FileKind::Regular => 0,
        FileKind::Directory => 1,
        FileKind::Symlink => 2,
        FileKind::Fifo => 3,
        FileKind::Socket => 4,
        FileKind::CharDevice => 5,
        FileKind::BlockDevice => 6,
    }
}

const KINDS: [FileKind; 7] = [
    FileKind::Regular,
    FileKind::Directory,
    FileKind::Symlink,
    FileKind::Fifo,
    FileKind::Socket,
    FileKind::CharDevice,
    FileKind::BlockDevice,
];

pub(super) fn word(k: FileKind) -> &'static str {
    match k {
        FileKind::Regular => "regular file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "fifo",
        FileKind::Socket => "socket",
        FileKind::CharDevice => "character device",
        FileKind::BlockDevice => "block device",
    }
}

fn refused(why: String) -> Error {
    Error::Stream(format!("the stream would leave the tree inconsistent: {why}"))
}

/// What an inode record may say, whatever tree it lands in: what the
/// inode decoder accepts, and what only a tree fsck would refuse can hold.
pub(super) fn check_attrs(a: &InodeAttrs) -> Result<()> {
    let ino = a.ino;
    let bad = |why: String| Err(Error::Stream(format!("inode {ino}: {why}")));
    let Some(kind) = a.kind() else { return bad(format!("mode {:#o} is of no known type", a.mode)) };
    let kept = crate::format::inode::flags_for(kind);
    if a.flags & !kept != 0 {
        // The inode decoder refuses any flag this format does not define,
        // and the volume keeps on each kind only what ext4 keeps.
        return bad(format!("flags {:#x}, which a {kind:?} does not keep", a.flags & !kept));
    }
    if a.mode & !(libc::S_IFMT | 0o7777) != 0 {
        return bad(format!("mode {:#o} has bits beyond its type and permissions", a.mode));
    }
    if a.nlink == 0 {
        return bad("no links: a stream carries only inodes a directory names".into());
    }
    if kind == FileKind::Directory {
        if a.nlink < 2 {
            return bad(format!("a directory with link count {}", a.nlink));
        }
        if ino == InodeNo::ROOT && a.parent != InodeNo::ROOT {
            return bad(format!("the root's '..' names {}", a.parent));
        }
        if ino != InodeNo::ROOT && (a.parent.0 == 0 || a.parent == ino) {
            return bad(format!("a directory whose '..' names {}", a.parent));
        }
    }
    Ok(())
}

/// The changes a stream made, by inode.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    tracks: HashMap<InodeNo, Track>,
}

impl Ledger {
    /// Starts tracking `ino`, with what it is now: to be called before the
    /// stream changes it or any entry naming it.
    pub(super) fn touch(&mut self, vol: &Volume, ino: InodeNo) -> Result<()> {
        if self.tracks.contains_key(&ino) {
            return Ok(());
        }
        let before = match vol.with_fs(|fs| fs.inode(ino).map(|r| (r.mode, r.nlink, r.parent))) {
            Ok((mode, nlink, parent)) => FileKind::from_mode(mode).map(|kind| Before { kind, nlink, parent }),
            Err(Error::NotFound) => None,
            Err(e) => return Err(e),
        };
        self.tracks.insert(ino, Track { before, ..Track::default() });
        Ok(())
    }

    fn change(&mut self, vol: &Volume, dir: InodeNo, ino: InodeNo, kind: FileKind, by: i64) -> Result<()> {
        self.touch(vol, ino)?;
        self.touch(vol, dir)?;
        let t = self.tracks.get_mut(&ino).ok_or(Error::NotFound)?;
        t.refs[slot(kind)] += by;
        if kind == FileKind::Directory {
            match t.holders.iter_mut().find(|(d, _)| *d == dir) {
                Some((_, n)) => *n += by,
                None => t.holders.push((dir, by)),
            }
            self.tracks.get_mut(&dir).ok_or(Error::NotFound)?.subdirs += by;
        }
        Ok(())
    }

    /// Directory `dir` gained an entry naming `ino` as a `kind`.
    pub(super) fn added(&mut self, vol: &Volume, dir: InodeNo, ino: InodeNo, kind: FileKind) -> Result<()> {
        self.change(vol, dir, ino, kind, 1)
    }

    /// Directory `dir` lost an entry naming `ino` as a `kind`.
    pub(super) fn removed(&mut self, vol: &Volume, dir: InodeNo, ino: InodeNo, kind: FileKind) -> Result<()> {
        self.change(vol, dir, ino, kind, -1)
    }

    /// `ino` is about to be freed: a directory's entries go with it.
    pub(super) fn deleting(&mut self, vol: &Volume, ino: InodeNo) -> Result<()> {
        self.touch(vol, ino)?;
        let is_dir = self.tracks.get(&ino).and_then(|t| t.before).is_some_and(|b| b.kind == FileKind::Directory)
            || vol.with_fs(|fs| fs.inode(ino).map(|r| FileKind::from_mode(r.mode) == Some(FileKind::Directory)))?;
        if !is_dir {
            return Ok(());
        }
        let mut entries = Vec::new();
        vol.with_fs(|fs| {
            fs.dir_scan(ino, 0, &mut |e| {
                entries.push((e.ino, e.kind));
                true
            })
        })?;
        for (child, kind) in entries {
            self.removed(vol, ino, child, kind)?;
        }
        Ok(())
    }

    /// Checks every inode the stream touched against the tree as it is now
    /// (every record applied). The first inconsistency found is the error.
    pub(super) fn verify(&self, vol: &Volume) -> Result<()> {
        let mut inos: Vec<InodeNo> = self.tracks.keys().copied().collect();
        inos.sort_unstable();
        let mut reaches_root: HashSet<InodeNo> = HashSet::from([InodeNo::ROOT]);
        let bound = vol.with_fs(|fs| fs.log.ifile().used_inodes()) + 1;
        for ino in inos {
            let t = &self.tracks[&ino];
            let now = match vol.with_fs(|fs| fs.inode(ino).map(|r| (r.mode, r.nlink, r.parent))) {
                Ok((mode, nlink, parent)) => FileKind::from_mode(mode).map(|k| (k, nlink, parent)),
                Err(Error::NotFound) => None,
                Err(e) => return Err(e),
            };
            let count = |k: FileKind| {
                let was = match t.before {
                    Some(b) if b.kind == k && k == FileKind::Directory => i64::from(ino != InodeNo::ROOT),
                    Some(b) if b.kind == k => i64::from(b.nlink),
                    _ => 0,
                };
                was + t.refs[slot(k)]
            };
            if let Some(k) = KINDS.iter().copied().find(|&k| count(k) < 0) {
                return Err(refused(format!(
                    "it removes more entries naming inode {ino} as a {} than the mirror had",
                    word(k)
                )));
            }
            let Some((kind, nlink, parent)) = now else {
                let names: i64 = KINDS.iter().map(|&k| count(k)).sum();
                if names > 0 {
                    return Err(refused(format!(
                        "{names} entries name inode {ino}, which the stream removes or never creates"
                    )));
                }
                continue;
            };
            if let Some(k) = KINDS.iter().copied().find(|&k| k != kind && count(k) > 0) {
                return Err(refused(format!(
                    "an entry names inode {ino} as a {}, but it is a {}",
                    word(k),
                    word(kind)
                )));
            }
            let names = count(kind);
            if kind != FileKind::Directory {
                if names != i64::from(nlink) {
                    return Err(refused(format!("inode {ino} has link count {nlink} but {names} names")));
                }
                continue;
            }
            let subdirs =
                t.before.filter(|b| b.kind == FileKind::Directory).map_or(0, |b| i64::from(b.nlink) - 2) + t.subdirs;
            if i64::from(nlink) != 2 + subdirs {
                return Err(refused(format!(
                    "directory {ino} has link count {nlink}, its {subdirs} subdirectories make {}",
                    2 + subdirs
                )));
            }
            if ino == InodeNo::ROOT {
                if names > 0 {
                    return Err(refused("an entry names the root directory".into()));
                }
                continue;
            }
            if names != 1 {
                let why =
                    if names == 0 { "no name: nothing would reach it".to_string() } else { format!("{names} names") };
                return Err(refused(format!("directory {ino} has {why}")));
            }
            let mut holders: Vec<(InodeNo, i64)> = t.holders.clone();
            if let Some(b) = t.before.filter(|b| b.kind == FileKind::Directory) {
                match holders.iter_mut().find(|(d, _)| *d == b.parent) {
                    Some((_, n)) => *n += 1,
                    None => holders.push((b.parent, 1)),
                }
            }
            let holder = holders.iter().find(|(_, n)| *n > 0).map(|(d, _)| *d);
            if holder != Some(parent) {
                return Err(refused(format!(
                    "directory {ino} lives in {} but its '..' names {parent}",
                    holder.map_or_else(|| "no directory".to_string(), |h| h.to_string())
                )));
            }
            reachable(vol, ino, bound, &mut reaches_root)?;
        }
        Ok(())
    }
}

/// Directory `ino` leads up to the root through `..` (which the checks
/// above showed to be where each touched directory lives; untouched ones
/// are as they were).
fn reachable(vol: &Volume, ino: InodeNo, bound: u64, known: &mut HashSet<InodeNo>) -> Result<()> {
    let mut path = HashSet::new();
    let mut at = ino;
    while !known.contains(&at) {
        if !path.insert(at) || path.len() as u64 > bound {
            return Err(refused(format!("directory {ino} is in a cycle of directories the root does not reach")));
        }
        let up = vol.with_fs(|fs| fs.inode(at).map(|r| (FileKind::from_mode(r.mode), r.parent)));
        at = match up {
            Ok((Some(FileKind::Directory), p)) => p,
            Ok(_) | Err(Error::NotFound) => {
                return Err(refused(format!("directory {ino} leads up to {at}, which is no directory")));
            }
            Err(e) => return Err(e),
        };
    }
    known.extend(path);
    Ok(())
}
