//! The extended-attribute operations of [`Volume`].

use super::{Volume, lock};
use crate::error::Result;
use crate::meta_log::segments::OpKind;
use crate::namespace::xattr::SetMode;
use crate::types::InodeNo;

impl Volume {
    /// The value of an extended attribute.
    ///
    /// # Errors
    /// `NoXattr`.
    pub fn getxattr(&self, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        lock(&self.fs).xattr_get(ino, name)
    }

    /// Every extended attribute name.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn listxattr(&self, ino: InodeNo) -> Result<Vec<Vec<u8>>> {
        lock(&self.fs).xattr_list(ino)
    }

    /// Sets an extended attribute.
    ///
    /// # Errors
    /// `Exists`/`NoXattr` per `mode`, `XattrTooBig`, `NameTooLong`.
    pub fn setxattr(&self, ino: InodeNo, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        self.mutate(OpKind::Grow, |fs, now| {
            fs.xattr_set(ino, name, value, mode)?;
            fs.log.inode_mut(ino)?.ctime = now;
            Ok(())
        })
    }

    /// Removes an extended attribute.
    ///
    /// # Errors
    /// `NoXattr`.
    pub fn removexattr(&self, ino: InodeNo, name: &[u8]) -> Result<()> {
        self.mutate(OpKind::Shrink, |fs, now| {
            fs.xattr_remove(ino, name)?;
            fs.log.inode_mut(ino)?.ctime = now;
            Ok(())
        })
    }
}
