//! Notifications: the server tells the kernel that something it caches
//! changed without a request (the cleaner moved data, an xattr was set
//! through the control interface). They are writes to /dev/fuse on either
//! transport: the kernel refuses them on the ring.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;

use crate::abi;

/// Sends notifications on one session; cheap to clone, usable from any
/// thread. Do not send one about a node from inside the handling of a
/// request on that node's data: invalidating pages waits for their locks.
#[derive(Debug, Clone)]
pub struct Notifier {
    dev: Arc<File>,
}

impl Notifier {
    pub(crate) fn new(dev: Arc<File>) -> Self {
        Self { dev }
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        match (&*self.dev).write(msg) {
            Ok(n) if n == msg.len() => Ok(()),
            Ok(n) => Err(io::Error::other(format!("notification cut to {n} of {} bytes", msg.len()))),
            // The kernel had nothing cached to invalidate (also what it
            // says once the file system is unmounted).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Drops the kernel's cached attributes of `ino`, and its cached data
    /// from `off` for `len` bytes (`len` 0: to the end; `off` negative:
    /// the attributes only).
    ///
    /// # Errors
    ///
    /// The write's error (ENODEV: the session has ended).
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> io::Result<()> {
        self.send(&abi::notify_inval_inode(ino, off, len))
    }

    /// Drops the kernel's cached name `name` in directory `parent` (the next
    /// use of the name sends a LOOKUP).
    ///
    /// # Errors
    ///
    /// The write's error (ENODEV: the session has ended).
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        self.send(&abi::notify_inval_entry(parent, name, 0))
    }

    /// Tells the kernel that `name` in `parent`, which was `child`, is gone:
    /// as [`Notifier::inval_entry`], and the child's dentry is deleted too.
    ///
    /// # Errors
    ///
    /// The write's error (ENODEV: the session has ended).
    pub fn delete(&self, parent: u64, child: u64, name: &[u8]) -> io::Result<()> {
        self.send(&abi::notify_delete(parent, child, name))
    }
}
