//! What the adapter answers, in no transport's types: the requests' work
//! is done by methods of [`crate::DualFs`] (crate `ops`) that take plain
//! node ids, names, credentials and the kernel's flag words, and return
//! these. The transport (`dualfs-wire`'s /dev/fuse and io_uring queues,
//! through `wire.rs`) decodes a request, calls the method and encodes the
//! answer; flag words keep the values of the kernel's uapi header
//! (<linux/fuse.h>).

use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dualfs_engine::volume::Attr;

/// An errno to answer with. The engine chooses it for its errors
/// ([`dualfs_engine::Error::errno`]); the adapter only for requests the
/// engine never sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(i32);

#[allow(missing_docs)]
impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// The xattr is not there (ENODATA on Linux).
    pub const NO_XATTR: Errno = Errno(libc::ENODATA);

    /// An errno by its number; anything not positive becomes EIO, so that
    /// a reply never claims success by mistake.
    #[must_use]
    pub fn from_i32(code: i32) -> Errno {
        if code > 0 { Errno(code) } else { Errno::EIO }
    }

    /// The number, positive.
    #[must_use]
    pub fn code(self) -> i32 {
        self.0
    }
}

/// The process behind a request, as the kernel names it in the request's
/// header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// File-system user id.
    pub uid: u32,
    /// File-system group id.
    pub gid: u32,
    /// Thread group id (0 for requests the kernel sends on its own).
    pub pid: u32,
}

/// A name's entry: the kernel takes a lookup reference on it (the adapter
/// has counted it with `remember`) unless it is negative.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The inode; none for a negative entry (node id 0: the name does not
    /// exist, and the kernel may remember so for `entry_ttl`).
    pub attr: Option<Attr>,
    /// How long the kernel may trust the attributes.
    pub attr_ttl: Duration,
    /// How long the kernel may trust the name.
    pub entry_ttl: Duration,
}

impl Entry {
    /// The node id; 0 for a negative entry.
    #[must_use]
    pub fn ino(&self) -> u64 {
        self.attr.as_ref().map_or(0, |a| a.ino.0)
    }

    /// The inode's generation (with the node id, what NFS file handles name).
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.attr.as_ref().map_or(0, |a| u64::from(a.generation))
    }
}

/// `fuse_open_out.open_flags`: bypass the page cache.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `fuse_open_out.open_flags`: keep the page cache of earlier opens.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;

/// An open file or directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The handle (always 0: handles are stateless).
    pub fh: u64,
    /// `FOPEN_*` bits.
    pub flags: u32,
}

/// A GETXATTR or LISTXATTR answer: the size asked for (a request with
/// size 0), or the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Xattr {
    /// The value's length.
    Size(u32),
    /// The value.
    Data(Vec<u8>),
}

/// `fuse_write_in.write_flags`: a write-back from the page cache.
pub const FUSE_WRITE_CACHE: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: the writer may not keep set-id bits.
pub const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// INIT capability bits (`fuse_init_in.flags | flags2 << 32`) the adapter
/// asks for; the reasons are where they are asked (crate `ops`).
#[allow(missing_docs)]
pub mod init {
    pub const FUSE_POSIX_ACL: u64 = 1 << 20;
    pub const FUSE_DONT_MASK: u64 = 1 << 6;
    pub const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;
    pub const FUSE_DO_READDIRPLUS: u64 = 1 << 13;
    pub const FUSE_READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
    pub const FUSE_CACHE_SYMLINKS: u64 = 1 << 23;
    pub const FUSE_EXPORT_SUPPORT: u64 = 1 << 4;
    pub const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const FUSE_DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
}

/// How the adapter tells the kernel that something it caches changed
/// behind its back; each transport's notifier is one.
pub trait Notify: Send + Sync {
    /// Forget the attributes of `ino`, and its pages from `offset` for
    /// `len` bytes (0: to the end; offset -1: the attributes only).
    ///
    /// # Errors
    /// The kernel refused or the connection is gone.
    fn inval_inode(&self, ino: u64, offset: i64, len: i64) -> io::Result<()>;

    /// Forget the entry `name` in directory `parent`.
    ///
    /// # Errors
    /// The kernel refused or the connection is gone.
    fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()>;
}

impl std::fmt::Debug for dyn Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify")
    }
}

/// Where the mounting code puts the session's notifier, which exists only
/// once the adapter has been handed to the session.
pub type NotifierSlot = Arc<OnceLock<Box<dyn Notify>>>;
