//! Extended attributes: SETXATTR, GETXATTR, LISTXATTR, REMOVEXATTR, with
//! POSIX ACLs and the control attributes of the root ([`crate::control`])
//! answered here before the engine's store.

use std::sync::atomic::Ordering;

use dualfs_engine::Error;
use dualfs_engine::types::InodeNo;
use dualfs_engine::volume::AclKind;

use super::report;
use crate::DualFs;
use crate::answers::{Caller, Errno, Xattr};
use crate::{caller, convert};

fn ino(n: u64) -> InodeNo {
    InodeNo(n)
}

/// A GETXATTR or LISTXATTR answer: size 0 asks how large a buffer to
/// bring; too small a buffer is ERANGE.
fn xattr_answer(data: Vec<u8>, size: u32) -> Result<Xattr, Errno> {
    let Ok(len) = u32::try_from(data.len()) else {
        return Err(Errno::E2BIG);
    };
    if size == 0 {
        Ok(Xattr::Size(len))
    } else if len > size {
        Err(Errno::ERANGE)
    } else {
        Ok(Xattr::Data(data))
    }
}

/// The namespace `nosecurity_xattr` turns off.
const SECURITY_PREFIX: &[u8] = b"security.";

impl DualFs {
    /// EOPNOTSUPP for a `security.*` name when the mount serves none
    /// (`nosecurity_xattr`), as a file system without that namespace
    /// answers; the kernel then takes the file to have no capability.
    fn refused_namespace(&self, name: &[u8]) -> Result<(), Errno> {
        if !self.options.security_xattrs && name.starts_with(SECURITY_PREFIX) { Err(Errno::EOPNOTSUPP) } else { Ok(()) }
    }

    /// SETXATTR with the `setxattr(2)` flags.
    ///
    /// # Errors
    /// EINVAL for unknown flags; the control interface's; the engine's.
    pub fn setxattr(&self, caller: Caller, node: u64, name: &[u8], value: &[u8], flags: i32) -> Result<(), Errno> {
        let _t = self.requests.time(crate::requests::Op::Setxattr);
        if Self::is_control(node, name) {
            return self.control_set(caller, name, Some(value));
        }
        self.refused_namespace(name)?;
        if let Some(kind) = AclKind::of_xattr(name) {
            let r = self.set_acl(caller, ino(node), kind, Some(value));
            if r.is_ok() {
                // The mode follows an access ACL, and loses set-group-id.
                self.attributes_changed(node, true);
            }
            return r.map_err(|e| report("setxattr", &e));
        }
        let mode = convert::xattr_mode(flags)?;
        self.vol.setxattr(ino(node), name, value, mode).map_err(|e| report("setxattr", &e))
    }

    /// GETXATTR into a buffer of `size` bytes (0: asks the size).
    ///
    /// # Errors
    /// ERANGE when the value is larger than `size`; the control
    /// interface's; the engine's.
    pub fn getxattr(&self, caller: Caller, node: u64, name: &[u8], size: u32) -> Result<Xattr, Errno> {
        let _t = self.requests.time(crate::requests::Op::Getxattr);
        if Self::is_control(node, name) {
            return xattr_answer(self.control_get(caller, name)?, size);
        }
        self.refused_namespace(name)?;
        match self.vol.getxattr(ino(node), name) {
            Ok(v) => xattr_answer(v, size),
            Err(e) => Err(report("getxattr", &e)),
        }
    }

    /// LISTXATTR into a buffer of `size` bytes (0: asks the size).
    ///
    /// # Errors
    /// ERANGE when the list is larger than `size`; the engine's.
    pub fn listxattr(&self, node: u64, size: u32) -> Result<Xattr, Errno> {
        let _t = self.requests.time(crate::requests::Op::Listxattr);
        match self.vol.listxattr(ino(node)) {
            Ok(mut names) => {
                if !self.options.security_xattrs {
                    names.retain(|n| !n.starts_with(SECURITY_PREFIX));
                }
                xattr_answer(convert::xattr_names(&names), size)
            }
            Err(e) => Err(report("listxattr", &e)),
        }
    }

    /// REMOVEXATTR.
    ///
    /// # Errors
    /// The control interface's; the engine's.
    pub fn removexattr(&self, caller: Caller, node: u64, name: &[u8]) -> Result<(), Errno> {
        let _t = self.requests.time(crate::requests::Op::Removexattr);
        if Self::is_control(node, name) {
            return self.control_set(caller, name, None);
        }
        self.refused_namespace(name)?;
        if let Some(kind) = AclKind::of_xattr(name) {
            let r = self.set_acl(caller, ino(node), kind, None);
            if r.is_ok() {
                self.attributes_changed(node, true);
            }
            return r.map_err(|e| report("removexattr", &e));
        }
        self.vol.removexattr(ino(node), name).map_err(|e| report("removexattr", &e))
    }

    /// Sets or removes an ACL. Without FUSE_POSIX_ACL the kernel would
    /// neither check ACLs nor keep them cached; they are refused then, as
    /// by a file system without ACL support, and tools fall back to chmod.
    ///
    /// Setting an access ACL drops the set-group-id bit unless the caller
    /// is in the file's group or privileged (as `posix_acl_update_mode`).
    /// The kernel tells a FUSE server that only through FUSE_SETXATTR_EXT,
    /// which the adapter does not negotiate, so it works it out itself.
    fn set_acl(&self, who: Caller, node: InodeNo, kind: AclKind, value: Option<&[u8]>) -> Result<(), Error> {
        if !self.acl.load(Ordering::Relaxed) {
            return Err(Error::NotSupported);
        }
        let clear_setgid = match (kind, value) {
            (AclKind::Access, Some(_)) => {
                let gid = self.vol.getattr(node)?.gid;
                !caller::in_group_or_root(who.uid, who.gid, who.pid, gid)
            }
            _ => false,
        };
        self.vol.set_acl(node, kind, value, clear_setgid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xattr_answer_is_its_size_its_value_or_erange() {
        assert_eq!(xattr_answer(b"abc".to_vec(), 0), Ok(Xattr::Size(3)));
        assert_eq!(xattr_answer(b"abc".to_vec(), 3), Ok(Xattr::Data(b"abc".to_vec())));
        assert_eq!(xattr_answer(b"abc".to_vec(), 2), Err(Errno::ERANGE));
    }
}
