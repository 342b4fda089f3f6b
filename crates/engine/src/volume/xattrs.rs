//! The extended-attribute operations of [`Volume`], POSIX ACLs included:
//! `system.posix_acl_access` and `system.posix_acl_default` are xattrs
//! with ext4's rules (see [`crate::namespace::acl`]).

use super::Volume;
use crate::error::{Error, Result};
use crate::meta_log::segments::OpKind;
use crate::namespace::acl::{Acl, AclKind};
use crate::namespace::xattr::SetMode;
use crate::types::{FileKind, InodeNo};

const S_ISGID: u32 = 0o2000;

/// The namespaces a Linux file system stores (ACLs are the `system.*` names
/// it knows); like ext4, anything else is EOPNOTSUPP, and a namespace with
/// nothing after it EINVAL.
fn check_name(name: &[u8]) -> Result<()> {
    if AclKind::of_xattr(name).is_some() {
        return Ok(());
    }
    for prefix in [&b"user."[..], b"trusted.", b"security."] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return if rest.is_empty() {
                Err(Error::Invalid("an attribute name needs more than its namespace"))
            } else {
                Ok(())
            };
        }
    }
    Err(Error::NotSupported)
}

impl Volume {
    /// The value of an extended attribute.
    ///
    /// # Errors
    /// `NoXattr`; `NotSupported` outside the `user`, `trusted` and
    /// `security` namespaces and the ACL names.
    pub fn getxattr(&self, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        check_name(name)?;
        self.read_op(|fs| fs.xattr_get(ino, name))
    }

    /// Every extended attribute name.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn listxattr(&self, ino: InodeNo) -> Result<Vec<Vec<u8>>> {
        let mut names = self.read_op(|fs| fs.xattr_list(ino))?;
        if ino == InodeNo::ROOT {
            // The quota record is the volume's, not a caller's.
            names.retain(|n| n != crate::format::quota::QUOTA_XATTR);
        }
        Ok(names)
    }

    /// Sets an extended attribute. An ACL name sets the ACL, as
    /// [`Volume::set_acl`] (`mode` does not apply, as in Linux).
    ///
    /// # Errors
    /// `Exists`/`NoXattr` per `mode`, `XattrTooBig`, `NameTooLong`;
    /// `Invalid` for a malformed ACL; as [`Volume::getxattr`] for names.
    pub fn setxattr(&self, ino: InodeNo, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        check_name(name)?;
        if let Some(kind) = AclKind::of_xattr(name) {
            return self.set_acl(ino, kind, Some(value), false);
        }
        self.mutate(OpKind::Grow, |fs, now| {
            super::flags::fixed(fs.inode(ino)?.flags)?;
            // The record held for a replacement would undo this change.
            fs.release_replacement(ino)?;
            fs.xattr_set(ino, name, value, mode)?;
            fs.inode_mut(ino)?.ctime = now;
            Ok(())
        })
    }

    /// Removes an extended attribute. Removing an ACL that is not there
    /// succeeds, as in Linux.
    ///
    /// # Errors
    /// `NoXattr`; as [`Volume::getxattr`] for names.
    pub fn removexattr(&self, ino: InodeNo, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if let Some(kind) = AclKind::of_xattr(name) {
            return self.set_acl(ino, kind, None, false);
        }
        self.mutate(OpKind::Shrink, |fs, now| {
            super::flags::fixed(fs.inode(ino)?.flags)?;
            fs.release_replacement(ino)?;
            fs.xattr_remove(ino, name)?;
            fs.inode_mut(ino)?.ctime = now;
            Ok(())
        })
    }

    /// Sets (`Some`, the xattr form) or removes (`None`) a POSIX ACL, as ext4
    /// does. An access ACL sets the permission bits (group bits from the
    /// mask if there is one) and is stored only if it says more than they
    /// do; `clear_setgid` drops the set-group-id bit with it (the caller is
    /// neither in the file's group nor privileged). A default ACL belongs
    /// to directories only. ctime changes if anything does.
    ///
    /// # Errors
    /// `Invalid` for a malformed ACL or a default ACL on a non-directory;
    /// `NotSupported` on a symbolic link; no space for the attribute.
    pub fn set_acl(&self, ino: InodeNo, kind: AclKind, value: Option<&[u8]>, clear_setgid: bool) -> Result<()> {
        let acl = match value {
            Some(v) => Acl::decode(v)?,
            None => None,
        };
        let op = if acl.is_some() { OpKind::Grow } else { OpKind::Shrink };
        self.mutate(op, |fs, now| {
            let file_kind = Volume::kind_of(fs, ino)?;
            if file_kind == FileKind::Symlink {
                return Err(Error::NotSupported);
            }
            super::flags::fixed(fs.inode(ino)?.flags)?;
            fs.release_replacement(ino)?;
            let mut changed = false;
            let mut stored = acl.as_ref();
            match kind {
                AclKind::Access => {
                    if let Some(a) = &acl {
                        let (perm, extended) = a.mode();
                        let old = fs.inode(ino)?.mode;
                        let mut mode = (old & !0o777) | perm;
                        if clear_setgid {
                            mode &= !S_ISGID;
                        }
                        if mode != old {
                            fs.inode_mut(ino)?.mode = mode;
                            changed = true;
                        }
                        if !extended {
                            stored = None;
                        }
                    }
                }
                AclKind::Default if file_kind != FileKind::Directory => {
                    return if acl.is_some() { Err(Error::Invalid("a default ACL needs a directory")) } else { Ok(()) };
                }
                AclKind::Default => {}
            }
            changed |= fs.acl_put(ino, kind, stored)?;
            if changed {
                fs.inode_mut(ino)?.ctime = now;
            }
            Ok(())
        })
    }
}
