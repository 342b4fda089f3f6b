//! Inode flags (`chattr`, `lsattr`; FS_IOC_GETFLAGS / SETFLAGS and
//! FS_IOC_FSGETXATTR / FSSETXATTR through the adapter) and the rules of the
//! two that forbid changes, for every caller, root included: an immutable
//! inode changes in nothing, and nothing is named into or out of an
//! immutable directory; an append-only file only grows at its end and
//! keeps its names, an append-only directory only gains names. The kernel
//! checks who may change the flags (CAP_LINUX_IMMUTABLE for these two,
//! the owner for the rest); the volume checks what they forbid, as ext4's
//! `IS_IMMUTABLE`/`IS_APPEND` tests do, because a FUSE kernel inode never
//! carries `S_IMMUTABLE` or `S_APPEND` (docs/DESIGN.md, "Inode flags").

use super::{Attr, Volume};
use crate::error::{Error, Result};
use crate::format::inode::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_PROJINHERIT, FLAG_SYNC, KNOWN_FLAGS, flags_for};
use crate::format::superblock::{FORMAT_MINOR_INODE_FLAGS, INCOMPAT_INODE_FLAGS};
use crate::meta_log::segments::OpKind;
use crate::namespace::Fs;
use crate::types::{FileKind, InodeNo};

/// Flags a new inode takes from its directory (ext4's inherited flags that
/// DualFS keeps), for its kind.
#[must_use]
pub(super) fn inherited(parent: u32, kind: FileKind) -> u32 {
    parent & !(FLAG_IMMUTABLE | FLAG_APPEND) & flags_for(kind)
}

/// EPERM when `flags` say immutable or append-only: neither changes its
/// attributes, its extended attributes, its size downwards, nor loses or
/// gains a name.
pub(super) fn fixed(flags: u32) -> Result<()> {
    if flags & (FLAG_IMMUTABLE | FLAG_APPEND) != 0 {
        return Err(Error::NotPermitted);
    }
    Ok(())
}

/// EPERM when `flags` say immutable.
pub(super) fn immutable(flags: u32) -> Result<()> {
    if flags & FLAG_IMMUTABLE != 0 {
        return Err(Error::NotPermitted);
    }
    Ok(())
}

/// EPERM when a name may not be added to directory `dir` (immutable).
pub(super) fn may_add_name(fs: &mut Fs, dir: InodeNo) -> Result<()> {
    immutable(fs.inode(dir)?.flags)
}

/// EPERM when the name in `dir` of `ino` may not be removed: either is
/// immutable or append-only.
pub(super) fn may_remove_name(fs: &mut Fs, dir: InodeNo, ino: InodeNo) -> Result<()> {
    fixed(fs.inode(dir)?.flags)?;
    fixed(fs.inode(ino)?.flags)
}

/// EXDEV when `ino` may not be named in `dir`: the directory hands its
/// project down (project inheritance) and `ino` is of another project, as
/// ext4's and XFS's rename and link refuse, so that a project's usage
/// stays within its tree.
pub(super) fn same_project(fs: &mut Fs, dir: InodeNo, ino: InodeNo) -> Result<()> {
    let d = fs.inode(dir)?;
    let (dir_flags, dir_project) = (d.flags, d.project);
    if dir_flags & FLAG_PROJINHERIT != 0 && fs.inode(ino)?.project != dir_project {
        return Err(Error::CrossProject);
    }
    Ok(())
}

impl Volume {
    /// Sets the inode flags of `ino` to `flags` and, when given, its
    /// project id. Flags DualFS does not keep are refused; directory-only
    /// ones are dropped from other kinds. The first flag or project id of
    /// a volume made before format 1.6 marks it ([`INCOMPAT_INODE_FLAGS`]).
    ///
    /// # Errors
    /// `NotSupported` for an unknown flag or a symlink or device; `NotFound`.
    pub fn set_flags(&self, ino: InodeNo, flags: u32, project: Option<u32>) -> Result<Attr> {
        if flags & !KNOWN_FLAGS != 0 {
            return Err(Error::NotSupported);
        }
        self.check_writable()?;
        if flags != 0 || project.is_some_and(|p| p != 0) {
            self.mark_inode_flags()?;
        }
        let attr = self.mutate(OpKind::Grow, |fs, now| {
            let kind = Volume::kind_of(fs, ino)?;
            if !matches!(kind, FileKind::Directory | FileKind::Regular) {
                return Err(Error::NotSupported);
            }
            let flags = flags & flags_for(kind);
            if let Some(p) = project {
                let rec = fs.inode(ino)?.clone();
                fs.quota_allows_move(&rec, &crate::format::inode::InodeRecord { project: p, ..rec.clone() }, now)?;
            }
            let mut rec = fs.inode_mut(ino)?;
            rec.flags = flags;
            if let Some(p) = project {
                rec.project = p;
            }
            rec.ctime = now;
            drop(rec);
            Volume::attr(fs, ino)
        })?;
        // A sync inode's changes are durable when they return, this one
        // included (ext4 commits a flag change that leaves the inode
        // sync): a later write's fdatasync then promises the flag too.
        if attr.flags & FLAG_SYNC != 0 {
            self.fsync(ino)?;
        }
        Ok(attr)
    }

    /// Marks the volume as keeping inode flags and project ids
    /// ([`INCOMPAT_INODE_FLAGS`], format 1.6), before the first is written:
    /// an older reader then refuses it instead of misreading the records.
    ///
    /// # Errors
    /// A superblock write fails.
    pub(super) fn mark_inode_flags(&self) -> Result<()> {
        // As a snapshot's: no commit writes the superblocks meanwhile.
        let _commit = super::lock(&self.commit);
        self.mark_features(INCOMPAT_INODE_FLAGS, FORMAT_MINOR_INODE_FLAGS)
    }
}
