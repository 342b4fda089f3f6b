//! Requests: every opcode DualFS's adapter serves, decoded into
//! [`Request`] from the two ways the kernel lays them out. On /dev/fuse a
//! message is the header followed by the arguments back to back; on an
//! io_uring queue the header and the first argument (the opcode's fixed
//! struct) sit in the entry's header buffer and the rest (names, data) in
//! its payload. Both end up in [`Request::decode`], which never panics.

use super::{DecodeError, IN_HEADER_LEN, InHeader, KERNEL_MINOR_VERSION, Reader, init_flags, opcode};

/// `struct fuse_init_in`: what the kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    /// `flags | flags2 << 32`.
    pub flags: u64,
}

/// What decoding depends on from the INIT negotiation: the fixed part of
/// SETXATTR is 16 bytes with FUSE_SETXATTR_EXT and 8 without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub minor: u32,
    /// The flags both sides agreed on.
    pub flags: u64,
}

impl Default for Negotiated {
    fn default() -> Self {
        Self { minor: KERNEL_MINOR_VERSION, flags: 0 }
    }
}

/// `struct fuse_setattr_in`: `valid` ([`super::fattr`]) says which fields
/// count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetattrIn {
    pub valid: u32,
    pub fh: u64,
    pub size: u64,
    pub lock_owner: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub atime_nsec: u32,
    pub mtime_nsec: u32,
    pub ctime_nsec: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The `(nodeid, nlookup)` pairs of a BATCH_FORGET, checked to be whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forgets<'a>(&'a [u8]);

impl<'a> Forgets<'a> {
    /// The pairs, in the kernel's order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        forget_pairs(self.0)
    }

    /// How many pairs there are.
    pub fn len(&self) -> usize {
        self.0.len() / 16
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The `(nodeid, nlookup)` pairs of 16-byte records (a trailing partial
/// record is ignored).
pub fn forget_pairs(pairs: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    pairs.chunks_exact(16).map(|c| {
        let (a, b) = c.split_at(8);
        (u64::from_ne_bytes(a.try_into().unwrap_or([0; 8])), u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
    })
}

/// A decoded request. Field names are those of the uapi structs. Node ids
/// (the request's own and the parent of a name) are in [`InHeader::nodeid`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Lookup {
        name: &'a [u8],
    },
    /// The kernel drops `nlookup` references to the header's node; no reply.
    Forget {
        nlookup: u64,
    },
    /// Several FORGETs at once; no reply.
    BatchForget {
        forgets: Forgets<'a>,
    },
    /// `fh` is valid when `flags` has [`super::req_flags::GETATTR_FH`].
    Getattr {
        flags: u32,
        fh: u64,
    },
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        mode: u32,
        rdev: u32,
        umask: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Rename2 {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    /// A new name `newname` in the header's directory for `oldnodeid`.
    Link {
        oldnodeid: u64,
        newname: &'a [u8],
    },
    Open {
        flags: u32,
        open_flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        read_flags: u32,
        lock_owner: u64,
        flags: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
        lock_owner: u64,
        flags: u32,
    },
    Statfs,
    Release {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    },
    Fsync {
        fh: u64,
        fsync_flags: u32,
    },
    /// `setxattr_flags` is 0 unless FUSE_SETXATTR_EXT was negotiated.
    Setxattr {
        name: &'a [u8],
        value: &'a [u8],
        flags: u32,
        setxattr_flags: u32,
    },
    /// `size` 0 asks for the value's size only.
    Getxattr {
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush {
        fh: u64,
        lock_owner: u64,
    },
    /// Negotiated by the transport; never passed to a handler.
    Init(InitIn),
    Opendir {
        flags: u32,
        open_flags: u32,
    },
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Readdirplus {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    },
    Fsyncdir {
        fh: u64,
        fsync_flags: u32,
    },
    Access {
        mask: u32,
    },
    Create {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
        name: &'a [u8],
    },
    /// O_TMPFILE (Linux 6.1): an unnamed regular file in the header's
    /// directory, opened; answered as CREATE.
    Tmpfile {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    },
    /// The kernel gave up waiting for request `unique`; no reply.
    Interrupt {
        unique: u64,
    },
    Destroy,
    /// `data` is the `in_size` bytes the caller passed in.
    Ioctl {
        fh: u64,
        flags: u32,
        cmd: u32,
        arg: u64,
        in_size: u32,
        out_size: u32,
        data: &'a [u8],
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    Lseek {
        fh: u64,
        offset: u64,
        whence: u32,
    },
    CopyFileRange {
        fh_in: u64,
        off_in: u64,
        nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    },
    Syncfs,
    /// `struct fuse_statx_in`: the `statx(2)` flags and mask asked for
    /// (sent for STATX_BTIME, Linux 6.6+).
    Statx {
        getattr_flags: u32,
        fh: u64,
        sx_flags: u32,
        sx_mask: u32,
    },
    /// An opcode not decoded here (answer ENOSYS and the kernel mostly
    /// stops sending it).
    Unknown {
        opcode: u32,
    },
}

/// A non-empty NUL-terminated string at the start of `buf`, without the
/// NUL, and what follows the NUL.
fn cstr(buf: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    let end = buf.iter().position(|&b| b == 0).ok_or(DecodeError::Name)?;
    let (n, rest) = (&buf[..end], &buf[end + 1..]);
    if n.is_empty() {
        return Err(DecodeError::Name);
    }
    Ok((n, rest))
}

/// A directory entry's name: a [`cstr`] without '/' ("." and ".." may come,
/// from NFS export lookups).
fn name(buf: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    let (n, rest) = cstr(buf)?;
    if n.contains(&b'/') {
        return Err(DecodeError::Name);
    }
    Ok((n, rest))
}

/// The first `n` bytes of `buf`, or a [`DecodeError::Short`] naming `what`.
fn bytes<'a>(buf: &'a [u8], n: u32, what: &'static str) -> Result<&'a [u8], DecodeError> {
    let need = usize::try_from(n).unwrap_or(usize::MAX);
    buf.get(..need).ok_or(DecodeError::Short { what, need, have: buf.len() })
}

/// Length of the opcode's fixed argument struct (`in_args[0]`), the part the
/// io_uring transport puts in the op header area; what follows (names,
/// data) is in the payload. On /dev/fuse both follow the header back to back.
pub fn op_header_len(opcode: u32, neg: &Negotiated) -> usize {
    match opcode {
        opcode::FORGET | opcode::INTERRUPT | opcode::BATCH_FORGET | opcode::SYNCFS => 8,
        opcode::OPEN | opcode::OPENDIR | opcode::MKDIR | opcode::RENAME | opcode::LINK => 8,
        opcode::GETXATTR | opcode::LISTXATTR | opcode::ACCESS => 8,
        opcode::SETXATTR if neg.flags & init_flags::SETXATTR_EXT != 0 => 16,
        opcode::SETXATTR => 8,
        opcode::GETATTR | opcode::CREATE | opcode::TMPFILE | opcode::MKNOD | opcode::FSYNC | opcode::FSYNCDIR => 16,
        opcode::RENAME2 => 16,
        opcode::RELEASE | opcode::RELEASEDIR | opcode::FLUSH | opcode::LSEEK | opcode::STATX => 24,
        opcode::IOCTL | opcode::FALLOCATE => 32,
        opcode::READ | opcode::WRITE | opcode::READDIR | opcode::READDIRPLUS => 40,
        opcode::COPY_FILE_RANGE => 56,
        opcode::SETATTR => 88,
        opcode::INIT => 64,
        _ => 0,
    }
}

impl<'a> Request<'a> {
    /// Decodes a request whose fixed argument struct is `fixed` (at least
    /// [`op_header_len`] bytes; more is ignored) and whose variable part
    /// (names, data) is `rest`.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when either part is too short or a name is malformed.
    pub fn decode(opcode: u32, fixed: &'a [u8], rest: &'a [u8], neg: &Negotiated) -> Result<Self, DecodeError> {
        let mut r = Reader::new(fixed, "op header");
        Ok(match opcode {
            opcode::INIT => {
                let major = r.u32()?;
                let minor = r.u32()?;
                let max_readahead = r.u32()?;
                let flags = u64::from(r.u32()?);
                // flags2 exists from 7.36 on; an older kernel sends 16 bytes.
                let flags2 = if minor >= 36 {
                    let f = r.u32()?;
                    r.skip(44)?;
                    u64::from(f)
                } else {
                    0
                };
                Self::Init(InitIn { major, minor, max_readahead, flags: flags | flags2 << 32 })
            }
            opcode::LOOKUP => Self::Lookup { name: name(rest)?.0 },
            opcode::FORGET => Self::Forget { nlookup: r.u64()? },
            opcode::BATCH_FORGET => {
                let count = r.u32()?;
                r.skip(4)?;
                let pairs = bytes(rest, count.saturating_mul(16), "forget pairs")?;
                Self::BatchForget { forgets: Forgets(pairs) }
            }
            opcode::GETATTR => {
                let flags = r.u32()?;
                r.skip(4)?;
                Self::Getattr { flags, fh: r.u64()? }
            }
            opcode::SETATTR => {
                let valid = r.u32()?;
                r.skip(4)?;
                let (fh, size, lock_owner) = (r.u64()?, r.u64()?, r.u64()?);
                let (atime, mtime, ctime) = (r.i64()?, r.i64()?, r.i64()?);
                let (atime_nsec, mtime_nsec, ctime_nsec, mode) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                r.skip(4)?;
                let (uid, gid) = (r.u32()?, r.u32()?);
                r.skip(4)?;
                Self::Setattr(SetattrIn {
                    valid,
                    fh,
                    size,
                    lock_owner,
                    atime,
                    mtime,
                    ctime,
                    atime_nsec,
                    mtime_nsec,
                    ctime_nsec,
                    mode,
                    uid,
                    gid,
                })
            }
            opcode::READLINK => Self::Readlink,
            opcode::SYMLINK => {
                let (n, after) = name(rest)?;
                Self::Symlink { name: n, target: cstr(after)?.0 }
            }
            opcode::MKNOD => {
                let (mode, rdev, umask) = (r.u32()?, r.u32()?, r.u32()?);
                r.skip(4)?;
                Self::Mknod { mode, rdev, umask, name: name(rest)?.0 }
            }
            opcode::MKDIR => {
                let (mode, umask) = (r.u32()?, r.u32()?);
                Self::Mkdir { mode, umask, name: name(rest)?.0 }
            }
            opcode::UNLINK => Self::Unlink { name: name(rest)?.0 },
            opcode::RMDIR => Self::Rmdir { name: name(rest)?.0 },
            opcode::RENAME => {
                let newdir = r.u64()?;
                let (n, after) = name(rest)?;
                Self::Rename { newdir, name: n, newname: name(after)?.0 }
            }
            opcode::RENAME2 => {
                let (newdir, flags) = (r.u64()?, r.u32()?);
                r.skip(4)?;
                let (n, after) = name(rest)?;
                Self::Rename2 { newdir, flags, name: n, newname: name(after)?.0 }
            }
            opcode::LINK => Self::Link { oldnodeid: r.u64()?, newname: name(rest)?.0 },
            opcode::OPEN | opcode::OPENDIR => {
                let (flags, open_flags) = (r.u32()?, r.u32()?);
                if opcode == opcode::OPEN {
                    Self::Open { flags, open_flags }
                } else {
                    Self::Opendir { flags, open_flags }
                }
            }
            opcode::READ => {
                let (fh, offset, size, read_flags) = (r.u64()?, r.u64()?, r.u32()?, r.u32()?);
                let (lock_owner, flags) = (r.u64()?, r.u32()?);
                r.skip(4)?;
                Self::Read { fh, offset, size, read_flags, lock_owner, flags }
            }
            opcode::WRITE => {
                let (fh, offset, size, write_flags) = (r.u64()?, r.u64()?, r.u32()?, r.u32()?);
                let (lock_owner, flags) = (r.u64()?, r.u32()?);
                r.skip(4)?;
                let data = bytes(rest, size, "write data")?;
                Self::Write { fh, offset, data, write_flags, lock_owner, flags }
            }
            opcode::STATFS => Self::Statfs,
            opcode::RELEASE | opcode::RELEASEDIR => {
                let (fh, flags, release_flags, lock_owner) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
                if opcode == opcode::RELEASE {
                    Self::Release { fh, flags, release_flags, lock_owner }
                } else {
                    Self::Releasedir { fh, flags, release_flags, lock_owner }
                }
            }
            opcode::FSYNC | opcode::FSYNCDIR => {
                let (fh, fsync_flags) = (r.u64()?, r.u32()?);
                r.skip(4)?;
                if opcode == opcode::FSYNC {
                    Self::Fsync { fh, fsync_flags }
                } else {
                    Self::Fsyncdir { fh, fsync_flags }
                }
            }
            opcode::SETXATTR => {
                let (size, flags) = (r.u32()?, r.u32()?);
                let setxattr_flags = if neg.flags & init_flags::SETXATTR_EXT != 0 {
                    let f = r.u32()?;
                    r.skip(4)?;
                    f
                } else {
                    0
                };
                let (n, after) = cstr(rest)?;
                Self::Setxattr { name: n, value: bytes(after, size, "xattr value")?, flags, setxattr_flags }
            }
            opcode::GETXATTR => {
                let size = r.u32()?;
                r.skip(4)?;
                Self::Getxattr { name: cstr(rest)?.0, size }
            }
            opcode::LISTXATTR => {
                let size = r.u32()?;
                r.skip(4)?;
                Self::Listxattr { size }
            }
            opcode::REMOVEXATTR => Self::Removexattr { name: cstr(rest)?.0 },
            opcode::FLUSH => {
                let fh = r.u64()?;
                r.skip(8)?;
                Self::Flush { fh, lock_owner: r.u64()? }
            }
            opcode::READDIR | opcode::READDIRPLUS => {
                let (fh, offset, size) = (r.u64()?, r.u64()?, r.u32()?);
                r.skip(20)?;
                if opcode == opcode::READDIR {
                    Self::Readdir { fh, offset, size }
                } else {
                    Self::Readdirplus { fh, offset, size }
                }
            }
            opcode::ACCESS => {
                let mask = r.u32()?;
                r.skip(4)?;
                Self::Access { mask }
            }
            opcode::CREATE => {
                let (flags, mode, umask, open_flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                Self::Create { flags, mode, umask, open_flags, name: name(rest)?.0 }
            }
            // The kernel names the unnamed file "/" (`vfs_tmpfile`'s
            // dentry): a name no entry can have, read and left aside.
            opcode::TMPFILE => {
                let (flags, mode, umask, open_flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
                cstr(rest)?;
                Self::Tmpfile { flags, mode, umask, open_flags }
            }
            opcode::INTERRUPT => Self::Interrupt { unique: r.u64()? },
            opcode::DESTROY => Self::Destroy,
            opcode::IOCTL => {
                let (fh, flags, cmd, arg) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
                let (in_size, out_size) = (r.u32()?, r.u32()?);
                let data = bytes(rest, in_size, "ioctl data")?;
                Self::Ioctl { fh, flags, cmd, arg, in_size, out_size, data }
            }
            opcode::FALLOCATE => {
                let (fh, offset, length, mode) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
                r.skip(4)?;
                Self::Fallocate { fh, offset, length, mode }
            }
            opcode::STATX => {
                let getattr_flags = r.u32()?;
                r.skip(4)?;
                let (fh, sx_flags, sx_mask) = (r.u64()?, r.u32()?, r.u32()?);
                Self::Statx { getattr_flags, fh, sx_flags, sx_mask }
            }
            opcode::LSEEK => {
                let (fh, offset, whence) = (r.u64()?, r.u64()?, r.u32()?);
                r.skip(4)?;
                Self::Lseek { fh, offset, whence }
            }
            opcode::COPY_FILE_RANGE => Self::CopyFileRange {
                fh_in: r.u64()?,
                off_in: r.u64()?,
                nodeid_out: r.u64()?,
                fh_out: r.u64()?,
                off_out: r.u64()?,
                len: r.u64()?,
                flags: r.u64()?,
            },
            opcode::SYNCFS => {
                r.skip(8)?;
                Self::Syncfs
            }
            other => Self::Unknown { opcode: other },
        })
    }

    /// Decodes one message as read from /dev/fuse: header, then the
    /// arguments back to back, then the extensions (left out).
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the message is shorter than its header says or
    /// than its opcode needs.
    pub fn decode_message(msg: &'a [u8], neg: &Negotiated) -> Result<(InHeader, Self), DecodeError> {
        let h = InHeader::decode(msg)?;
        if usize::try_from(h.len).ok() != Some(msg.len()) {
            return Err(DecodeError::Length { header: h.len, received: msg.len() });
        }
        let body = &msg[IN_HEADER_LEN..];
        let body = body.get(..body.len().saturating_sub(h.ext_len())).unwrap_or_default();
        let (fixed, rest) = body.split_at(op_header_len(h.opcode, neg).min(body.len()));
        Ok((h, Self::decode(h.opcode, fixed, rest, neg)?))
    }
}
