//! Replies: [`ReplyBuf`], the buffer a transport lends the handler (the
//! io_uring entry's payload, or the space after the header of a /dev/fuse
//! write), and the encoders of every reply struct, appending to it. The
//! header is the transport's: the handler writes the payload only.

use std::time::Duration;

use super::{ATTR_LEN, DIRENT_LEN, ENTRY_OUT_LEN, KERNEL_VERSION, OUT_HEADER_LEN, encode_out_header, notify_code};

/// A reply's payload, written in place into memory the transport owns: at
/// most [`ReplyBuf::limit`] bytes. A READ can fill [`ReplyBuf::spare`]
/// straight from its source, with no copy between (on the io_uring path the
/// spare room is the memory the kernel copies the reply from).
///
/// Pushing past the limit writes nothing and marks the buffer overflowed;
/// the transport then answers EIO rather than a truncated struct.
#[derive(Debug)]
pub struct ReplyBuf<'a> {
    buf: &'a mut [u8],
    len: usize,
    overflowed: bool,
}

impl<'a> ReplyBuf<'a> {
    /// An empty reply over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, len: 0, overflowed: false }
    }

    /// The most bytes a reply may have.
    pub fn limit(&self) -> usize {
        self.buf.len()
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Forgets what was written (an error reply carries no payload).
    pub fn clear(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    /// Whether a push did not fit.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Appends `bytes` if they fit; says whether they did.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len += bytes.len();
                true
            }
            None => {
                self.overflowed = true;
                false
            }
        }
    }

    /// The room not yet written, to fill in place; then [`ReplyBuf::advance`].
    pub fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// Counts `n` bytes written into [`ReplyBuf::spare`] (at most its length).
    pub fn advance(&mut self, n: usize) {
        self.len = self.len.saturating_add(n).min(self.buf.len());
    }

    fn u32(&mut self, v: u32) {
        self.push(&v.to_ne_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.push(&v.to_ne_bytes());
    }

    fn zeros(&mut self, mut n: usize) {
        const Z: [u8; 64] = [0; 64];
        while n > 0 {
            let k = n.min(64);
            self.push(&Z[..k]);
            n -= k;
        }
    }

    /// `struct fuse_entry_out` (LOOKUP, MKDIR, MKNOD, SYMLINK, LINK).
    pub fn entry_out(&mut self, e: &EntryOut) {
        let mut b = [0u8; ENTRY_OUT_LEN];
        e.encode(&mut b);
        self.push(&b);
    }

    /// `struct fuse_attr_out` (GETATTR, SETATTR).
    pub fn attr_out(&mut self, attr: &Attr, valid: Duration) {
        self.u64(valid.as_secs());
        self.u32(valid.subsec_nanos());
        self.u32(0);
        let mut b = [0u8; ATTR_LEN];
        attr.encode(&mut b);
        self.push(&b);
    }

    /// `struct fuse_statx_out` (STATX): `attr` as GETATTR answers it, and
    /// the birth time when known (STATX_BTIME in the mask then).
    pub fn statx_out(&mut self, attr: &Attr, btime: Option<(i64, u32)>, valid: Duration) {
        const BASIC_STATS: u32 = 0x7ff;
        const BTIME: u32 = 0x800;
        self.u64(valid.as_secs());
        self.u32(valid.subsec_nanos());
        self.u32(0); // flags
        self.zeros(16); // spare
        self.u32(if btime.is_some() { BASIC_STATS | BTIME } else { BASIC_STATS });
        self.u32(attr.blksize);
        self.u64(0); // attributes
        self.u32(attr.nlink);
        self.u32(attr.uid);
        self.u32(attr.gid);
        // The type and permission bits fit: the kernel's mode is 16 bits.
        self.push(&((attr.mode & 0xffff) as u16).to_ne_bytes());
        self.zeros(2);
        self.u64(attr.ino);
        self.u64(attr.size);
        self.u64(attr.blocks);
        self.u64(0); // attributes_mask
        let (bsec, bnsec) = btime.unwrap_or((0, 0));
        for (sec, nsec) in
            [(attr.atime, attr.atime_nsec), (bsec, bnsec), (attr.ctime, attr.ctime_nsec), (attr.mtime, attr.mtime_nsec)]
        {
            self.u64(sec as u64);
            self.u32(nsec);
            self.u32(0);
        }
        // The new 32-bit encoding of a device number, split.
        self.u32((attr.rdev & 0xfff00) >> 8);
        self.u32((attr.rdev & 0xff) | ((attr.rdev >> 12) & 0xfff00));
        self.zeros(8 + 14 * 8); // dev_major, dev_minor, spare
    }

    /// `struct fuse_open_out` (OPEN, OPENDIR); `open_flags` from [`super::fopen`].
    pub fn open_out(&mut self, fh: u64, open_flags: u32) {
        self.u64(fh);
        self.u32(open_flags);
        self.u32(0);
    }

    /// The reply to CREATE: `fuse_entry_out` then `fuse_open_out`.
    pub fn create_out(&mut self, e: &EntryOut, fh: u64, open_flags: u32) {
        self.entry_out(e);
        self.open_out(fh, open_flags);
    }

    /// `struct fuse_write_out` (WRITE): the bytes written.
    pub fn write_out(&mut self, size: u32) {
        self.u32(size);
        self.u32(0);
    }

    /// `struct fuse_statfs_out` (STATFS).
    pub fn statfs_out(&mut self, st: &Kstatfs) {
        for v in [st.blocks, st.bfree, st.bavail, st.files, st.ffree] {
            self.u64(v);
        }
        for v in [st.bsize, st.namelen, st.frsize] {
            self.u32(v);
        }
        self.zeros(28); // padding, spare[6]
    }

    /// `struct fuse_getxattr_out` (GETXATTR or LISTXATTR asked with size 0):
    /// the size the value or the list would need.
    pub fn getxattr_out(&mut self, size: u32) {
        self.u32(size);
        self.u32(0);
    }

    /// `struct fuse_lseek_out` (LSEEK).
    pub fn lseek_out(&mut self, offset: u64) {
        self.u64(offset);
    }

    /// `struct fuse_ioctl_out` then the `out_size` bytes of `data` (IOCTL,
    /// restricted form: no retry iovecs).
    pub fn ioctl_out(&mut self, result: i32, data: &[u8]) {
        self.push(&result.to_ne_bytes());
        self.zeros(12); // flags, in_iovs, out_iovs
        self.push(data);
    }

    /// Appends one `struct fuse_dirent` (8-byte aligned) if the payload
    /// stays within `size` bytes (READDIR's size) and the limit; says
    /// whether it did. `off` is the offset of the entry after this one.
    pub fn push_dirent(&mut self, size: usize, ino: u64, off: u64, kind: u32, name: &[u8]) -> bool {
        let len = (DIRENT_LEN + name.len()).next_multiple_of(8);
        if self.len + len > size.min(self.limit()) {
            return false;
        }
        self.dirent(ino, off, kind, name, len);
        true
    }

    /// Appends one `struct fuse_direntplus` (READDIRPLUS) if it fits, like
    /// [`ReplyBuf::push_dirent`]. An `entry` with node id 0 says "no entry,
    /// no attributes": the kernel lists the name and looks it up later.
    pub fn push_direntplus(&mut self, size: usize, entry: &EntryOut, off: u64, kind: u32, name: &[u8]) -> bool {
        let len = (ENTRY_OUT_LEN + DIRENT_LEN + name.len()).next_multiple_of(8);
        if self.len + len > size.min(self.limit()) {
            return false;
        }
        self.entry_out(entry);
        self.dirent(entry.attr.ino, off, kind, name, len - ENTRY_OUT_LEN);
        true
    }

    fn dirent(&mut self, ino: u64, off: u64, kind: u32, name: &[u8], len: usize) {
        self.u64(ino);
        self.u64(off);
        self.u32(u32::try_from(name.len()).unwrap_or(u32::MAX));
        self.u32(kind);
        self.push(name);
        self.zeros(len - DIRENT_LEN - name.len());
    }
}

/// `struct fuse_attr`: every field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub atime_nsec: u32,
    pub mtime_nsec: u32,
    pub ctime_nsec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

impl Attr {
    fn encode(&self, b: &mut [u8; ATTR_LEN]) {
        let mut at = 0;
        let mut put = |v: &[u8]| {
            b[at..at + v.len()].copy_from_slice(v);
            at += v.len();
        };
        for v in [self.ino, self.size, self.blocks] {
            put(&v.to_ne_bytes());
        }
        for v in [self.atime, self.mtime, self.ctime] {
            put(&v.to_ne_bytes());
        }
        let small = [
            self.atime_nsec,
            self.mtime_nsec,
            self.ctime_nsec,
            self.mode,
            self.nlink,
            self.uid,
            self.gid,
            self.rdev,
            self.blksize,
            self.flags,
        ];
        for v in small {
            put(&v.to_ne_bytes());
        }
    }
}

/// `struct fuse_entry_out`. A `nodeid` of 0 in a LOOKUP reply is a
/// negative entry the kernel caches for `entry_valid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: Duration,
    pub attr_valid: Duration,
    pub attr: Attr,
}

impl EntryOut {
    fn encode(&self, b: &mut [u8; ENTRY_OUT_LEN]) {
        b[0..8].copy_from_slice(&self.nodeid.to_ne_bytes());
        b[8..16].copy_from_slice(&self.generation.to_ne_bytes());
        b[16..24].copy_from_slice(&self.entry_valid.as_secs().to_ne_bytes());
        b[24..32].copy_from_slice(&self.attr_valid.as_secs().to_ne_bytes());
        b[32..36].copy_from_slice(&self.entry_valid.subsec_nanos().to_ne_bytes());
        b[36..40].copy_from_slice(&self.attr_valid.subsec_nanos().to_ne_bytes());
        let mut a = [0u8; ATTR_LEN];
        self.attr.encode(&mut a);
        b[40..].copy_from_slice(&a);
    }
}

/// `struct fuse_kstatfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kstatfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// The reply to INIT (`struct fuse_init_out`) as a handler shapes it; the
/// transport fills in the minor version, keeps only flags the kernel
/// offered, and adds INIT_EXT and OVER_IO_URING as needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitOut {
    pub minor: u32,
    pub max_readahead: u32,
    /// `flags | flags2 << 32` ([`super::init_flags`]).
    pub flags: u64,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    /// Time stamp granularity in nanoseconds (1: full precision).
    pub time_gran: u32,
    /// Pages per request (with MAX_PAGES).
    pub max_pages: u16,
}

impl Default for InitOut {
    fn default() -> Self {
        Self {
            minor: 0,
            // The kernel's offer (the smaller of the two counts).
            max_readahead: u32::MAX,
            flags: 0,
            max_background: 16,
            congestion_threshold: 12,
            max_write: 128 * 1024,
            time_gran: 1,
            max_pages: 32,
        }
    }
}

impl InitOut {
    /// Appends the 64-byte encoding.
    pub fn encode(&self, out: &mut ReplyBuf<'_>) {
        let low = u32::try_from(self.flags & 0xffff_ffff).unwrap_or(0);
        let high = u32::try_from(self.flags >> 32).unwrap_or(0);
        for v in [KERNEL_VERSION, self.minor, self.max_readahead, low] {
            out.u32(v);
        }
        out.push(&self.max_background.to_ne_bytes());
        out.push(&self.congestion_threshold.to_ne_bytes());
        out.u32(self.max_write);
        out.u32(self.time_gran);
        out.push(&self.max_pages.to_ne_bytes());
        out.push(&0u16.to_ne_bytes()); // map_alignment
        out.u32(high);
        out.zeros(28); // max_stack_depth, request_timeout, unused
    }

    /// The largest payload a request or reply may carry:
    /// `max(max_write, max_pages × 4 KiB)`, what the kernel demands of each
    /// io_uring entry's payload buffer.
    pub fn max_payload(&self) -> usize {
        let w = usize::try_from(self.max_write).unwrap_or(usize::MAX);
        w.max(usize::from(self.max_pages) * 4096)
    }
}

/// A whole notification message: out header (unique 0, error = code), the
/// struct, then a NUL-terminated name if any.
fn notification(code: i32, body: &[u8], name: Option<&[u8]>) -> Vec<u8> {
    let len = OUT_HEADER_LEN + body.len() + name.map_or(0, |n| n.len() + 1);
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&encode_out_header(len, code, 0));
    m.extend_from_slice(body);
    if let Some(n) = name {
        m.extend_from_slice(n);
        m.push(0);
    }
    m
}

/// FUSE_NOTIFY_INVAL_INODE: drop cached attributes of `ino` and its cached
/// data from `off` for `len` bytes (`len` 0: to the end; `off` < 0: only
/// the attributes).
pub fn notify_inval_inode(ino: u64, off: i64, len: i64) -> Vec<u8> {
    let mut b = [0u8; 24];
    b[0..8].copy_from_slice(&ino.to_ne_bytes());
    b[8..16].copy_from_slice(&off.to_ne_bytes());
    b[16..24].copy_from_slice(&len.to_ne_bytes());
    notification(notify_code::INVAL_INODE, &b, None)
}

/// FUSE_NOTIFY_INVAL_ENTRY: drop the cached name `name` in `parent`
/// (`flags`: [`super::FUSE_EXPIRE_ONLY`] or 0).
pub fn notify_inval_entry(parent: u64, name: &[u8], flags: u32) -> Vec<u8> {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&parent.to_ne_bytes());
    b[8..12].copy_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_ne_bytes());
    b[12..16].copy_from_slice(&flags.to_ne_bytes());
    notification(notify_code::INVAL_ENTRY, &b, Some(name))
}

/// FUSE_NOTIFY_DELETE: `name` in `parent`, which was `child`, is gone.
pub fn notify_delete(parent: u64, child: u64, name: &[u8]) -> Vec<u8> {
    let mut b = [0u8; 24];
    b[0..8].copy_from_slice(&parent.to_ne_bytes());
    b[8..16].copy_from_slice(&child.to_ne_bytes());
    b[16..20].copy_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_ne_bytes());
    notification(notify_code::DELETE, &b, Some(name))
}
