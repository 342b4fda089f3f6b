//! The namespace operations of [`Volume`]: names, attributes, listings.
//! File data is in `files.rs`, extended attributes in `xattrs.rs`.
//!
//! Each one validates everything it can before it changes anything, so that
//! a refused operation leaves no trace; then it changes the namespace inside
//! one `mutate` step, which lands whole in one partial segment.

use super::{Attr, Changer, Creds, Listing, RenameFlags, SetAttr, Stamp, TimeSet, Volume, flags, lock};
use crate::error::{Error, Result};
use crate::format::inode::InodeRecord;
use crate::format::inode::{Body, FLAG_DIRSYNC, FLAG_PROJINHERIT, FLAG_SYNC};
use crate::format::name::NAME_MAX;
use crate::meta_log::segments::OpKind;
use crate::namespace::dir::DirEntry;
use crate::namespace::file::MAX_FILE_SIZE;
use crate::namespace::inode::NewInode;
use crate::namespace::quota;
use crate::namespace::{FileName, Fs};
use crate::types::{FileKind, InodeNo, Timestamp};

/// Most hard links an inode may have (as ext4).
pub const LINK_MAX: u32 = 65000;
/// Longest symlink target (PATH_MAX minus the NUL).
pub const SYMLINK_MAX: usize = 4095;

const S_ISGID: u32 = 0o2000;

/// The extended attribute that grants file capabilities on exec.
const SECURITY_CAPABILITY: &[u8] = b"security.capability";

/// Drops what a write, truncation or fallocate must drop from a regular
/// file (Linux's `file_remove_privs`): file capabilities always, and the
/// set-id bits [`Changer::after_write`] says go. Returns whether anything
/// changed.
pub(super) fn drop_privileges(fs: &mut Fs, ino: InodeNo, changer: &Changer) -> Result<bool> {
    let rec = fs.inode(ino)?;
    let mode = (rec.mode & !0o7777) | changer.after_write(rec.mode & 0o7777, rec.gid);
    drop_mode_and_capabilities(fs, ino, mode)
}

/// Sets `mode` when it differs and removes file capabilities; whether
/// anything changed.
fn drop_mode_and_capabilities(fs: &mut Fs, ino: InodeNo, mode: u32) -> Result<bool> {
    let mut changed = false;
    if mode != fs.inode(ino)?.mode {
        fs.inode_mut(ino)?.mode = mode;
        changed = true;
    }
    match fs.xattr_remove(ino, SECURITY_CAPABILITY) {
        Ok(()) => changed = true,
        Err(Error::NoXattr) => {}
        Err(e) => return Err(e),
    }
    Ok(changed)
}

/// Whether [`drop_privileges`] would change anything, without changing it.
pub(super) fn has_privileges(fs: &mut Fs, ino: InodeNo, changer: &Changer) -> Result<bool> {
    let rec = fs.inode(ino)?;
    if changer.after_write(rec.mode & 0o7777, rec.gid) != rec.mode & 0o7777 {
        return Ok(true);
    }
    fs.xattr_has(ino, SECURITY_CAPABILITY)
}

fn touch_dir(fs: &mut Fs, dir: InodeNo, now: Timestamp) -> Result<()> {
    let mut d = fs.inode_mut(dir)?;
    d.mtime = now;
    d.ctime = now;
    Ok(())
}

fn lookup_entry(fs: &mut Fs, dir: InodeNo, name: &FileName) -> Result<DirEntry> {
    fs.dir_lookup(dir, name.as_bytes())?.ok_or(Error::NotFound)
}

/// Whether `dir` is `ancestor` or lies below it.
fn is_within(fs: &mut Fs, mut dir: InodeNo, ancestor: InodeNo) -> Result<bool> {
    // Bounded: a parent chain cannot be longer than the number of inodes
    // (the map's length: its count of those in use may not be whole yet).
    for _ in 0..=fs.log.ifile().inodes.len() {
        if dir == ancestor {
            return Ok(true);
        }
        if dir == InodeNo::ROOT {
            return Ok(false);
        }
        dir = fs.inode(dir)?.parent;
    }
    Err(Error::corrupt_meta("inode", 0, format!("the parent chain of directory {dir} loops")))
}

impl Volume {
    /// Finds `name` in directory `parent` (`.` and `..` included).
    ///
    /// # Errors
    /// `NotFound`, `NotDir`, `NameTooLong`.
    pub fn lookup(&self, parent: InodeNo, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong);
        }
        self.read_op(|fs| {
            if Volume::kind_of(fs, parent)? != FileKind::Directory {
                return Err(Error::NotDir);
            }
            let ino = match name {
                b"." => parent,
                b".." => match fs.inode(parent)?.parent {
                    InodeNo(0) => InodeNo::ROOT,
                    p => p,
                },
                _ => fs.dir_lookup(parent, name)?.ok_or(Error::NotFound)?.ino,
            };
            Volume::attr(fs, ino)
        })
    }

    /// The attributes of `ino`.
    ///
    /// # Errors
    /// `NotFound` for a free inode number.
    pub fn getattr(&self, ino: InodeNo) -> Result<Attr> {
        self.read_op(|fs| Volume::attr(fs, ino))
    }

    /// Changes attributes: mode, owner, size, times.
    ///
    /// # Errors
    /// `FileTooBig`, `IsDir` for a directory's size, `NotFound`.
    pub fn setattr(&self, ino: InodeNo, set: &SetAttr) -> Result<Attr> {
        self.prefetch(|fs| fs.inode(ino).map(|_| ()));
        {
            // An immutable inode changes in nothing; an append-only one
            // keeps its mode, owner and size (the kernel's own write-back
            // of the times of its appends comes as a setattr too).
            let rec = lock(&self.fs).inode(ino)?.clone();
            flags::immutable(rec.flags)?;
            if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() || set.size.is_some() {
                flags::fixed(rec.flags)?;
            }
            if flags::times_given(set) {
                flags::fixed(rec.flags)?;
            }
        }
        if let Some(size) = set.size {
            if size > MAX_FILE_SIZE {
                return Err(Error::FileTooBig);
            }
            match Volume::kind_of(&mut lock(&self.fs), ino)? {
                FileKind::Regular => {}
                FileKind::Directory => return Err(Error::IsDir),
                _ => return Err(Error::Invalid("only regular files have a size to set")),
            }
            self.truncate(ino, size)?;
        }
        self.mutate(OpKind::Grow, |fs, now| {
            let kind = Volume::kind_of(fs, ino)?;
            if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() {
                // The record held for a replacement would undo this change.
                fs.release_replacement(ino)?;
            }
            if set.uid.is_some() || set.gid.is_some() {
                let rec = fs.inode(ino)?.clone();
                let to =
                    InodeRecord { uid: set.uid.unwrap_or(rec.uid), gid: set.gid.unwrap_or(rec.gid), ..rec.clone() };
                fs.quota_allows_move(&rec, &to, now)?;
            }
            let mut rec = fs.inode_mut(ino)?;
            let stamp_size = set.size.is_some() && set.size_stamp == Stamp::Now;
            let mut changed = stamp_size;
            if let Some(mode) = set.mode {
                rec.mode = (rec.mode & !0o7777) | (mode & 0o7777);
                changed = true;
            }
            let new_mode = rec.mode;
            let old_gid = rec.gid;
            let chown = set.uid.is_some() || set.gid.is_some();
            if chown {
                rec.uid = set.uid.unwrap_or(rec.uid);
                rec.gid = set.gid.unwrap_or(rec.gid);
                changed = true;
            }
            let resolve = |t: TimeSet| match t {
                TimeSet::Now => now,
                TimeSet::At(t) => t,
            };
            if let Some(t) = set.atime {
                rec.atime = resolve(t);
                changed = true;
            }
            if let Some(t) = set.mtime {
                rec.mtime = resolve(t);
                changed = true;
            } else if stamp_size {
                rec.mtime = now;
            }
            if changed {
                rec.ctime = set.ctime.unwrap_or(now);
            } else if let Some(c) = set.ctime {
                rec.ctime = c;
            }
            drop(rec);
            // chown(2) of a non-directory, even to the same owner, drops its
            // privileges (Linux's ATTR_KILL_SUID/SGID/PRIV); a truncation
            // drops its capabilities, and its set-id bits as a write does.
            // An explicit mode wins (the kernel computed it).
            if (chown || set.size.is_some()) && !matches!(kind, FileKind::Directory | FileKind::Symlink) {
                let perm = new_mode & 0o7777;
                let perm = match set.mode {
                    Some(_) => perm,
                    None if chown => set.changer.after_chown(perm, old_gid),
                    None => set.changer.after_write(perm, old_gid),
                };
                drop_mode_and_capabilities(fs, ino, (new_mode & !0o7777) | perm)?;
            }
            if set.mode.is_some() && kind != FileKind::Symlink {
                // chmod rewrites the access ACL's owner, mask and other entries.
                fs.acl_chmod(ino, new_mode)?;
            }
            Volume::attr(fs, ino)
        })
    }

    /// Sets the size of a regular file, freeing what lies beyond in steps.
    pub(super) fn truncate(&self, ino: InodeNo, size: u64) -> Result<()> {
        {
            let mut fs = lock(&self.fs);
            fs.pages.expire(ino);
            // A truncation to zero usually starts a rewrite (O_TRUNC): the
            // old contents stay on disk until the new ones are complete.
            if size == 0 {
                let now = self.now();
                fs.hold_for_replacement(ino, now)?;
            }
        }
        let mut first = true;
        loop {
            let done = self.mutate(OpKind::Shrink, |fs, _| {
                let done = fs.truncate_step(ino, size)?;
                let orphan = fs.is_orphan(ino);
                if !done && first && !orphan {
                    // Recovery trims whatever a crash leaves beyond the size.
                    fs.set_orphan(ino, true)?;
                } else if done && !first && orphan && fs.inode(ino)?.nlink > 0 {
                    fs.set_orphan(ino, false)?;
                }
                Ok(done)
            })?;
            first = false;
            if done {
                return Ok(());
            }
        }
    }

    /// Creates an inode of `kind` named `name` in `parent`, with `fill` to
    /// set up its body. `perm` is limited by the directory's default ACL,
    /// which the inode inherits, or else by the umask in `creds`.
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        parent: InodeNo,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u64,
        creds: Creds,
        fill: impl FnOnce(&mut Fs, InodeNo) -> Result<()>,
    ) -> Result<Attr> {
        let name = FileName::new(name)?;
        self.prefetch(|fs| {
            fs.inode(parent)?;
            fs.dir_lookup(parent, name.as_bytes()).map(|_| ())
        });
        let mut fill = Some(fill);
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
            if kind == FileKind::Directory && p.nlink >= LINK_MAX {
                return Err(Error::TooManyLinks);
            }
            // A set-group-id directory hands its group to what is created
            // in it, and the bit itself to subdirectories.
            let (gid, perm) = if p.mode & S_ISGID != 0 {
                (p.gid, if kind == FileKind::Directory { perm | S_ISGID } else { perm })
            } else {
                (creds.gid, perm)
            };
            if fs.dir_lookup(parent, name.as_bytes())?.is_some() {
                return Err(Error::Exists);
            }
            // The directory's default ACL, or else the umask, limits the mode.
            let inherited = fs.acl_inherit(parent, kind, perm, creds.umask)?;
            let perm = inherited.perm;
            let project = if parent_flags & FLAG_PROJINHERIT != 0 { parent_project } else { 0 };
            fs.quota_allows(quota::ids_of(creds.uid, gid, project), quota::Adding { blocks: 0, inodes: 1 }, now)?;
            let ino = fs.new_inode(parent, NewInode { kind, perm, uid: creds.uid, gid, rdev }, now)?;
            if parent_flags != 0 {
                let mut rec = fs.inode_mut(ino)?;
                rec.flags = flags::inherited(parent_flags, kind);
                if parent_flags & FLAG_PROJINHERIT != 0 {
                    rec.project = parent_project;
                }
            }
            fs.acl_store_inherited(ino, &inherited)?;
            fill.take().ok_or(Error::Invalid("operation retried after a partial change"))?(fs, ino)?;
            fs.dir_insert(parent, &name, ino, kind)?;
            touch_dir(fs, parent, now)?;
            if kind == FileKind::Directory {
                fs.inode_mut(parent)?.nlink += 1;
            }
            Volume::attr(fs, ino)
        })?;
        self.remember(attr.ino, 1);
        self.dirsync(&[parent])?;
        Ok(attr)
    }

    /// Creates a regular file. The new inode is remembered once (as a lookup).
    ///
    /// # Errors
    /// `Exists`, `NotDir`, name errors, no space.
    pub fn create(&self, parent: InodeNo, name: &[u8], perm: u32, creds: Creds) -> Result<Attr> {
        self.make(parent, name, FileKind::Regular, perm, 0, creds, |_, _| Ok(()))
    }

    /// Creates a directory. The new inode is remembered once.
    ///
    /// # Errors
    /// `Exists`, `NotDir`, `TooManyLinks`, name errors, no space.
    pub fn mkdir(&self, parent: InodeNo, name: &[u8], perm: u32, creds: Creds) -> Result<Attr> {
        self.make(parent, name, FileKind::Directory, perm, 0, creds, |_, _| Ok(()))
    }

    /// Creates a device node, fifo, socket or regular file. The new inode is remembered once.
    ///
    /// # Errors
    /// `Invalid` for directories and symlinks; as [`Volume::create`].
    pub fn mknod(
        &self,
        parent: InodeNo,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u64,
        creds: Creds,
    ) -> Result<Attr> {
        if matches!(kind, FileKind::Directory | FileKind::Symlink) {
            return Err(Error::Invalid("mknod cannot make directories or symlinks"));
        }
        let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) { rdev } else { 0 };
        self.make(parent, name, kind, perm, rdev, creds, |_, _| Ok(()))
    }

    /// Creates a symbolic link to `target`. The new inode is remembered once.
    ///
    /// # Errors
    /// `NameTooLong` for a target over 4095 bytes, `Invalid` for an empty one; as [`Volume::create`].
    pub fn symlink(&self, parent: InodeNo, name: &[u8], target: &[u8], creds: Creds) -> Result<Attr> {
        if target.is_empty() {
            return Err(Error::NotFound);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Error::NameTooLong);
        }
        if target.contains(&0) {
            return Err(Error::Invalid("symlink target contains NUL"));
        }
        self.make(parent, name, FileKind::Symlink, 0o777, 0, creds, |fs, ino| fs.set_symlink_target(ino, target))
    }

    /// The target of a symbolic link. Reading it is an access (atime).
    ///
    /// # Errors
    /// `NotSymlink`.
    pub fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>> {
        let (target, touch) = self.read_op(|fs| {
            if Volume::kind_of(fs, ino)? != FileKind::Symlink {
                return Err(Error::NotSymlink);
            }
            let target = match fs.inode(ino)?.body.clone() {
                Body::Inline(t) => t,
                Body::Blob { len, nodes } => fs.read_blob(&nodes, len)?,
                _ => return Err(Error::corrupt_meta("inode", 0, format!("symlink {ino} has no target"))),
            };
            Ok((target, self.touch_atime_locked(fs, ino)))
        })?;
        self.touch_atime_after(ino, touch);
        Ok(target)
    }

    /// Adds the name `name` in `parent` for `ino`. The inode is remembered once.
    ///
    /// # Errors
    /// `NotPermitted` for directories, `TooManyLinks`, `Exists`.
    pub fn link(&self, ino: InodeNo, parent: InodeNo, name: &[u8]) -> Result<Attr> {
        let name = FileName::new(name)?;
        self.prefetch(|fs| {
            fs.inode(ino)?;
            fs.inode(parent)?;
            fs.dir_lookup(parent, name.as_bytes()).map(|_| ())
        });
        let attr = self.mutate(OpKind::Grow, |fs, now| {
            let kind = Volume::kind_of(fs, ino)?;
            if kind == FileKind::Directory {
                return Err(Error::NotPermitted);
            }
            if Volume::kind_of(fs, parent)? != FileKind::Directory {
                return Err(Error::NotDir);
            }
            if fs.inode(parent)?.nlink == 0 {
                return Err(Error::NotFound);
            }
            flags::fixed(fs.inode(ino)?.flags)?;
            flags::may_add_name(fs, parent)?;
            flags::same_project(fs, parent, ino)?;
            let nlink = fs.inode(ino)?.nlink;
            if nlink >= LINK_MAX {
                return Err(Error::TooManyLinks);
            }
            if fs.dir_lookup(parent, name.as_bytes())?.is_some() {
                return Err(Error::Exists);
            }
            fs.release_replacement(ino)?;
            fs.dir_insert(parent, &name, ino, kind)?;
            touch_dir(fs, parent, now)?;
            let mut rec = fs.inode_mut(ino)?;
            rec.nlink += 1;
            rec.ctime = now;
            drop(rec);
            if nlink == 0 {
                fs.set_orphan(ino, false)?;
                fs.intents.named_orphan(ino);
            }
            Volume::attr(fs, ino)
        })?;
        self.remember(attr.ino, 1);
        self.dirsync(&[parent])?;
        Ok(attr)
    }

    /// Removes a non-directory name.
    ///
    /// # Errors
    /// `NotFound`, `IsDir`, `NotDir`.
    pub fn unlink(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        let name = FileName::new(name)?;
        self.prefetch(|fs| {
            let e = lookup_entry(fs, parent, &name)?;
            fs.inode(parent)?;
            fs.inode(e.ino).map(|_| ())
        });
        let ino = self.mutate(OpKind::Shrink, |fs, now| {
            let e = lookup_entry(fs, parent, &name)?;
            // As the kernel's `may_delete`: the flags are asked before the kind.
            flags::may_remove_name(fs, parent, e.ino)?;
            if e.kind == FileKind::Directory {
                return Err(Error::IsDir);
            }
            fs.dir_remove(parent, e.position)?;
            touch_dir(fs, parent, now)?;
            Volume::unlink_inode(fs, e.ino, now)?;
            Ok(e.ino)
        })?;
        self.drop_link(ino)?;
        self.dirsync(&[parent])
    }

    /// One link of `ino` is gone: count it, and put an inode left with no
    /// links on the orphan list in the same step, so a crash cannot leak it.
    fn unlink_inode(fs: &mut Fs, ino: InodeNo, now: Timestamp) -> Result<()> {
        fs.release_replacement(ino)?;
        let mut rec = fs.inode_mut(ino)?;
        rec.nlink = rec.nlink.checked_sub(1).ok_or_else(|| {
            Error::corrupt_meta("inode", 0, format!("inode {ino} has no links, yet a directory names it"))
        })?;
        rec.ctime = now;
        let gone = rec.nlink == 0;
        drop(rec);
        if gone {
            fs.set_orphan(ino, true)?;
        }
        Ok(())
    }

    /// Removes an empty directory.
    ///
    /// # Errors
    /// `NotFound`, `NotDir`, `NotEmpty`.
    pub fn rmdir(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        let name = FileName::new(name)?;
        self.prefetch(|fs| {
            let e = lookup_entry(fs, parent, &name)?;
            fs.inode(parent)?;
            fs.inode(e.ino)?;
            fs.dir_is_empty(e.ino).map(|_| ())
        });
        let ino = self.mutate(OpKind::Shrink, |fs, now| {
            let e = lookup_entry(fs, parent, &name)?;
            // As the kernel's `may_delete`: the flags are asked before the
            // kind and the contents (EPERM, not ENOTEMPTY).
            flags::may_remove_name(fs, parent, e.ino)?;
            if e.kind != FileKind::Directory {
                return Err(Error::NotDir);
            }
            if !fs.dir_is_empty(e.ino)? {
                return Err(Error::NotEmpty);
            }
            fs.dir_remove(parent, e.position)?;
            touch_dir(fs, parent, now)?;
            fs.inode_mut(parent)?.nlink -= 1;
            let mut rec = fs.inode_mut(e.ino)?;
            rec.nlink = 0;
            rec.ctime = now;
            drop(rec);
            fs.set_orphan(e.ino, true)?;
            Ok(e.ino)
        })?;
        self.drop_link(ino)?;
        self.dirsync(&[parent])
    }

    /// Renames `name` in `parent` to `new_name` in `new_parent`.
    ///
    /// # Errors
    /// `NotFound`, `Exists` (noreplace), `Invalid` (a directory into
    /// itself, exchange with noreplace), `NotDir`/`IsDir`/`NotEmpty` for
    /// incompatible replacements.
    pub fn rename(
        &self,
        parent: InodeNo,
        name: &[u8],
        new_parent: InodeNo,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.exchange && flags.noreplace {
            return Err(Error::Invalid("RENAME_EXCHANGE and RENAME_NOREPLACE together"));
        }
        if flags.exchange && flags.whiteout.is_some() {
            return Err(Error::Invalid("RENAME_EXCHANGE and RENAME_WHITEOUT together"));
        }
        // The broken rule: the whiteout in a commit group after the rename's.
        let apart = flags.whiteout.is_some() && crate::faults::active(crate::faults::Fault::WhiteoutApart);
        let name = FileName::new(name)?;
        let new_name = FileName::new(new_name)?;
        self.prefetch(|fs| {
            fs.inode(parent)?;
            fs.inode(new_parent)?;
            let src = lookup_entry(fs, parent, &name)?;
            fs.inode(src.ino)?;
            if let Some(d) = fs.dir_lookup(new_parent, new_name.as_bytes())? {
                fs.inode(d.ino)?;
            }
            Ok(())
        });
        let replaced = self.mutate(OpKind::Grow, |fs, now| {
            for d in [parent, new_parent] {
                if Volume::kind_of(fs, d)? != FileKind::Directory {
                    return Err(Error::NotDir);
                }
            }
            let src = lookup_entry(fs, parent, &name)?;
            let dst = fs.dir_lookup(new_parent, new_name.as_bytes())?;
            if flags.exchange && dst.is_none() {
                return Err(Error::NotFound);
            }
            if flags.noreplace && dst.is_some() {
                return Err(Error::Exists);
            }
            // Immutable and append-only names stay where they are.
            self::flags::may_remove_name(fs, parent, src.ino)?;
            self::flags::may_add_name(fs, new_parent)?;
            if let Some(d) = &dst {
                self::flags::may_remove_name(fs, new_parent, d.ino)?;
                if flags.exchange {
                    self::flags::may_add_name(fs, parent)?;
                }
            }
            // Into a directory of another project under project
            // inheritance: EXDEV, so that mv copies (ext4's and XFS's rule).
            self::flags::same_project(fs, new_parent, src.ino)?;
            if let Some(d) = &dst
                && flags.exchange
            {
                self::flags::same_project(fs, parent, d.ino)?;
            }
            if let Some(d) = &dst
                && d.ino == src.ino
            {
                // Two names of one inode (or the same name): nothing to do.
                return Ok(None);
            }
            if src.kind == FileKind::Directory && is_within(fs, new_parent, src.ino)? {
                return Err(Error::Invalid("cannot move a directory into itself"));
            }
            if flags.exchange {
                let dst = dst.ok_or(Error::NotFound)?;
                if dst.kind == FileKind::Directory && is_within(fs, parent, dst.ino)? {
                    return Err(Error::Invalid("cannot move a directory into itself"));
                }
                fs.dir_replace(parent, &src, dst.ino, dst.kind)?;
                fs.dir_replace(new_parent, &dst, src.ino, src.kind)?;
                Volume::reparent(fs, src.ino, src.kind, parent, new_parent)?;
                Volume::reparent(fs, dst.ino, dst.kind, new_parent, parent)?;
                for i in [src.ino, dst.ino] {
                    fs.inode_mut(i)?.ctime = now;
                }
                touch_dir(fs, parent, now)?;
                touch_dir(fs, new_parent, now)?;
                return Ok(None);
            }
            if let Some(d) = &dst {
                match (src.kind == FileKind::Directory, d.kind == FileKind::Directory) {
                    (true, false) => return Err(Error::NotDir),
                    (false, true) => return Err(Error::IsDir),
                    (true, true) if !fs.dir_is_empty(d.ino)? => return Err(Error::NotEmpty),
                    _ => {}
                }
            }
            fs.release_replacement(src.ino)?;
            match &dst {
                Some(d) => {
                    // Replace-by-rename (ext4's auto_da_alloc, made atomic):
                    // the new file's data goes with the commit that makes
                    // the rename durable, none of it left as a delayed tail.
                    if src.kind == FileKind::Regular && !crate::faults::active(crate::faults::Fault::RenameBeforeData) {
                        fs.pages.expire(src.ino);
                    }
                    fs.dir_replace(new_parent, d, src.ino, src.kind)?;
                }
                None => {
                    fs.dir_insert(new_parent, &new_name, src.ino, src.kind)?;
                }
            }
            fs.dir_remove(parent, src.position)?;
            if let Some((uid, gid)) = flags.whiteout
                && !apart
            {
                make_whiteout(fs, parent, &name, uid, gid, now)?;
            }
            Volume::reparent(fs, src.ino, src.kind, parent, new_parent)?;
            fs.inode_mut(src.ino)?.ctime = now;
            touch_dir(fs, parent, now)?;
            touch_dir(fs, new_parent, now)?;
            if let Some(d) = &dst {
                if d.kind == FileKind::Directory {
                    fs.inode_mut(new_parent)?.nlink -= 1;
                    let mut rec = fs.inode_mut(d.ino)?;
                    rec.nlink = 0;
                    rec.ctime = now;
                    drop(rec);
                    fs.set_orphan(d.ino, true)?;
                } else {
                    Volume::unlink_inode(fs, d.ino, now)?;
                }
                return Ok(Some(d.ino));
            }
            Ok(None)
        })?;
        if let Some(ino) = replaced {
            self.drop_link(ino)?;
        }
        if let Some((uid, gid)) = flags.whiteout
            && apart
        {
            self.commit()?;
            self.mutate(OpKind::Grow, |fs, now| make_whiteout(fs, parent, &name, uid, gid, now))?;
        }
        self.dirsync(&[parent, new_parent])
    }

    /// Makes a change of the directories `dirs` durable before it returns
    /// when one of them is dirsync or sync (`chattr +D`, `+S`): a commit.
    fn dirsync(&self, dirs: &[InodeNo]) -> Result<()> {
        let synced = self.read_op(|fs| {
            let mut any = false;
            for d in dirs {
                any |= fs.inode(*d)?.flags & (FLAG_DIRSYNC | FLAG_SYNC) != 0;
            }
            Ok(any)
        })?;
        if synced { self.fsync(dirs[0]) } else { Ok(()) }
    }

    /// A directory moved from `from` to `to`: its `..` and both link counts follow.
    fn reparent(fs: &mut Fs, ino: InodeNo, kind: FileKind, from: InodeNo, to: InodeNo) -> Result<()> {
        if kind != FileKind::Directory || from == to {
            return Ok(());
        }
        fs.inode_mut(ino)?.parent = to;
        fs.inode_mut(from)?.nlink -= 1;
        fs.inode_mut(to)?.nlink += 1;
        Ok(())
    }

    /// Lists `dir` from `offset` (0 = start; else a `next` of an earlier
    /// entry), calling `visit` until it returns false. `.` and `..` come
    /// first. Updates the access time as the mount's [`super::AtimeMode`] says.
    ///
    /// # Errors
    /// `NotDir`; I/O and corruption errors.
    pub fn readdir(&self, dir: InodeNo, offset: u64, visit: &mut dyn FnMut(Listing) -> bool) -> Result<()> {
        let touch = self.read_op(|fs| {
            if Volume::kind_of(fs, dir)? != FileKind::Directory {
                return Err(Error::NotDir);
            }
            Ok(self.touch_atime_locked(fs, dir))
        })?;
        self.touch_atime_after(dir, touch);
        // The next position to list: an attempt that stops at a cold block
        // (read_op runs it again) resumes after what `visit` took.
        let mut at = offset;
        // What the caller took, for reading the files ahead (`listed.rs`).
        let mut taken: Vec<(InodeNo, FileKind)> = Vec::new();
        let r = self.read_op(|fs| {
            if at == 0 {
                if !visit(Listing { name: b".".to_vec(), ino: dir, kind: FileKind::Directory, next: 1 }) {
                    return Ok(());
                }
                at = 1;
            }
            if at == 1 {
                let parent = match fs.inode(dir)?.parent {
                    InodeNo(0) => InodeNo::ROOT,
                    p => p,
                };
                if !visit(Listing { name: b"..".to_vec(), ino: parent, kind: FileKind::Directory, next: 2 }) {
                    return Ok(());
                }
                at = 2;
            }
            fs.dir_scan(dir, at, &mut |e| {
                let next = e.position + 1;
                let (ino, kind) = (e.ino, e.kind);
                let more = visit(Listing { name: e.name, ino, kind, next });
                if more {
                    at = next;
                    taken.push((ino, kind));
                }
                more
            })
        });
        if offset == 0 || !taken.is_empty() {
            lock(&self.listed).listed(dir, offset, &taken);
        }
        self.read_listed_ahead(dir);
        r
    }

    /// Asks the data device for the first files of `dir`'s listing if its
    /// lister reads the files it lists (`listed.rs`): their inodes are
    /// loaded for it, which readdirplus does next anyway.
    fn read_listed_ahead(&self, dir: InodeNo) {
        let Some((id, files, window)) = lock(&self.listed).eager(dir) else { return };
        // A failure leaves the files to be read as they come.
        let Ok((runs, n)) = self.read_op(|fs| super::listed::plan_eager(fs, &files, window)) else { return };
        lock(&self.listed).eager_asked(id, n);
        for (first, count) in runs {
            self.data.will_need(first, count);
        }
    }
}

/// Puts a whiteout (a character device 0:0 of mode 0, as the kernel's
/// `vfs_whiteout` makes) under `name` in `dir`, the name a rename just
/// took away.
fn make_whiteout(fs: &mut Fs, dir: InodeNo, name: &FileName, uid: u32, gid: u32, now: Timestamp) -> Result<()> {
    let ino = fs.new_inode(dir, NewInode { kind: FileKind::CharDevice, perm: 0, uid, gid, rdev: 0 }, now)?;
    fs.dir_insert(dir, name, ino, FileKind::CharDevice)?;
    Ok(())
}
